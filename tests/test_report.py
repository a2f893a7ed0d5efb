"""The report command on sweep directories built from synthetic job frames."""

import json
import re

import matplotlib
import pandas as pd
import pytest
from synthetic import make_frame
from test_verdict import HEALTHY

from coordcheck.core.frame import write_frame
from coordcheck.report import main
from coordcheck.core.text import md_escape


def _sweep(tmp_path, frame, *, failed=()):
    for w, g in frame.groupby("width"):
        write_frame(g, tmp_path / f"width={w}" / "frame.parquet")
        (tmp_path / f"width={w}" / "job.json").write_text(json.dumps({"status": "ok"}))
    for w in failed:
        d = tmp_path / f"width={w}"
        d.mkdir()
        (d / "job.json").write_text(json.dumps({"status": "failed", "error": "CUDA out of memory"}))
    return tmp_path


@pytest.mark.parametrize("series,code", [
    (HEALTHY, 0), ({**HEALTHY, ("h1", "hidden", "delta"): 1.0}, 1),
])
def test_strict_exit_codes_pass_fail(tmp_path, series, code, capsys):
    sweep = _sweep(tmp_path, make_frame(series))
    assert main([str(sweep), "--strict", "--no-figures"]) == code
    assert main([str(sweep), "--no-figures"]) == 0  # without --strict: 0 when a report was written
    out = capsys.readouterr().out
    assert ("PASS" if code == 0 else "FAIL") in out and "report.md" in out


def test_strict_inconclusive_is_2_and_failed_jobs_are_listed(tmp_path, capsys):
    sweep = _sweep(tmp_path, make_frame(HEALTHY, widths=(64, 128)), failed=(256,))
    assert main([str(sweep), "--strict", "--no-figures"]) == 2
    out = capsys.readouterr().out
    assert "job width=256 failed: CUDA out of memory" in out
    payload = json.loads((sweep / "report" / "report.json").read_text())
    assert payload["status"] == "inconclusive" and payload["passed"] is False
    assert payload["jobs"]["problems"] == [{"job": "width=256", "status": "failed", "error": "CUDA out of memory"}]
    assert "CUDA out of memory" in (sweep / "report" / "report.md").read_text()


def test_a_failed_job_turns_pass_into_inconclusive(tmp_path):
    sweep = _sweep(tmp_path, make_frame(HEALTHY), failed=(1024,))
    assert main([str(sweep), "--strict", "--no-figures"]) == 2


def test_json_schema_nan_as_null_and_rerun_is_safe(tmp_path):
    sweep = _sweep(tmp_path, make_frame({**HEALTHY, ("z", "output", "out"): "zero"}))
    main([str(sweep), "--no-figures"])
    first = (sweep / "report" / "report.json").read_text()
    main([str(sweep), "--no-figures"])  # re-run: same result, the report dir is not read as a job
    text = (sweep / "report" / "report.json").read_text()
    assert text == first and "NaN" not in text
    p = json.loads(text)
    assert p["schema"] == "coordcheck.report/1"
    assert set(p) >= {"status", "passed", "reason", "rules", "widths", "jobs", "configurations", "modules", "worst",
                      "instability", "figures", "command", "config"}
    z = next(m for m in p["modules"] if m["module"] == "z")
    assert z["status"] == "zero" and z["slope"] is None
    slopes = pd.read_csv(sweep / "report" / "slopes.csv")
    assert {"slope", "ci_low", "ci_high", "n_widths"} <= set(slopes.columns)
    assert pd.read_parquet(sweep / "report" / "slopes.parquet").shape == slopes.shape


def test_stat_and_tolerance_from_the_command_line(tmp_path):
    frame = make_frame({**HEALTHY, ("h1", "hidden", "out"): 0.15})
    sweep = _sweep(tmp_path, frame)
    assert main([str(sweep), "--strict", "--no-figures"]) == 0
    assert main([str(sweep), "--strict", "--no-figures", "--tol", "0.1"]) == 1
    assert json.loads((sweep / "report" / "report.json").read_text())["rules"]["tol"] == 0.1


def test_module_names_are_escaped_in_markdown(tmp_path):
    evil = "blocks.0|<script>alert(1)</script>"
    frame = make_frame({**HEALTHY, (evil, "hidden", "delta"): 1.0})
    sweep = _sweep(tmp_path, frame)
    main([str(sweep), "--no-figures"])
    md = (sweep / "report" / "report.md").read_text()
    assert re.search(r"(?<!\\)<", md) is None and md_escape(evil) in md  # no HTML: every < is escaped
    row = next(line for line in md.splitlines() if line.startswith("| ") and "script" in line)
    assert row.count("|") - row.count("\\|") == 9  # the | in the name does not split the 8-column row


def test_bad_sweep_dirs_are_one_line_errors(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    bad = tmp_path / "bad" / "w=1"
    bad.mkdir(parents=True)
    (bad / "frame.parquet").write_bytes(b"garbage")
    for sweep, words in [("empty", "no coordcheck frames"), ("nope", "does not exist"), ("bad", "unreadable parquet")]:
        assert main([str(tmp_path / sweep)]) == 2
        out, err = capsys.readouterr()
        assert err.startswith("coordcheck.report: error: ") and len(err.splitlines()) == 1 and words in err, err
        assert not out


def test_report_side_never_imports_torch(tmp_path):
    sweep = _sweep(tmp_path, make_frame(HEALTHY))
    code = ("import sys; from coordcheck.report import main; main([sys.argv[1]]); "
            "assert 'torch' not in sys.modules, 'torch imported'")
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-c", code, str(sweep)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-1000:]
    assert (sweep / "report" / "coord_check.png").read_bytes()[:4] == b"\x89PNG"


def test_a_sweep_whose_widths_built_the_same_model_fails_with_the_evidence(tmp_path, capsys):
    sweep = _sweep(tmp_path, make_frame(HEALTHY, widths=(64, 128, 256)))
    for w in (64, 128, 256):  # job.json as a width-ignoring builder leaves it
        (sweep / f"width={w}" / "job.json").write_text(json.dumps(
            {"status": "ok", "config_id": "cfg", "width": w, "n_params": 1930,
             "shapes": {"0.weight": [32, 16], "0.bias": [32], "2.weight": [32, 32], "2.bias": [32],
                        "4.weight": [10, 32], "4.bias": [10]}}))
    assert main([str(sweep), "--strict", "--no-figures"]) == 1
    reason = ("the builder ignores `width`: every width (64, 128, 256) built the same 1930-parameter model — make "
              "build(width=...) set the layer sizes")
    assert f"coordcheck: FAIL — {reason}" in capsys.readouterr().out
    payload = json.loads((sweep / "report" / "report.json").read_text())
    assert payload["status"] == "fail" and payload["reason"] == reason
    assert [(m["width"], m["n_params"]) for m in payload["models"]] == [(64, 1930), (128, 1930), (256, 1930)]
    md = (sweep / "report" / "report.md").read_text()
    assert md_escape(reason) in md
    assert "parameters by width: 64: 1930, 128: 1930 (same model as 64), 256: 1930 (same model as 64)" in md


def test_the_resolved_config_is_a_file_beside_the_report_not_a_dump_inside_it(tmp_path):
    sweep = _sweep(tmp_path, make_frame(HEALTHY))
    config = "hydra:\n  overrides:\n    task:\n    - width=64,128,256,512\n" + "".join(
        f"key_{i}: {i}\n" for i in range(230))  # as long as the GPT sweep's multirun.yaml
    (sweep / "multirun.yaml").write_text(config)
    main([str(sweep), "--no-figures"])
    report = sweep / "report"
    assert (report / "config.yaml").read_text() == config
    md = (report / "report.md").read_text()
    assert "- resolved config: [config.yaml](config.yaml)" in md and "key_0" not in md and "```yaml" not in md
    assert "python -m coordcheck width=64,128,256,512 --multirun" in md
    assert len(md.splitlines()) <= 60  # the verdict, 4 modules and how it was run; the config alone is 234 lines
    assert not list(report.glob("*.tmp"))
    (sweep / "multirun.yaml").unlink()  # a report without a known config: no link, and no config.yaml of another run
    main([str(sweep), "--no-figures"])
    assert not (report / "config.yaml").exists() and "config.yaml" not in (report / "report.md").read_text()


def _sp_control(steps=11):
    """An SP-like sweep: unstable from step 3 at the widest width (judged steps 0-2); only h1's delta fails, with slope
    +1 at steps 1 and 2 (two steps: a persistent violation, not a transient)."""
    loss = {512: [5.0, 4.0, 3.0] + [12.0] * (steps - 3)}
    frame = make_frame(HEALTHY, steps=range(steps), loss=loss, identity={"parametrization": "sp"})
    bad = (frame["module"] == "h1") & (frame["tensor"] == "delta") & frame["step"].isin([1, 2])
    frame.loc[bad, "value"] *= frame.loc[bad, "width"]
    return frame


def test_the_figure_shows_the_failing_step_the_failing_tensor_and_the_judged_window(tmp_path):
    import matplotlib.pyplot as plt

    from coordcheck.plot import FAIL_COLOUR, NOT_JUDGED_FACE, caption_of, plot_coords
    from coordcheck.report import build_report, coord_figure_options

    report = build_report(_sp_control())
    v = report.verdict
    worst = v.worst(1).iloc[0]
    assert v.status == "fail" and worst["tensor"] == "delta" and int(v.configs["window_end"].iloc[0]) == 2
    options = coord_figure_options(v, layout="grid")
    assert options["tensor"] == ["out", "delta"] and int(worst["step"]) in options["include_steps"]
    fig = plot_coords(report.frame, **options, layout="grid")
    top = [ax.get_title() for ax in fig.axes[:5]]
    assert top == ["step 0", "step 1", "step 2", "step 10", ""]  # the judged window, then the last step; one row each
    assert [ax.get_ylabel() for ax in fig.axes if ax.get_ylabel()] == ["std of out", "std of delta"]
    not_judged = [ax for ax in fig.axes if ax.get_facecolor()[:3] == matplotlib.colors.to_rgb(NOT_JUDGED_FACE)]
    assert len(not_judged) == 2 and all("not judged" in [t.get_text() for t in ax.texts] for ax in not_judged)
    plt.close(fig)
    fig = plot_coords(report.frame, **coord_figure_options(v))  # the default, the paper figure: the same steps
    steps = fig.legends[0]
    assert [t.get_text() for t in steps.get_texts()] == ["step 0 (init)", "step 1", "step 2",
                                                         "step 10 (not judged)"]
    blocks = [t.get_text() for t in fig.texts if t.get_rotation() == 270]  # out, then delta, each named at its right
    assert blocks == ["sp · activations", "sp · change since step 0"]
    framed = [ax for ax in fig.axes if ax.spines["left"].get_edgecolor()[:3] == matplotlib.colors.to_rgb(FAIL_COLOUR)]
    assert framed and all(any(t.get_text().startswith("slope +") for t in ax.texts) for ax in framed)
    assert not fig.get_suptitle() and caption_of(fig) == v.caption  # the verdict is the caption, not the title
    plt.close(fig)


def test_the_default_steps_of_a_clean_run_are_spread_over_every_step():
    from coordcheck.plot import plot_coords
    from coordcheck.report import build_report, coord_figure_options

    report = build_report(make_frame(HEALTHY, steps=range(11)))
    options = coord_figure_options(report.verdict, layout="grid")
    assert report.verdict.status == "pass" and options["tensor"] == ["out"] and options["include_steps"] == []
    fig = plot_coords(report.frame, **options, layout="grid")
    assert [ax.get_title() for ax in fig.axes] == ["step 0", "step 3", "step 7", "step 10"]


@pytest.mark.parametrize("parametrization, series, widths, status", [
    ("sp", {**HEALTHY, ("h1", "hidden", "out"): 1.0}, (64, 128, 256, 512), "FAIL"),
    ("mup", HEALTHY, (64, 128, 256, 512), "PASS"),
    ("none", HEALTHY, (64, 128), "INCONCLUSIVE"),  # two widths: never a pass (rule 8)
])
def test_the_title_names_the_parametrization_and_its_verdict(parametrization, series, widths, status):
    from coordcheck.report import build_report

    v = build_report(make_frame(series, widths=widths, identity={"parametrization": parametrization})).verdict
    assert v.title == f"coordinate check (parametrization={parametrization}) — {status}"


def test_the_title_of_several_configurations_names_each(tmp_path):
    from coordcheck.report import build_report

    mup = make_frame(HEALTHY, identity={"config_id": "a", "parametrization": "mup"})
    sp = make_frame({**HEALTHY, ("h1", "hidden", "out"): 1.0}, identity={"config_id": "b", "parametrization": "sp"})
    v = build_report(pd.concat([mup, sp], ignore_index=True)).verdict
    assert v.title == "coordinate check — FAIL (parametrization=mup: PASS; parametrization=sp: FAIL)"
    lrs = [make_frame(HEALTHY, identity={"config_id": c, "lr": lr}) for c, lr in (("a", 0.01), ("b", 0.1))]
    assert build_report(pd.concat(lrs, ignore_index=True)).verdict.title == \
        "coordinate check — PASS (lr=0.01: PASS; lr=0.1: PASS)"

