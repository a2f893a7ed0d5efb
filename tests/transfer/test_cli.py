"""``python -m coordcheck.transfer``: the real CLI in a subprocess, as a user runs it (a tiny grid), and bad input
through the same ``cli()`` in this process."""

from __future__ import annotations

import json

import pytest
from conftest import run_cli, run_in_process

from coordcheck.app import jobs as app
from coordcheck.transfer.app import grid_size

TINY = ["width=32,64", "lr=0.001953125,0.0078125,0.03125", "parametrization=mup", "steps=3", "eval_batches=1",
        "base_width=32", "progress=false"]


def test_default_config_composes_with_the_default_grid():
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(app.CONF_DIR, version_base="1.3"):
        cfg = compose("transfer", return_hydra_config=True)
    params = cfg.hydra.sweeper.params
    assert params.width == "128,256,512" and params.parametrization == "mup,sp"
    assert len(str(params.lr).split(",")) == 9
    assert grid_size(cfg) == 3 * 9 * 2
    assert cfg.data._target_ == "coordcheck.setup.data.text_stream" and cfg.steps == 150


@pytest.mark.slow
def test_tiny_sweep_writes_the_report_resumes_and_gates(tmp_path):
    sweep = tmp_path / "sweep"
    r = run_cli("--multirun", *TINY, f"hydra.sweep.dir={sweep}", cwd=tmp_path, module="coordcheck.transfer")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "μTransfer" in r.stdout and "report" in r.stdout
    jobs = sorted(p.parent for p in sweep.glob("*/transfer.parquet"))  # named after the overrides, as Hydra does
    job = sweep / "base_width=32,eval_batches=1,lr=0.0078125,parametrization=mup,steps=3,width=64"
    assert len(jobs) == 6 and job in jobs
    meta = json.loads((job / "job.json").read_text())
    assert meta["status"] == "ok" and meta["kind"] == "transfer" and meta["rows"] == 4
    payload = json.loads((sweep / "report" / "transfer.json").read_text())
    assert payload["schema"] == "coordcheck.transfer/1" and payload["widths"] == [32, 64]
    assert (sweep / "report" / "transfer.png").exists() and (sweep / "report" / "transfer.md").exists()

    written = {p: (p / "transfer.parquet").stat().st_mtime_ns for p in jobs}
    again = run_cli("--multirun", *TINY, f"hydra.sweep.dir={sweep}", "report.strict=true", cwd=tmp_path,
                    module="coordcheck.transfer")
    assert (again.stdout + again.stderr).count("already done") == 6  # resumed: nothing retrained
    assert {p: (p / "transfer.parquet").stat().st_mtime_ns for p in jobs} == written
    expected = {"transfers": 0, "does not transfer": 1, "inconclusive": 2}[payload["status"]]
    assert again.returncode == expected

    report = run_cli(str(sweep), "--strict", "--no-figures", cwd=tmp_path, module="coordcheck.report")
    assert report.returncode == expected and "μTransfer" in report.stdout


BAD_INPUT = [
    (["lr=0.01,-1"], "lr must be a positive number, got -1"),
    (["report.tol=0"], "report.tol: must be a number > 0 (got 0.0)"),
    (["precision=fp8"], "precision must be one of fp32, bf16, fp16"),
    (["width=64,abc"], "width must be a positive integer, got 'abc'"),
    (["model=foo"], "unknown model 'foo': choose one of "),
    (["steps=0"], "steps must be an integer >= 1, got 0"),
    (["diverge=1"], "diverge must be a number > 1"),
    (["eval_batches=0"], "eval_batches must be an integer >= 1, got 0"),
    (["seeds=0"], "seeds must be >= 1, got 0"),
]


@pytest.mark.parametrize("args, words", BAD_INPUT, ids=[" ".join(a) for a, _ in BAD_INPUT])
def test_bad_input_is_one_line_and_exit_2(monkeypatch, capsys, tmp_path, args, words):
    code = run_in_process(monkeypatch, "--multirun", *args, f"hydra.sweep.dir={tmp_path / 's'}",
                          module="coordcheck.transfer")
    out, err = capsys.readouterr()
    assert code == 2 and not out
    assert err.startswith(f"coordcheck: error: {words}") and len(err.splitlines()) == 1, err
    assert not (tmp_path / "s").exists()  # nothing ran


def test_bad_input_end_to_end_is_exit_2_and_one_line(tmp_path):
    # in a fresh interpreter, as a user runs it: exit 2, one line, no traceback, nothing run
    r = run_cli("--multirun", "lr=0.01,-1", f"hydra.sweep.dir={tmp_path / 's'}", cwd=tmp_path,
                module="coordcheck.transfer")
    assert r.returncode == 2
    assert r.stderr == "coordcheck: error: lr must be a positive number, got -1\n" and not r.stdout
    assert not (tmp_path / "s").exists()


@pytest.mark.slow
def test_a_failed_job_loses_nothing_else(tmp_path):
    # width 30 is not a multiple of the GPT's 4 heads: that job fails, the other widths run and are reported
    sweep = tmp_path / "s"
    r = run_cli("--multirun", "width=30,32,64", "lr=0.001953125,0.0078125", "parametrization=mup", "steps=2",
                "eval_batches=1", "base_width=32", "progress=false", f"hydra.sweep.dir={sweep}", cwd=tmp_path,
                module="coordcheck.transfer")
    assert r.returncode == 1 and "2 job(s) failed" in r.stderr and "Traceback" not in r.stderr
    payload = json.loads((sweep / "report" / "transfer.json").read_text())
    assert payload["widths"] == [32, 64] and payload["status"] == "inconclusive"
    assert {p["status"] for p in payload["jobs"]["problems"]} == {"failed"}
    assert all("not divisible by n_head=4" in p["error"] for p in payload["jobs"]["problems"])
    assert len(list(sweep.glob("*/transfer.parquet"))) == 4


SWEEP_TAIL = ["+experiment (an overlay, added with +)", "hydra/launcher"]


@pytest.mark.parametrize("module, groups, usage", [
    ("coordcheck.transfer", ["depth_scaling", "init", "logger", "model", "optimizer", "parametrization", *SWEEP_TAIL],
     "[key=value ...] [--multirun]"),
    ("coordcheck", ["data", "depth_scaling", "init", "logger", "model", "optimizer", "parallel", "parametrization",
                    *SWEEP_TAIL],
     "[key=value ...] [--multirun]"),
    ("coordcheck.gradflow", ["data", "depth_scaling", "init", "model", "optimizer", "parametrization",
                             SWEEP_TAIL[0]], "[key=value ...]\n"),
])
def test_help_lists_the_groups_a_user_picks_from_and_no_internal_one(monkeypatch, capsys, module, groups, usage):
    """``schema/`` (it only types report.*) and a group the command does not take (the transfer has no ``data``
    group: its data is a stream; gradflow no trackers) are not offered; each offered group marks its default; the
    launchers only for the commands whose multirun ends in a report."""
    assert run_in_process(monkeypatch, "--help", module=module) == 0
    out = capsys.readouterr().out
    listed = out.split("== Configuration groups ==")[1].split("== Keys ==")[0]
    names = [line.split(":")[0] for line in listed.splitlines() if ":" in line and not line.startswith("Compose")]
    assert names == groups
    assert "schema" not in listed and "model: custom, gpt (default), hf, mlp" in listed
    assert out.startswith(f"python -m {module} {usage}")
    # issue 39: every key described with its value, examples, exit codes, the other commands and the docs
    keys = out.split("== Keys ==")[1].split("== Examples ==")[0]
    assert "  seed=0: " in keys or "  seeds=" in keys
    assert "  optimizer.eps=1e-08: " in keys or module == "coordcheck.transfer" or "optimizer=adam:" in keys
    for part in ("== Examples ==", "== Exit status ==", "python -m coordcheck.report SWEEP_DIR", "Docs: "):
        assert part in out, part
    assert f"python -m {module}" in out.split("== Examples ==")[1].split("== Exit status ==")[0]
