"""The cause pass: a sweep that fails without its cause measured trains again, recording only what the causes need.

Stage: app (it drives training). Input: a sweep directory and its verdict. The default tensors (``out``,
``delta``) say *that* a module breaks muP; which parameter's initialisation or learning rate does it needs each
parameter owner's input and own update (``in``, ``own``), which cost a quarter to a third more per step
(``docs/performance.md``). So a passing sweep never pays for them, and a failing one records them afterwards: each job
of a failing configuration trains again, from the same seeds and data, with only ``in`` and ``own`` probed and only
a little past the first failing step (:func:`coordcheck.judge.cause_pass.cause_pass_steps`); the rows go into the
job's ``frame.causes.parquet``, which the sweep's aggregation reads beside ``frame.parquet`` (the report then
re-judges). Said in one line on the console. A job dir that has them already (a resumed sweep) is not trained
again. A pass that fails (a job's model no longer importable, an error) is a warning: the report is written without
the causes.

``cause_pass=false`` (Python: ``coord_check(..., cause_pass=False)``) turns it off; ``tensors=[out,delta,in,own]``
records everything in the sweep itself (no pass).
"""

from __future__ import annotations

import contextlib
import json
import logging
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from coordcheck.core.frame import CAUSE_FRAME_NAME, FrameError, read_frame
from coordcheck.judge.cause_pass import CAUSE_PASS_TENSORS, cause_pass_steps
from coordcheck.judge.verdict import Verdict
from coordcheck.run.sweep import JOB_NAME

__all__ = ["run_cause_pass"]

log = logging.getLogger("coordcheck")


def _jobs(sweep_dir: Path, configs: dict[str, int]) -> list[tuple[Path, int]]:
    """The finished jobs of the configurations in ``configs`` with the step their pass records to."""
    found = []
    for meta_path in sorted(sweep_dir.rglob(JOB_NAME)):
        try:
            meta = json.loads(meta_path.read_text())
        except (OSError, ValueError):
            continue
        if meta.get("status") == "ok" and str(meta.get("config_id")) in configs:
            found.append((meta_path.parent, configs[str(meta["config_id"])]))
    return found


def _recorded(job_dir: Path, steps: int) -> bool:
    """Whether ``job_dir`` holds a cause frame up to ``steps`` already (a resumed sweep)."""
    try:
        frame = read_frame(job_dir / CAUSE_FRAME_NAME)
    except (FrameError, OSError):
        return False
    return len(frame) > 0 and int(frame["step"].max()) >= steps


def run_cause_pass(sweep_dir: Path, verdict: Verdict, *, train: Callable[[DictConfig, Path, int], object]) -> bool:
    """Record ``in``, ``own`` and Adam's ``eps`` for the jobs of ``verdict``'s configurations that fail without their
    cause measured; True when any job dir gained them (the caller judges again). ``train(cfg, job_dir, steps)`` trains
    one job again recording only those (:func:`coordcheck.app.jobs.run_job` with ``cause_pass=steps``)."""
    configs = cause_pass_steps(verdict)
    jobs = _jobs(sweep_dir, configs) if configs else []
    todo = [(d, s) for d, s in jobs if not _recorded(d, s)]
    if not jobs:
        return False
    if not todo:
        return True
    last = max(s for _, s in todo)
    print(f"coordcheck: FAIL without its cause measured: a cause pass records {'/'.join(CAUSE_PASS_TENSORS)} for "
          f"{len(todo)} job(s) up to step {last} (cause_pass=false turns it off; "
          f"tensors=[out,delta,{','.join(CAUSE_PASS_TENSORS)}] records them in the sweep)", flush=True)
    t0, ran = time.perf_counter(), False
    with _as_a_job():
        ran = _train_all(sweep_dir, todo, train)
        log.info("cause pass: %.1f s", time.perf_counter() - t0)
    return ran


JOB_FORMAT = "[%(asctime)s][%(name)s][%(levelname)s] - %(message)s"  # Hydra's job logging (hydra/job_logging)


@contextlib.contextmanager
def _as_a_job() -> Iterator[None]:
    """The pass's log lines as a job's are (``[coordcheck][INFO]``), not under the launcher's ``[HYDRA]`` tag: it
    runs in the sweep's end callback, where Hydra's own logging formats the root logger's handler."""
    handler = logging.StreamHandler(sys.stdout)  # where Hydra's job logging writes
    handler.setFormatter(logging.Formatter(JOB_FORMAT))
    propagate, log.propagate = log.propagate, False
    log.addHandler(handler)
    try:
        yield
    finally:
        log.removeHandler(handler)
        log.propagate = propagate


def _train_all(sweep_dir: Path, todo: list[tuple[Path, int]], train: Callable[[DictConfig, Path, int], object]
               ) -> bool:
    """Train each job of ``todo`` again to its step; True when any ran. A job that fails is a warning."""
    ran = False
    for job_dir, steps in todo:
        try:
            cfg = OmegaConf.load(job_dir / ".hydra" / "config.yaml")
            train(cfg, job_dir, steps)
            ran = True
        except Exception as e:  # noqa: BLE001  (the verdict stands without the causes; never lose the report)
            log.warning("cause pass: %s not recorded (%s: %s); the report names no cause for it",
                        job_dir.relative_to(sweep_dir), type(e).__name__, str(e).splitlines()[0] if str(e) else "")
            (job_dir / CAUSE_FRAME_NAME).unlink(missing_ok=True)
    return ran
