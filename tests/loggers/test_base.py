"""A tracker that fails is one line, never a lost sweep; strict makes it an error; no tracker is imported early."""

from __future__ import annotations

import io
import json
import logging
import subprocess
import sys
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pandas as pd
import pytest

from conftest import run_in_process
from coordcheck.app.jobs import job_hash
from coordcheck.app.config import compose_config
from coordcheck.loggers import Content, RunInfo, Tracker, emit, keys, trackers_of
from coordcheck.loggers.content import job_scalars
from tests.loggers.conftest import wandb_env

TINY = ["model=mlp", "width=32,64,128", "steps=1", "seeds=1", "threads=1", "progress=false", "report.figures=false"]


class Broken(Tracker):
    """Starts, then raises on the first scalar."""

    name = "broken"

    def __init__(self, *, strict: bool = False) -> None:
        super().__init__(strict=strict)
        self.calls: list[str] = []

    def start(self, run):
        self.calls.append("start")

    def log_params(self, params):
        self.calls.append("params")

    def log_scalars(self, step, values):
        raise RuntimeError("disk full\nsecond line")

    def log_text(self, key, text):
        self.calls.append("text")

    def log_table(self, key, table):
        self.calls.append("table")

    def log_image(self, key, path):
        self.calls.append("image")

    def finish(self, failed=False):
        self.calls.append(f"finish failed={failed}")


def test_a_tracker_that_raises_is_one_warning_and_the_others_still_log(tmp_path, caplog):
    broken, other = Broken(), Broken()
    other.log_scalars = lambda step, values: other.calls.append(f"scalars {step}")
    content = Content(params={"a": "1"}, scalars=[(0, {keys.LOSS: 1.0}), (1, {keys.LOSS: 0.5})])
    with caplog.at_level(logging.WARNING, logger="coordcheck"):
        errors = emit([broken, other], RunInfo("width=32", tmp_path), content)
    assert errors == []
    lines = [r.getMessage() for r in caplog.records]
    assert lines == ["tracker broken could not log to run width=32: RuntimeError: disk full (the frames and report are "
                     "written regardless)"]
    assert broken.calls == ["start", "params", "finish failed=True"]
    assert other.calls == ["start", "params", "scalars 0", "scalars 1", "finish failed=False"]


def test_a_strict_tracker_that_raises_is_an_error_returned_to_the_caller(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="coordcheck"):
        errors = emit([Broken(strict=True)], RunInfo("report", tmp_path, role="report"),
                      Content(scalars=[(0, {keys.VERDICT_PASSED: 1.0})]))
    assert errors == ["tracker broken could not log to run report: RuntimeError: disk full"]
    assert caplog.records[0].levelno == logging.ERROR


@pytest.mark.parametrize("name", ["tensorboard", "mlflow", "wandb"])
def test_a_tracker_not_installed_says_what_to_install(name, tmp_path, monkeypatch, caplog):
    module = {"tensorboard": "tensorboard", "mlflow": "mlflow", "wandb": "wandb"}[name]
    monkeypatch.setitem(sys.modules, module, None)  # import fails as if not installed
    cfg = compose_config([f"logger={name}"])
    trackers, errors = trackers_of(dict(cfg.logger))
    with caplog.at_level(logging.WARNING, logger="coordcheck"):
        assert emit(trackers, RunInfo("width=32", tmp_path), Content()) == [] and errors == []
    (line,) = [r.getMessage() for r in caplog.records]
    assert line.startswith(f"tracker {name} could not start run width=32: {module} is not installed")
    assert f"pip install 'coordcheck[{name}]'" in line and "\n" not in line


def test_an_unknown_tracker_target_is_one_line(caplog):
    with caplog.at_level(logging.WARNING, logger="coordcheck"):
        trackers, errors = trackers_of({"mine": {"_target_": "no_such_module.Tracker", "strict": True}})
    assert trackers == [] and len(errors) == 1 and errors[0].startswith("tracker mine could not be made: ")
    assert "\n" not in errors[0] and caplog.records[0].levelno == logging.ERROR


def test_several_trackers_at_once_and_none_changes_what_a_job_is():
    plain = compose_config(["model=mlp"])
    both = compose_config(["model=mlp", "logger=[tensorboard,mlflow,wandb]", "logger.mlflow.tracking_uri=http://x:5000"])
    assert plain.get("logger") is None and list(both.logger) == ["tensorboard", "mlflow", "wandb"]
    assert both.logger.wandb.mode == "offline" and both.logger.mlflow.tracking_uri == "http://x:5000"
    assert job_hash(plain) == job_hash(both)  # resume finds the jobs of a sweep run without trackers
    assert compose_config(["logger=tensorboard"], "transfer").logger.tensorboard._target_.endswith("TensorBoardTracker")


def test_an_unknown_tracker_option_is_one_line_before_any_job_runs():
    from coordcheck.app.checks import check_choices
    from coordcheck.core.errors import CoordCheckError

    with pytest.raises(CoordCheckError, match=r"^unknown logger 'tensorbord' \(did you mean tensorboard\?\): choose "
                                              r"one of mlflow, tensorboard, wandb"):
        check_choices(["logger=tensorbord"])


def test_loss_per_step_is_the_mean_over_seeds_with_each_seed_beside_it(tmp_path):
    from coordcheck.core.frame import LOSS_MODULE

    rows = [{"seed": s, "step": t, "module": LOSS_MODULE, "tensor": "loss", "value": 1.0 + s + t}
            for s in (0, 1) for t in (0, 1)]
    rows.append({"seed": 0, "step": 0, "module": "fc", "tensor": "out", "value": 99.0})
    pd.DataFrame(rows).to_parquet(tmp_path / "frame.parquet")
    assert job_scalars("coordcheck", tmp_path) == [
        (0, {"loss": 1.5, "loss/seed_0": 1.0, "loss/seed_1": 2.0}), (1, {"loss": 2.5, "loss/seed_0": 2.0,
                                                                         "loss/seed_1": 3.0})]


def test_import_coordcheck_imports_no_tracker():
    code = ("import sys, coordcheck, coordcheck.loggers, coordcheck.app.jobs; "
            "print([m for m in sys.modules if m.split('.')[0] in ('tensorboard', 'mlflow', 'wandb')])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stderr[-2000:]


def _run(monkeypatch, tmp_path, *args: str) -> tuple[int, str]:
    wandb_env(monkeypatch, tmp_path)
    monkeypatch.chdir(tmp_path)
    out = io.StringIO()
    with redirect_stdout(out), redirect_stderr(out):
        code = run_in_process(monkeypatch, *args)
    return code, out.getvalue()


@pytest.mark.slow
def test_a_tracker_that_cannot_start_loses_nothing_and_strict_fails_the_command(tmp_path, monkeypatch):
    sweep = tmp_path / "sweep"
    bad = ["logger=[tensorboard,mlflow]", "logger.mlflow.tracking_uri=bogus://nowhere"]
    code, out = _run(monkeypatch, tmp_path, "--multirun", *TINY, *bad, f"hydra.sweep.dir={sweep}")
    assert code == 0, out[-3000:]
    warnings = [line for line in out.splitlines() if "tracker mlflow" in line]
    assert len(warnings) == 4  # 3 jobs and the end of the sweep, one line each
    assert all("could not start run" in w and "written regardless" in w for w in warnings)
    assert sorted(p.parent.name for p in sweep.glob("*/frame.parquet")) == [
        "model=mlp,seeds=1,steps=1,width=128", "model=mlp,seeds=1,steps=1,width=32",
        "model=mlp,seeds=1,steps=1,width=64"]  # the trackers' settings do not name the job directories
    assert json.loads((sweep / "report" / "report.json").read_text())["status"] in ("pass", "fail", "inconclusive")
    assert len(list((sweep / "tensorboard").iterdir())) == 4  # the tracker that works logged everything

    again = tmp_path / "strict"
    code, out = _run(monkeypatch, tmp_path, "--multirun", *TINY, *bad, "logger.mlflow.strict=true",
                     f"hydra.sweep.dir={again}")
    assert code == 1, out[-3000:]
    assert (again / "report" / "report.json").exists() and len(list(again.glob("*/frame.parquet"))) == 3
    assert "coordcheck: 4 tracker error(s) with strict: true, first: tracker mlflow could not start run" in out
    meta = json.loads(next(again.glob("*/job.json")).read_text())
    assert meta["status"] == "ok" and meta["tracker_errors"][0].startswith("tracker mlflow could not start")


def test_a_single_job_logs_into_its_run_directory(tmp_path, monkeypatch):
    run_dir = tmp_path / "run"
    code, out = _run(monkeypatch, tmp_path, "model=mlp", "width=32", "steps=1", "seeds=1", "threads=1",
                     "progress=false", "logger=tensorboard", f"hydra.run.dir={run_dir}")
    assert code == 0, out[-3000:]
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run_dir / "tensorboard" / "run"))
    acc.Reload()
    assert [e.step for e in acc.Scalars(keys.LOSS)] == [0, 1]
    assert not Path(tmp_path / "tensorboard").exists()
