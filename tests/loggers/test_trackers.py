"""A tiny sweep of each experiment logged to TensorBoard, MLflow and W&B at once, read back with each tracker's
own reader: TensorBoard's EventAccumulator, the MLflow client, and ``wandb leet inspect`` on the offline run files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import run_in_process
from coordcheck.loggers import keys
from tests.loggers.conftest import wandb_env

pytestmark = pytest.mark.slow  # two real sweeps (3 + 4 jobs) through three trackers: ~40 s on a quiet 2-core machine

ALL = "logger=[tensorboard,mlflow,wandb]"
COORD = ["model=mlp", "width=32,64,128", "steps=2", "seeds=2", "threads=1", "progress=false"]
TRANSFER = ["width=32,64", "lr=0.0078125,0.03125", "parametrization=mup", "steps=3", "eval_batches=1",
            "base_width=32", "threads=1", "progress=false"]


def _sweep(tmp_path_factory, name: str, module: str, args: list[str]) -> tuple[Path, int, str]:
    sweep = tmp_path_factory.mktemp(name) / "sweep"
    with pytest.MonkeyPatch.context() as mp:
        wandb_env(mp, sweep.parent)
        mp.chdir(sweep.parent)
        import io
        from contextlib import redirect_stderr, redirect_stdout

        out = io.StringIO()
        with redirect_stdout(out), redirect_stderr(out):
            code = run_in_process(mp, "--multirun", *args, ALL, f"hydra.sweep.dir={sweep}", module=module)
    return sweep, code, out.getvalue()


@pytest.fixture(scope="module")
def coord(tmp_path_factory):
    return _sweep(tmp_path_factory, "coord", "coordcheck", COORD)


@pytest.fixture(scope="module")
def transfer(tmp_path_factory):
    return _sweep(tmp_path_factory, "transfer", "coordcheck.transfer", TRANSFER)


def jobs(sweep: Path) -> list[str]:
    return sorted(p.parent.name for p in sweep.glob("*/job.json"))


# -- TensorBoard -------------------------------------------------------------------------------------------------------

def events(run_dir: Path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run_dir), size_guidance={"scalars": 0, "images": 0, "tensors": 0})
    acc.Reload()
    return acc


def text(acc, key: str) -> str:
    return acc.Tensors(f"{key}/text_summary")[-1].tensor_proto.string_val[0].decode()


@pytest.mark.parametrize("which", ["coord", "transfer"])
def test_tensorboard_has_the_loss_per_step_per_job_and_the_verdict_figures_and_tables(which, request):
    sweep, code, out = request.getfixturevalue(which)
    assert code in (0, 2) and "tracker" not in out, out[-3000:]
    root = sweep / "tensorboard"
    assert sorted(p.name for p in root.iterdir()) == sorted([*jobs(sweep), keys.REPORT_RUN])
    steps = 3 if which == "coord" else 3  # coordinate check: steps 0..2; transfer: 3 training losses (0..2)
    for job in jobs(sweep):
        acc = events(root / job)
        loss = acc.Scalars(keys.LOSS)
        assert [e.step for e in loss] == list(range(steps)) and all(e.value > 0 for e in loss)
        params = text(acc, keys.PARAMS)
        assert "env/torch" in params and "config/width" in params and "job/status" in params
    if which == "coord":
        acc = events(root / jobs(sweep)[0])
        assert {keys.LOSS_SEED.format(seed=0), keys.LOSS_SEED.format(seed=1)} <= set(acc.Tags()["scalars"])
    else:
        assert [e.step for e in events(root / jobs(sweep)[0]).Scalars(keys.HELDOUT_LOSS)] == [3]
    report = json.loads((sweep / "report" / ("report.json" if which == "coord" else "transfer.json")).read_text())
    acc = events(root / keys.REPORT_RUN)
    assert text(acc, keys.VERDICT).startswith(report["status"].upper() + " — ")
    assert acc.Scalars(keys.VERDICT_PASSED)[0].value == (1.0 if report["status"] in ("pass", "transfers") else 0.0)
    figures = {keys.FIGURE.format(name=Path(p).stem) for p in report["figures"].values() if p.endswith(".png")}
    assert figures and figures <= set(acc.Tags()["images"])
    table = "slopes" if which == "coord" else "optima"
    assert text(acc, keys.TABLE.format(name=table)).startswith("| ")
    assert keys.CAUSES + "/text_summary" in acc.Tags()["tensors"]


# -- MLflow ------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("which", ["coord", "transfer"])
def test_mlflow_local_store_in_the_sweep_has_a_run_per_job_and_the_report_run(which, request):
    from mlflow.tracking import MlflowClient

    from coordcheck.loggers.mlflow import EXPERIMENTS, local_uri

    sweep, _, _ = request.getfixturevalue(which)
    client = MlflowClient(tracking_uri=local_uri(sweep))
    experiment = client.get_experiment_by_name(EXPERIMENTS["coordcheck" if which == "coord" else "transfer"])
    runs = {r.info.run_name: r for r in client.search_runs([experiment.experiment_id])}
    assert sorted(runs) == sorted([*jobs(sweep), keys.REPORT_RUN])
    assert all(r.data.tags[keys.TAG_SWEEP] == str(sweep.resolve()) and r.info.status == "FINISHED"
               for r in runs.values())
    job = runs[jobs(sweep)[-1]]
    history = client.get_metric_history(job.info.run_id, keys.LOSS)
    assert sorted(m.step for m in history) == [0, 1, 2]
    assert job.data.params["env/torch"] and job.data.params["job/status"] == "ok"
    assert int(job.data.params["config/width"]) in (32, 64, 128)
    report = runs[keys.REPORT_RUN]
    payload = json.loads((sweep / "report" / ("report.json" if which == "coord" else "transfer.json")).read_text())
    assert report.data.params[keys.VERDICT_STATUS] == payload["status"]
    assert report.data.tags[keys.TAG_ROLE] == "report"
    files = {a.path for folder in ("", "figure", "table") for a in client.list_artifacts(report.info.run_id, folder)}
    table = "slopes" if which == "coord" else "optima"
    assert {f"{keys.VERDICT}.md", f"{keys.CAUSES}.md", f"{keys.REPORT}.md", f"table/{table}.csv"} <= files
    assert any(f.startswith("figure/") and f.endswith(".png") for f in files)
    assert str((sweep / "mlflow" / "artifacts").resolve()) in experiment.artifact_location  # nothing in the cwd
    assert not (sweep.parent / "mlruns").exists()


# -- W&B ---------------------------------------------------------------------------------------------------------------

def inspect(run_file: Path, env_root: Path) -> dict:
    """The offline run's state, config and summary, as wandb's own transaction-log reader prints them."""
    env = {**os.environ, **{n: str(env_root / "wandb-home" / n.lower()) for n in
                            ("WANDB_DIR", "WANDB_CACHE_DIR", "WANDB_CONFIG_DIR", "WANDB_DATA_DIR")}}
    r = subprocess.run([sys.executable, "-m", "wandb", "leet", "inspect", "--summary", "--json", str(run_file)],
                       capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout)


def test_wandb_is_offline_in_the_sweep_directory_and_its_runs_read_back(coord):
    sweep, _, _ = coord
    files = sorted((sweep / "wandb" / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(files) == len(jobs(sweep)) + 1  # offline by default: no account, no network
    runs = {(s := inspect(f, sweep.parent))["name"]: s for f in files}
    assert sorted(runs) == sorted([*jobs(sweep), keys.REPORT_RUN])
    job = runs[jobs(sweep)[0]]
    assert job["state"] == "finished" and job["project"] == "coordcheck" and job["step"] == 2
    assert job["summary"][keys.LOSS] > 0 and job["config"]["env/torch"]
    report = runs[keys.REPORT_RUN]
    status = json.loads((sweep / "report" / "report.json").read_text())["status"]
    assert report["summary"][keys.VERDICT].startswith(status.upper())
    assert report["summary"][keys.TABLE.format(name="slopes")]["_type"] == "table-file"
    assert report["summary"][keys.FIGURE.format(name="coord_check")]["_type"] == "image-file"
    home = sweep.parent / "wandb-home"
    outside = [p for p in sweep.parent.iterdir() if p.name not in ("sweep", "wandb-home")]
    assert outside == [] and home.exists()  # everything wandb wrote is in the sweep or the test's wandb home


def test_mlflow_jobs_starting_at_once_share_one_new_local_store(tmp_path):
    """Jobs of a parallel launcher (joblib) create the SQLite store together: without the lock its migrations race
    ("table _alembic_tmp_experiments already exists") and jobs lose their runs (2 of 2 runs of this test failed)."""
    code = ("import sys; from pathlib import Path; from coordcheck.loggers import Content, RunInfo, emit, keys; "
            "from coordcheck.loggers.mlflow import MLflowTracker; "
            "run = RunInfo(sys.argv[1], Path(sys.argv[2])); "
            "sys.exit(len(emit([MLflowTracker(strict=True)], run, Content(scalars=[(0, {keys.LOSS: 1.0})]))))")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    procs = [subprocess.Popen([sys.executable, "-c", code, f"width={w}", str(tmp_path)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for w in (32, 64)]
    outs = [p.communicate(timeout=300)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    from mlflow.tracking import MlflowClient

    from coordcheck.loggers.mlflow import local_uri

    client = MlflowClient(tracking_uri=local_uri(tmp_path))
    runs = client.search_runs([client.get_experiment_by_name("coordcheck").experiment_id])
    assert sorted(r.info.run_name for r in runs) == ["width=32", "width=64"]
