"""``python -m coordcheck.transfer``: the real CLI in a subprocess, as a user runs it (a tiny grid)."""

from __future__ import annotations

import json

import pytest
from conftest import run_cli

from coordcheck import app
from coordcheck.errors import CoordCheckError
from coordcheck.transfer.app import grid_size, transfer_options

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
    assert cfg.data._target_ == "coordcheck.data.text_stream" and cfg.steps == 150


def test_report_knobs_are_checked():
    assert transfer_options({"tol": 1})["tol"] == 1.0
    for bad, words in [({"tol": -1}, "report.tol: must be a number > 0"), ({"tols": 1}, "unknown knob"), ({"strict": "maybe"}, "true or false"),
                       ({"size": "poster"}, "one of paper, slides")]:
        with pytest.raises(CoordCheckError, match=words):
            transfer_options(bad)


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


@pytest.mark.parametrize("args, words", [
    (["lr=0.01,-1"], "lr must be a positive number"),
    (["report.tol=0"], "report.tol: must be a number > 0"),
    (["precision=fp8"], "precision must be one of fp32, bf16, fp16"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, args, words):
    r = run_cli("--multirun", *args, f"hydra.sweep.dir={tmp_path / 's'}", cwd=tmp_path, module="coordcheck.transfer")
    assert r.returncode == 2
    assert words in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "s").exists()  # nothing ran


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
