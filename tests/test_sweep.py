"""Aggregation (``coordcheck.run.sweep``): a sweep's job directories read from disk, every job that left no frame
listed."""

import dataclasses
import json

import pandas as pd
import pytest
from synthetic import make_frame

from coordcheck.core.errors import CoordCheckError
from coordcheck.core.frame import FRAME_NAME, write_frame
from coordcheck.run.sweep import JOB_NAME, JobProblem, aggregate, job_facts, sweep_config

SERIES = {("h", "hidden", "out"): 0.0}


def job(sweep, name, *, width=None, status="ok", error=None):
    """A job directory as the app leaves it: a frame for ``width`` (if given), then its ``job.json``."""
    d = sweep / name
    d.mkdir(parents=True, exist_ok=True)
    if width is not None:
        write_frame(make_frame(SERIES, widths=(width,)), d / FRAME_NAME)
    if status is not None:
        (d / JOB_NAME).write_text(json.dumps({"status": status, **({"error": error} if error else {})}))
    return d


def test_frames_are_combined_and_every_other_job_is_listed(tmp_path):
    job(tmp_path, "width=64", width=64)
    job(tmp_path, "width=128", width=128)
    job(tmp_path, "width=256", status="failed", error="CUDA out of memory")
    job(tmp_path, "width=512", status="interrupted", error="terminated by signal 15")
    job(tmp_path, "width=1024", status="running")
    job(tmp_path, "width=2048")  # job.json says ok, but its frame is gone
    (tmp_path / "width=4096" / ".hydra").mkdir(parents=True)  # Hydra started it; it wrote nothing
    (tmp_path / "width=4096" / ".hydra" / "config.yaml").write_text("width: 4096\n")
    job(tmp_path, "junk", status=None)
    (tmp_path / "junk" / FRAME_NAME).write_bytes(b"not parquet")
    job(tmp_path, "report", width=8)  # the report directory is output, not a job
    result = aggregate(tmp_path)
    assert result.directory == tmp_path and result.widths == [64, 128]
    assert sorted(result.jobs) == ["width=128", "width=64"]
    pd.testing.assert_frame_equal(
        result.frame.reset_index(drop=True),
        pd.concat([make_frame(SERIES, widths=(w,)) for w in (128, 64)], ignore_index=True))
    problems = {p.job: (p.status, p.error) for p in result.problems}
    assert problems.pop("width=256") == ("failed", "CUDA out of memory")
    assert problems.pop("width=512") == ("interrupted", "terminated by signal 15")
    assert problems.pop("junk")[0] == "corrupt"
    assert {j: s for j, (s, _) in problems.items()} == {"width=1024": "missing", "width=2048": "missing",
                                                       "width=4096": "missing"}
    assert all(e.startswith(f"no {FRAME_NAME}: the job did not finish") for _, e in problems.values())


def test_job_directories_at_any_depth_and_at_the_root(tmp_path):
    job(tmp_path, "0/width=64", width=64)  # submitit: numbered directories
    job(tmp_path, "a/b/width=128", width=128)
    assert aggregate(tmp_path).jobs == ["0/width=64", "a/b/width=128"]
    single = tmp_path / "run"
    job(single, ".", width=256)  # a single run's directory is the job itself
    result = aggregate(single)
    assert result.jobs == ["."] and result.widths == [256]


def test_no_sweep_is_one_line(tmp_path):
    with pytest.raises(CoordCheckError, match="does not exist: pass the directory of a multirun"):
        aggregate(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(CoordCheckError, match="no coordcheck frames under .*: is this a sweep directory"):
        aggregate(tmp_path / "empty")


def test_a_failed_job_alone_is_a_sweep_with_an_empty_frame(tmp_path):
    job(tmp_path, "width=64", status="failed", error="boom")
    result = aggregate(tmp_path)
    assert result.frame.empty and result.problems == [JobProblem("width=64", "failed", "boom")]


def test_another_experiment_passes_its_own_file_and_reader(tmp_path):
    for w in (32, 64):
        (tmp_path / f"w={w}").mkdir()
        pd.DataFrame({"width": [w]}).to_csv(tmp_path / f"w={w}" / "cells.csv", index=False)
    result = aggregate(tmp_path, frame_name="cells.csv", read=pd.read_csv,
                       concat=lambda fs: pd.concat(fs, ignore_index=True), what="cells")
    assert result.widths == [32, 64] and result.jobs == ["w=32", "w=64"]
    with pytest.raises(CoordCheckError, match="no cells under"):
        aggregate(tmp_path, frame_name="other.csv", what="cells")


def test_job_problem_is_a_frozen_value():
    p = JobProblem("width=64", "failed", "boom")
    assert p == JobProblem("width=64", "failed", "boom") and p != JobProblem("width=64", "missing", "boom")
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.status = "ok"


def test_sweep_config_reads_the_command_and_config_hydra_wrote(tmp_path):
    multirun = "hydra:\n  overrides:\n    task:\n    - model=mlp\n    - width=16,32\nlr: 0.01\n"
    (tmp_path / "multirun.yaml").write_text(multirun)
    assert sweep_config(tmp_path) == ("python -m coordcheck model=mlp width=16,32 --multirun", multirun)
    assert sweep_config(tmp_path, "python -m coordcheck.transfer")[0].startswith("python -m coordcheck.transfer ")


def test_sweep_config_without_multirun_yaml_takes_a_jobs_config(tmp_path):
    assert sweep_config(tmp_path) == (None, None)
    for name, lr in (("b", 0.2), ("a", 0.1)):
        (tmp_path / name / ".hydra").mkdir(parents=True)
        (tmp_path / name / ".hydra" / "config.yaml").write_text(f"lr: {lr}\n")
    assert sweep_config(tmp_path) == (None, "lr: 0.1\n")  # the first job's, in name order
    (tmp_path / "multirun.yaml").write_text("foreign: true\n")  # no hydra node: the command is left out
    assert sweep_config(tmp_path) == (None, "foreign: true\n")


def test_job_facts_is_the_job_json_or_nothing(tmp_path):
    d = job(tmp_path, "width=64", status="failed", error="boom")
    assert job_facts(d) == {"status": "failed", "error": "boom"}
    assert job_facts(tmp_path / "none") == {}
    (d / JOB_NAME).write_text("{not json")
    assert job_facts(d) == {}
