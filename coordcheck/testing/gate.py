"""The pytest gate: ``assert_mup(build, widths=...)`` fails a test when a model is not muP.

Stage: orchestration for model libraries' test suites (the in-process twin of ``python -m coordcheck.report DIR
--strict``). Input: a builder ``build(width, **kwargs) -> nn.Module`` and the keywords of
:func:`coordcheck.coord_check`. Output: the :class:`coordcheck.CoordCheckResult` when the verdict passes; otherwise
an ``AssertionError`` whose message is the verdict, its cause lines (or the failing series when no cause was found)
and the path of the report, which is written either way (``report.md``, ``report.json``, the tables; the figures
with ``figures=True``).

The defaults decide on the built-in and the known-answer models (:mod:`coordcheck.setup.models`' ``gpt`` and ``mlp``,
:mod:`coordcheck.testing.known_models`, :mod:`coordcheck.testing.planted`) in seconds on one thread: widths
128-512, 5 steps, 3 seeds, the default tensors and, when the verdict fails, the cause pass — the path the command line
takes, so that the gate, the CLI, the report and the API give the same causes in the same order. Measured with
``python experiments/gate_defaults.py`` (one thread, 2 busy cores), CPU seconds per call: the built-in GPT 3.8-5.4
(mup: pass; sp: fail), the MLPs under 1, the planted nanoGPT-mup GPT 3.2-3.8 per case (each fault named). The
figures would add about 10 s per call, so they are off unless asked for.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

from coordcheck.app.api import CoordCheckResult, coord_check
from coordcheck.core.frame import DEFAULT_TENSORS
from coordcheck.core.text import num
from coordcheck.judge.verdict import Verdict

__all__ = ["assert_mup", "failure_message", "GATE_WIDTHS", "GATE_STEPS", "GATE_SEEDS"]

GATE_WIDTHS = (128, 256, 512)  # three widths (the verdict's minimum), a factor 4 apart: slopes of ~0.5 stand out
GATE_STEPS = 5  # a planted fault shows by step 1-5; longer runs at lr 1e-2 start to drift on correct models
GATE_SEEDS = 3  # the slopes' intervals need seeds; 3 is coord_check's own default
WORST = 5  # failing series listed in the message when the verdict found no cause


def assert_mup(
    build: Callable,
    widths: Sequence[int] = GATE_WIDTHS,
    *,
    allow_inconclusive: bool = False,
    report_dir: str | Path | None = None,
    figures: bool = False,
    steps: int = GATE_STEPS,
    seeds: int | Sequence[int] = GATE_SEEDS,
    tensors: Sequence[str] = DEFAULT_TENSORS,
    progress: bool = False,
    **coord_check_kwargs: object,
) -> CoordCheckResult:
    """Run :func:`coordcheck.coord_check` on ``build`` and raise ``AssertionError`` unless the verdict passes.

    ``allow_inconclusive=True`` accepts an inconclusive verdict (too few widths, undecided series) as a pass; a
    failure always raises. The report goes to ``report_dir`` (created; default: a new temporary directory,
    ``coordcheck-*`` under the system's temp dir) and its path ends the message; ``figures=True`` adds the
    figures (about 10 s). Every other keyword (``parametrization``, ``optimizer``, ``lr``, ``data``, ``base_width``,
    ``rules``, the builder's own keywords, ...) goes to ``coord_check`` as it is, and so do its errors
    (:class:`coordcheck.CoordCheckError` for a mistake in the call: an error, not a failed check). Returns the result.
    """
    __tracebackhide__ = True  # pytest shows the test's line, not this function's
    result = coord_check(build, widths, steps=steps, seeds=seeds, tensors=tensors, progress=progress,
                         **coord_check_kwargs)
    out = Path(report_dir) if report_dir is not None else Path(tempfile.mkdtemp(prefix="coordcheck-"))
    path = result.write(out, figures=figures)
    v = result.verdict
    if v.passed or (allow_inconclusive and v.status == "inconclusive"):
        return result
    raise AssertionError(failure_message(v, path))


def failure_message(verdict: Verdict, report: Path | str | None = None) -> str:
    """What :func:`assert_mup` raises: the verdict's title and reason, then one ``cause:`` line per cause (first in
    call order first; prefixed with the parametrization when several were judged) or, without a cause, one
    line per worst series of the verdict's status (``fail: module tensor (stat) at step t: slope [interval], band``),
    then ``report: PATH``."""
    v = verdict
    causes = v.causes.sort_values(["config_id", "order"], kind="stable") if len(v.causes) else v.causes
    causes = causes[causes["kind"] != "candidates"] if len(causes) else causes  # what was seen, no knob: the series
    lines = [v.title if len(causes) else f"{v.title}: {v.reason}"]  # a reason with a cause restates the first
    many = len(v.configs) > 1
    for c in causes.itertuples():
        lines.append(f"cause: {c.parametrization + ': ' if many else ''}{c.line}")
    if causes.empty:
        worst = v.worst(len(v.series))
        for s in worst[worst["status"] == v.status].head(WORST).itertuples():  # a failure's series: the failing
            where = f"{s.parametrization}: " if many else ""
            what = f" — {s.diagnosis}" if isinstance(s.diagnosis, str) and s.diagnosis else ""
            lines.append(f"{s.status}: {where}{s.module} {s.tensor} ({s.stat}) at step {s.step}: slope "
                         f"{num(s.slope)} [{num(s.ci_low)}, {num(s.ci_high)}], band [{num(s.band_low)}, "
                         f"{num(s.band_high)}]{what}")
    if v.status == "inconclusive":
        lines.append("inconclusive counts as a failure here: pass allow_inconclusive=True to accept it")
    if report is not None:
        lines.append(f"report: {report}")
    return "\n".join(lines)
