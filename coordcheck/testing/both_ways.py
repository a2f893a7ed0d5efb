"""One answer on every path (issue 42): an atlas mutant judged through the sweep and through a plain training loop
with the recorder, one process per width, then the report over the runs — the same status and first cause.

The plain loop is what a user writes around the model the sweep builds (:func:`coordcheck.run.train.build_on`: the
parametrization, the family's init and optimizer, each plant applied): forward the batch, the loss, ``backward``,
``step``, ``rec.step()`` — the sweep's own fixed batch, so that the two frames agree where the loops coincide. The
sweep runs one seed (a recorded run is one seed at one width).

    python -m coordcheck.testing.both_ways "hand/hidden lr unscaled" 128 runs/w128   # one width, this process

:func:`both_ways` runs the sweep in this process and each width of the recorder in a process of its own.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

__all__ = ["Answer", "record_width", "both_ways", "answer"]


@dataclass(frozen=True)
class Answer:
    """What a verdict says, as the two paths must agree on it: the status and the first cause's knob and modules."""

    status: str
    kind: str
    modules: tuple[str, ...]
    line: str

    def same(self, other: Answer) -> bool:
        return (self.status, self.kind, self.modules) == (other.status, other.kind, other.modules)


def answer(verdict: Any) -> Answer:
    """The status and first cause of ``verdict`` (its worst configuration's)."""
    from coordcheck.testing.mutants import _cause_rows

    rows = _cause_rows(verdict)
    first = rows[0] if rows else {"kind": "", "modules": [], "line": ""}
    return Answer(str(verdict.status), str(first["kind"]), tuple(first["modules"]), str(first["line"]))


def _setup(key: str) -> tuple[Any, dict, dict]:
    from coordcheck.testing.atlas import atlas
    from coordcheck.testing.mutants import mutant_options

    mutant = next((m for m in atlas() if m.key == key), None)
    if mutant is None:
        raise SystemExit(f"no atlas mutant {key!r}")
    run, kwargs = mutant_options(mutant)
    return mutant, run, kwargs


def record_width(key: str, width: int, out: str | Path) -> None:
    """Train atlas mutant ``key`` at ``width`` in a plain loop with :func:`coordcheck.record` writing ``out``."""
    import coordcheck
    from coordcheck.app.api import DATA, _default_data
    from coordcheck.run.train import build_on, cross_entropy, forward_loss
    from coordcheck.setup.init import resolve_init
    from coordcheck.setup.optim import OPTIMIZERS, with_mu
    from coordcheck.setup.parametrization import PARAMETRIZATIONS

    torch.set_num_threads(1)
    mutant, run, kwargs = _setup(key)
    fam = mutant.family
    par = PARAMETRIZATIONS[str(run.get("parametrization", "mup"))]()
    build = functools.partial(fam.build, **kwargs) if kwargs else fam.build
    base = int(run.get("base_width", 128))
    par.prepare(build, base)
    opt = run.get("optimizer", "adam")
    factory = with_mu(OPTIMIZERS[opt], par.mu_optimizer) if isinstance(opt, str) else opt
    model, optimizer = build_on(torch.device("cpu"), build, width, 0, par, base, factory, float(run.get("lr", 1e-2)),
                                resolve_init(run.get("init")))
    data = run.get("data")
    batch = data if data is not None and not isinstance(data, str) else (
        DATA[data]() if isinstance(data, str) else _default_data(fam.build, kwargs, fam.widths[0], base))
    x, y = batch.inputs, batch.targets
    loss_fn = run.get("loss") or cross_entropy
    call = {k: run[k] for k in ("loss", "output", "forward_targets") if run.get(k) is not None}
    steps = int(run.get("steps", 10))
    with coordcheck.record(model, width=width, out=out, optimizer=optimizer, batch=(x, y), steps=steps,
                           parametrization=par.name, lr=float(run.get("lr", 1e-2)), model=fam.name, seed=0,
                           **call) as rec:
        for _ in range(steps):
            loss = forward_loss(model, x, y, loss_fn, output=run.get("output"),
                                forward_targets=run.get("forward_targets", False))
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            rec.step()


def both_ways(key: str, root: str | Path) -> tuple[Answer, Answer]:
    """``(the sweep's answer, the recorder's)`` for atlas mutant ``key``: the sweep at one seed here, each width of
    the recorder in a process of its own under ``root``, judged by the report over the runs."""
    from coordcheck.report.compliance import build_report
    from coordcheck.report.runs import read_runs
    from coordcheck.testing.mutants import run_mutant

    mutant, run, _ = _setup(key)
    sweep = run_mutant(mutant, seeds=1, progress=False)
    root = Path(root)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    for w in mutant.family.widths:
        done = subprocess.run([sys.executable, "-m", "coordcheck.testing.both_ways", key, str(w), str(root / f"w{w}")],
                              env=env, capture_output=True, text=True)
        if done.returncode:
            raise RuntimeError(f"the recorder's run of {key} at width {w} failed: {done.stderr[-2000:]}")
    runs = read_runs([root])
    recorded = build_report(runs.frame, facts=runs.facts, jobs=runs.jobs).verdict
    return answer(sweep.verdict), answer(recorded)


if __name__ == "__main__":
    record_width(sys.argv[1], int(sys.argv[2]), sys.argv[3])
