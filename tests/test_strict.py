"""CI gating from the sweep itself: ``report.strict`` exit codes, a bad report knob stopping the command before
any job, and an exception at the end of a sweep recorded and never an exit 0 (the knobs' schema: test_config.py)."""

import json
import shutil

import pytest
from conftest import run_in_process
from omegaconf import OmegaConf

from coordcheck import report
from coordcheck.app import jobs as app
from coordcheck.core.frame import FRAME_NAME

# 2 seeds: with 1 seed (3 points per slope) the SP control below is inconclusive in 2 of 5 seed sets, its intervals
# +-2.8 wide, and muP's pass has 0.04 to spare (experiments/margins.py); with 2, 0.35 and 0.09
PASSING = ["model=mlp", "width=32,64,128", "steps=3", "seeds=2", "progress=false", "report.figures=false"]


def status(sweep) -> str:
    return json.loads((sweep / "report" / "report.json").read_text())["status"]


@pytest.fixture(scope="module")
def passing_sweep(tmp_path_factory):
    sweep = tmp_path_factory.mktemp("passing") / "sweep"
    with pytest.MonkeyPatch.context() as mp:
        assert run_in_process(mp, *PASSING, f"hydra.sweep.dir={sweep}", "--multirun") == 0
    assert status(sweep) == "pass"
    return sweep


@pytest.fixture
def sweep(passing_sweep, tmp_path):
    """A copy of the passing sweep: the same command again skips every job and re-makes only the report."""
    return shutil.copytree(passing_sweep, tmp_path / "sweep")


# -- report.strict -----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("knobs,verdict,code", [([], "pass", 0), (["report.min_widths=4"], "inconclusive", 2)])
def test_strict_exit_status_is_the_verdict(monkeypatch, sweep, knobs, verdict, code):
    frames = {f: f.stat().st_mtime_ns for f in sweep.rglob(FRAME_NAME)}
    assert run_in_process(monkeypatch, *PASSING, *knobs, f"hydra.sweep.dir={sweep}", "--multirun") == 0  # not strict
    assert run_in_process(monkeypatch, *PASSING, *knobs, "report.strict=true", f"hydra.sweep.dir={sweep}",
                          "--multirun") == code
    assert status(sweep) == verdict
    # report knobs neither name job directories nor change a job: every job was resumed, none re-run
    assert {f: f.stat().st_mtime_ns for f in sweep.rglob(FRAME_NAME)} == frames
    assert not [d for d in sweep.iterdir() if "report." in d.name]


def test_strict_sweep_exits_1_on_fail(monkeypatch, capsys, tmp_path):
    sweep = tmp_path / "sweep"
    code = run_in_process(monkeypatch, *PASSING, "parametrization=sp", "report.strict=true", f"hydra.sweep.dir={sweep}",
                          "--multirun")
    out, err = capsys.readouterr()
    assert code == 1, err[-2000:]
    assert "coordcheck: FAIL" in out and err == "coordcheck: report.strict=true: FAIL exits 1\n"
    assert status(sweep) == "fail"


@pytest.mark.parametrize("outcome,code", [
    (app.Outcome(status="fail"), 0),
    (app.Outcome(status="fail", strict=True), 1),
    (app.Outcome(status="inconclusive", strict=True), 2),
    (app.Outcome(status="pass", strict=True), 0),
    (app.Outcome(status="pass", failed=["width=32 failed: OOM"]), 1),  # failed jobs exit 1, strict or not
    (app.Outcome(status="inconclusive", strict=True, failed=["width=32 failed: OOM"]), 1),
    (app.Outcome(error="RuntimeError: boom"), 1),
    (app.Outcome(error="report.tol: must be a number > 0 (got -1.0)", user_error=True), 2),
])
def test_exit_status(outcome, code):
    assert outcome.exit_code == code


# -- report knobs (their schema and checks: test_config.py) ------------------------------------------------------
def test_bad_knob_is_one_line_and_exit_2_before_any_job(monkeypatch, capsys, tmp_path):
    code = run_in_process(monkeypatch, "width=16,32,64", "report.tol=abc", f"hydra.sweep.dir={tmp_path / 'sweep'}",
                          "--multirun")
    assert code == 2
    out, err = capsys.readouterr()
    assert err == "coordcheck: error: report.tol: must be a number > 0 (got 'abc')\n" and not out
    assert not (tmp_path / "sweep").exists()


def test_report_cli_flags_are_checked_the_same_way(sweep, capsys):
    assert report.main([str(sweep), "--min-window", "0", "--no-figures"]) == 2
    assert capsys.readouterr().err == "coordcheck.report: error: --min-window: must be an integer >= 1 (got 0)\n"
    assert report.main([str(sweep), "--min-widths", "4", "--no-figures", "--strict"]) == 2  # inconclusive


def test_report_cli_exits_as_the_sweep_did_when_every_job_failed(monkeypatch, capsys, tmp_path):
    sweep = tmp_path / "sweep"  # a width the model cannot take: every job fails at its start, no frame anywhere
    args = ["model=gpt", "model.n_head=3", "width=32,64,128", "steps=1", "seeds=1", "progress=false",
            "report.figures=false", f"hydra.sweep.dir={sweep}", "--multirun"]
    assert run_in_process(monkeypatch, *args) == 1
    assert "3 job(s) failed" in capsys.readouterr().err
    for strict in ([], ["--strict"]):  # what the jobs did, not the report's flags: 1 both ways, never 2
        assert report.main([str(sweep), "--no-figures", *strict]) == 1
        err = capsys.readouterr().err
        assert err.startswith("coordcheck.report: error: no job under") and "divisible by n_head=3" in err


# -- the end of the sweep: never a warning with exit 0 -----------------------------------------------------------------
def test_exception_at_the_end_of_a_sweep_is_recorded_and_fails_the_command(monkeypatch, capsys, sweep):
    real = report.report_sweep

    def broken(*args, **kwargs):
        raise RuntimeError("disk on fire\nsecond line")

    monkeypatch.setattr(report, "report_sweep", broken)
    assert run_in_process(monkeypatch, *PASSING, f"hydra.sweep.dir={sweep}", "--multirun") == 1
    err = capsys.readouterr().err
    assert "coordcheck: no report: RuntimeError: disk on fire\n" in err and "second line" not in err
    assert "Traceback" not in err and "UserWarning" not in err
    record = (sweep / "report" / "error.txt").read_text()
    assert record.startswith("RuntimeError: disk on fire\n") and "Traceback" in record
    assert not (sweep / "report" / "report.json").exists()  # the earlier PASS must not stand for this run
    monkeypatch.setattr(report, "report_sweep", real)
    assert run_in_process(monkeypatch, *PASSING, "report.strict=true", f"hydra.sweep.dir={sweep}", "--multirun") == 0
    assert status(sweep) == "pass" and not (sweep / "report" / "error.txt").exists()


def test_a_bad_knob_that_reaches_the_callback_is_a_user_error(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(app, "OUTCOME", app.Outcome())
    cfg = OmegaConf.create({"hydra": {"sweep": {"dir": str(tmp_path)}}, "report": {"tol": -1.0}})
    with pytest.raises(SystemExit) as e:  # before the first job (a -cd command line is not checked up front)
        app.SweepCallback().on_multirun_start(config=cfg)
    assert e.value.code == 2
    app.SweepCallback().on_multirun_end(config=cfg)
    assert app.OUTCOME.exit_code == 2
    assert (tmp_path / "report" / "error.txt").read_text() == "report.tol: must be a number > 0 (got -1.0)\n"
    message = "report.tol: must be a number > 0 (got -1.0)"
    err = capsys.readouterr().err.splitlines()
    assert err == [f"coordcheck: error: {message}", f"coordcheck: no report: {message}"]


# -- layout ----------------------------------------------------------------------------------------------------------
def test_layout_reaches_the_coord_check_figure(monkeypatch, sweep):
    import matplotlib.pyplot as plt

    from coordcheck import plot

    seen = []

    def fake(name):
        def draw(*args, **kwargs):
            seen.append((name, kwargs.get("layout", "default")))
            return plt.figure()
        return draw

    for name in ("plot_coords", "plot_slopes", "plot_loss"):
        monkeypatch.setattr(plot, name, fake(name))
    assert run_in_process(monkeypatch, *PASSING, "report.figures=true", "report.layout=grid",
                          f"hydra.sweep.dir={sweep}", "--multirun") == 0
    assert report.main([str(sweep), "--layout", "grid"]) == 0
    assert report.main([str(sweep)]) == 0  # the default: the paper figure, and report.html's line per module
    assert [layout for name, layout in seen if name == "plot_coords"] == ["grid", "grid", "guide", "grid"]
