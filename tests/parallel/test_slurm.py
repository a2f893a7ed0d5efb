"""Issue 30: a Slurm job's tasks as the processes (no torchrun): ``srun ... python -m coordcheck parallel=ddp``, and
Hydra's Slurm launcher with ``tasks_per_node`` (every task runs each job in the same directory). Slurm itself is not
here: its tasks are two processes with the environment ``srun`` gives them (one node)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

HERE = Path(__file__).resolve().parent
CLI = ["model=mlp", "steps=3", "seeds=1", "device=cpu", "threads=1", "progress=false", "report.figures=false"]
KEY = ["width", "seed", "step", "module", "tensor", "stat"]


def _tasks(tmp_path: Path, args: list[str], n: int = 2) -> list[subprocess.CompletedProcess]:
    """``args`` run as the ``n`` tasks of one Slurm job on one node, as ``srun`` starts them."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    (tmp_path / "tmp").mkdir(exist_ok=True)
    torchrun = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
    base = {k: v for k, v in os.environ.items() if k not in torchrun and not k.startswith("SLURM")}
    procs = [subprocess.Popen([sys.executable, "-m", "coordcheck", *args], cwd=tmp_path, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={
        **base, "SLURM_JOB_ID": "4242", "SLURM_NTASKS": str(n), "SLURM_JOB_NUM_NODES": "1", "SLURM_NODEID": "0",
        "SLURM_JOB_NODELIST": "localhost", "SLURM_PROCID": str(q), "SLURM_LOCALID": str(q), "MASTER_PORT": str(port),
        "OMP_NUM_THREADS": "1", "TMPDIR": str(tmp_path / "tmp")}) for q in range(n)]
    out = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=300)
        out.append(subprocess.CompletedProcess(p.args, p.returncode, stdout, stderr))
    return out


def _frames(sweep: Path) -> pd.DataFrame:
    return pd.concat(pd.read_parquet(p) for p in sweep.glob("*/frame.parquet")).sort_values(KEY).reset_index(drop=True)


@pytest.mark.slow
def test_a_slurm_jobs_tasks_give_the_one_process_frame_and_only_rank_0_writes(tmp_path):
    """``srun --ntasks 2 python -m coordcheck parallel=ddp ... --multirun``: Slurm's environment mapped onto torch's."""
    sweep, one = tmp_path / "slurm", tmp_path / "one"
    tasks = _tasks(tmp_path, ["parallel=ddp", "width=64,128,256", *CLI, f"hydra.sweep.dir={sweep}", "--multirun"])
    assert all(t.returncode == 0 for t in tasks), [t.stderr[-2000:] for t in tasks]
    assert tasks[0].stdout.count("coordcheck: PASS") == 1 and "coordcheck:" not in tasks[1].stdout
    r = subprocess.run([sys.executable, "-m", "coordcheck", "width=64,128,256", *CLI, f"hydra.sweep.dir={one}",
                        "--multirun"], capture_output=True, text=True, timeout=300, cwd=tmp_path,
                       env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert r.returncode == 0, r.stderr[-2000:]
    np.testing.assert_allclose(_frames(sweep)["value"].to_numpy(), _frames(one)["value"].to_numpy(), rtol=1e-4,
                               atol=1e-5)
    meta = json.loads(next(sweep.glob("*width=64*/job.json")).read_text())
    assert meta["parallel"] == {"name": "ddp", "processes": 2, "launch": "srun --ntasks 2 python -m coordcheck"}
    assert not list((tmp_path / "tmp").glob("coordcheck-rank*"))  # rank 1's scratch is gone


@pytest.mark.slow
def test_under_hydras_slurm_launcher_every_task_runs_in_the_same_directory_and_only_rank_0_writes_there(tmp_path):
    """Hydra's Slurm launcher (``hydra/launcher=slurm``, ``tasks_per_node: 2``) runs each job in every task, in the
    same job directory, with the sweep's config (``parallel`` is not on the task's command line): rank 1 writes its
    job's files into a scratch directory, and its log lines do not go into the job's log."""
    conf = tmp_path / "conf" / "experiment"
    conf.mkdir(parents=True)
    (conf / "tasks.yaml").write_text("# @package _global_\ndefaults:\n  - override /parallel: ddp\n")
    run = tmp_path / "job"
    tasks = _tasks(tmp_path, ["--config-dir", str(tmp_path / "conf"), "+experiment=tasks", "width=64", *CLI,
                              f"hydra.run.dir={run}"])
    assert all(t.returncode == 0 for t in tasks), [t.stderr[-2000:] for t in tasks]
    meta = json.loads((run / "job.json").read_text())
    assert meta["status"] == "ok"
    assert meta["parallel"] == {"name": "ddp", "processes": 2, "launch": "srun --ntasks 2 python -m coordcheck"}
    assert (run / "frame.parquet").exists()
    log = next(run.glob("*.log")).read_text()
    assert log.count("width=64 model=mlp") == 1, log  # rank 0's line; rank 1's went nowhere near it
    assert not list((tmp_path / "tmp").glob("coordcheck-rank*"))  # rank 1's scratch job directory is gone


def test_parallel_in_a_one_task_slurm_job_outside_torchrun_is_one_line(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
    r = subprocess.run([sys.executable, "-m", "coordcheck", "parallel=ddp", "width=64", *CLI,
                        f"hydra.run.dir={tmp_path / 'job'}"], capture_output=True, text=True, timeout=120,
                       cwd=tmp_path, env={**env, "SLURM_JOB_ID": "1", "SLURM_NTASKS": "1", "SLURM_PROCID": "0"})
    assert r.returncode != 0
    assert "coordcheck: error: parallel=ddp runs under torchrun or as a Slurm job's tasks" in r.stderr
    assert "Traceback" not in r.stderr
