"""The μTransfer report: ``python -m coordcheck.transfer.report SWEEP_DIR [--strict]``.

Stage: report (the learning-rate sweep's twin of ``coordcheck.report``). Input: a transfer sweep
directory (each job's ``transfer.parquet``, any launcher) or a loss frame (Python API). Output,
in ``SWEEP_DIR/report/``: ``losses.parquet`` (every job's frame), ``curves.csv`` (held-out loss
per width and lr), ``optima.csv``, ``shifts.csv``, the figures ``transfer`` (loss against log2
lr, a line per width, a panel per parametrization, the fitted optima marked) and ``optimum``
(optimum against width), PDF + PNG, ``transfer.md`` (verdict first), ``transfer.json`` and
``config.yaml`` (the resolved config, linked from ``transfer.md``; when known). Every file is
written atomically. Never imports torch.

``transfer.json`` (``"schema": "coordcheck.transfer/1"``)::

    status          "transfers" | "does not transfer" | "inconclusive"
    transfers       bool (status == "transfers")
    reason          one line: why
    rules           {tol, min_points, min_widths, level} (coordcheck.transfer.fit.TransferRules)
    widths, lrs     what was swept (lrs ascending)
    parametrizations [{config_id, parametrization, control, status, reason, shift, se, ci_low,
                      ci_high, n_widths, n_optima}]   (shift: octaves of lr per width doubling)
    optima          [{config_id, parametrization, width, optimum (log2 lr), optimum_loss, se, df,
                      se_source ("seeds" | "fit"), ci_low, ci_high, best_lr, best_loss, n_lrs,
                      n_finite, n_seeds, edge ("" | "low" | "high" | "unstable" | "few"),
                      fit_low, fit_high (log2 lr of the first and last point the parabola was fitted to),
                      max_stable (log2 of the largest lr that did not diverge)}]
    wider_not_worse [{config_id, parametrization, width, reference_width, log2_lr, loss}]
    diverged        [{parametrization, width, lr, seeds}]: runs that stopped early
    jobs            {"ok": [job dirs], "problems": [{job, status, error}]}
    figures         {name: relative path}
    notes           [figures that could not be drawn, and why]
    environment     [{device, device_name, torch, cuda, precision}]: where the jobs ran (from job.json)
    command, config the exact command line and resolved config, when known
    axes            the axes judged: ["width"], ["depth"] or ["width", "depth"] (those swept); status is the
                    worst of their verdicts, and the fields above are width's
    depth           across depth (when depth is swept; else absent): {status, label ("transfers across
                    depth" ...), reason, depths, families: [{family_id, parametrization, width, status,
                    reason, shift, se, ci_low, ci_high, n_depths, n_optima, loss_slope, loss_slope_low,
                    loss_slope_high}] (shift: octaves of lr per depth doubling; loss_slope: best held-out
                    loss per depth doubling), optima: [{family_id, config_id, parametrization, width,
                    depth, optimum, ... as above, seed_best_losses}], deeper_not_worse: [{family_id,
                    parametrization, width, depth, reference_depth, log2_lr, loss}]}
    experts         across the number of experts (when it is swept; else absent): {status, label ("transfers
                    across the number of experts" ...), reason, experts, families: [{family_id, parametrization,
                    width, depth, status, reason, shift, se, ci_low, ci_high, n_expertss, n_optima}], optima:
                    [{family_id, config_id, parametrization, width, depth, experts, optimum, ...}]}

NaN is written as ``null``. Exit status with ``--strict``: 0 transfers, 1 does not transfer,
2 inconclusive (a CI gate); without it, 0 whenever a report was written. Bad input: one line,
exit 2. A job that left no frame turns ``transfers`` into ``inconclusive`` (a missing point can
hide an optimum).
"""

from __future__ import annotations

import argparse
import functools
import math
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from coordcheck.core.errors import EXIT, CoordCheckError
from coordcheck.core.frame import atomic_write
from coordcheck.report.common import REPORT_DIR, ReportCommand, environments, report_command, run_lines, write_config
from coordcheck.run.sweep import JobProblem, aggregate, job_facts, no_frame_error, sweep_config
from coordcheck.core.text import md_escape, num, records, write_json
from coordcheck.transfer import frame as transfer_frame
from coordcheck.transfer.axes import AXIS_WORDS, axes_of
from coordcheck.transfer.fit import curves, fit_optima, fit_shifts, wider_not_worse
from coordcheck.transfer.verdict import (
    DOES_NOT,
    INCONCLUSIVE,
    TRANSFERS,
    TransferRules,
    TransferVerdict,
    across,
    judge_transfer,
)

__all__ = ["TransferReport", "build_transfer_report", "write_transfer_report", "report_transfer_sweep", "main",
           "EXIT", "SCHEMA"]

SCHEMA = "coordcheck.transfer/1"


def _lr(log2_lr: float) -> str:
    return "—" if not math.isfinite(log2_lr) else f"2^{log2_lr:.2f} ({2 ** log2_lr:.2g})"


@dataclass
class DepthFit:
    """The fit across depth (``fit_optima(..., axis="depth")``): optima per depth, the verdict, and the loss of every
    depth at the shallowest depth's optimum (``deeper``)."""

    optima: pd.DataFrame
    verdict: TransferVerdict
    deeper: pd.DataFrame


@dataclass
class TransferReport:
    """A judged learning-rate sweep: the verdict plus what the report files are made of."""

    frame: pd.DataFrame
    curves: pd.DataFrame
    optima: pd.DataFrame
    verdict: TransferVerdict
    wider: pd.DataFrame
    problems: list[JobProblem] = field(default_factory=list)
    jobs: list[str] = field(default_factory=list)
    command: str | None = None
    config: str | None = None
    figures: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    environment: list[dict] = field(default_factory=list)  # where the jobs ran (coordcheck.report.environments)
    depth: DepthFit | None = None  # across depth, when depth is swept
    experts: DepthFit | None = None  # across the number of experts, when it is swept (no deeper-not-worse table)
    axes: list[str] = field(default_factory=lambda: ["width"])  # the axes judged (fit.axes_of)

    @property
    def verdicts(self) -> list[TransferVerdict]:
        """The verdict of each axis judged (width's, then depth's)."""
        fits = {"depth": self.depth, "experts": self.experts}
        return [self.verdict if a == "width" else fits[a].verdict for a in self.axes
                if a == "width" or fits.get(a) is not None]

    @property
    def status(self) -> str:
        """The worst of the axes' verdicts."""
        order = {DOES_NOT: 0, INCONCLUSIVE: 1, TRANSFERS: 2}
        return min((v.status for v in self.verdicts), key=order.__getitem__)

    @property
    def shifts(self) -> pd.DataFrame:
        return self.verdict.shifts

    def summary(self, path: Path) -> list[str]:
        """What the command line prints: the verdict, jobs that left no frame, where the report is."""
        return [*(f"coordcheck: μTransfer {v.status.upper()} — {v.reason}" if v.axis == "width" else
                  f"coordcheck: μTransfer across {AXIS_WORDS[v.axis]}: {v.label.upper()} — {v.reason}"
                  for v in self.verdicts),
                *(f"coordcheck: job {p.job} {p.status}: {p.error}" for p in self.problems),
                f"coordcheck: report {path}"]

    def diverged(self) -> pd.DataFrame:
        held = self.frame[(self.frame["split"] == "heldout") & (self.frame["status"] != "ok")]
        return (held.groupby(["parametrization", "width", "depth", "lr"])["seed"].apply(sorted)
                .reset_index(name="seeds")
                if len(held) else pd.DataFrame(columns=["parametrization", "width", "depth", "lr", "seeds"]))

    def payload(self) -> dict:
        v = self.verdict
        out = {
            "schema": SCHEMA,
            "status": self.status,
            "transfers": self.status == TRANSFERS,
            "reason": v.reason,
            "rules": asdict(v.rules),
            "widths": sorted(int(w) for w in self.frame["width"].unique()),
            "lrs": sorted(float(x) for x in self.frame["lr"].unique()),
            "parametrizations": records(v.shifts, ["config_id", "parametrization", "control", "status", "reason",
                                                    "shift", "se", "ci_low", "ci_high", "n_widths", "n_optima"]),
            "optima": records(self.optima, list(self.optima.columns)),
            "wider_not_worse": records(self.wider, list(self.wider.columns)),
            "diverged": records(self.diverged(), ["parametrization", "width", "depth", "lr", "seeds"]),
            "jobs": {"ok": self.jobs, "problems": [asdict(p) for p in self.problems]},
            "figures": self.figures,
            "notes": self.notes,
            "environment": self.environment,
            "command": self.command,
            "config": self.config,
            "axes": self.axes,
        }
        for axis, fit, extra in (("depth", self.depth, ("loss_slope", "loss_slope_low", "loss_slope_high")),
                                 ("experts", self.experts, ())):
            if fit is None:
                continue
            cols = ("family_id", "parametrization", "width", "depth" if axis == "experts" else "experts", "control",
                    "status", "reason", "shift", "se", "ci_low", "ci_high", f"n_{axis}s", "n_optima", *extra)
            out[axis] = {
                "status": fit.verdict.status, "label": fit.verdict.label, "reason": fit.verdict.reason,
                {"depth": "depths", "experts": "experts"}[axis]: sorted(int(x) for x in self.frame[axis].unique()),
                "families": records(fit.verdict.shifts, [c for c in cols if c in fit.verdict.shifts.columns]),
                "optima": records(fit.optima, list(fit.optima.columns)),
                **({"deeper_not_worse": records(fit.deeper, list(fit.deeper.columns))} if axis == "depth" else {}),
            }
        return out

    def markdown(self) -> str:
        if self.axes == ["depth"] and self.depth is not None:
            lines = [*self._depth_lines(title=True), *self._tail_lines()]
            return "\n".join(lines) + "\n"
        if self.axes == ["experts"] and self.experts is not None:
            return "\n".join([*self._experts_lines(title=True), *self._tail_lines()]) + "\n"
        lines = self._width_lines()
        if self.depth is not None:
            lines += ["", *self._depth_lines(title=False)]
        if self.experts is not None:
            lines += ["", *self._experts_lines(title=False)]
        return "\n".join([*lines, *self._tail_lines()]) + "\n"

    def _experts_lines(self, title: bool) -> list[str]:
        e, r = self.experts, self.experts.verdict.rules
        v = e.verdict
        counts = sorted(int(x) for x in self.frame["experts"].unique())
        lrs = np.log2(sorted(self.frame["lr"].unique()))
        lines = ["# Does the learning rate transfer across the number of experts?" if title else
                 "## Across the number of experts", "",
                 f"**Verdict across the number of experts: {v.label.upper()}** — {md_escape(v.reason)}", ""]
        if title:
            lines += [f"Experts {counts}; widths {sorted(int(w) for w in self.frame['width'].unique())}; learning "
                      f"rates 2^{lrs.min():g} … 2^{lrs.max():g} ({len(lrs)} values); "
                      f"{int(self.frame.loc[self.frame['split'] == 'heldout', 'step'].max())} steps on fresh batches; "
                      f"{int(self.frame['seed'].nunique())} seed(s); held-out loss after training.", ""]
        lines += [f"Per number of experts the optimum is fitted as per width; the shift is its slope against "
                  f"log2(experts) (octaves of learning rate per doubling of the count), with a {r.level:.0%} "
                  f"interval: it transfers when the interval lies within ±{r.tol:g}.", "",
                  "| parametrization | width | status | shift | interval | reason |", "|---|---|---|---|---|---|"]
        for s in v.shifts.itertuples():
            name = f"{s.parametrization} (control)" if s.control else s.parametrization
            lines.append(f"| {md_escape(name)} | {s.width} | {across(s.status, 'experts')} | {num(s.shift)} | "
                         f"[{num(s.ci_low)}, {num(s.ci_high)}] | {md_escape(s.reason)} |")
        lines += ["", "| parametrization | width | experts | optimum lr | interval (log2) | best grid lr | best "
                  "held-out loss |", "|---|---|---|---|---|---|---|"]
        for o in e.optima.itertuples():
            lines.append(f"| {md_escape(o.parametrization)} | {o.width} | {o.experts} | {_lr(o.optimum)} | "
                         f"[{num(o.ci_low)}, {num(o.ci_high)}] | {o.best_lr:.3g} | {num(o.best_loss, '{:.4f}')} |")
        return lines

    def _depth_lines(self, title: bool) -> list[str]:
        d, r = self.depth, self.depth.verdict.rules
        v = d.verdict
        depths = sorted(int(x) for x in self.frame["depth"].unique())
        lrs = np.log2(sorted(self.frame["lr"].unique()))
        steps = int(self.frame.loc[self.frame["split"] == "heldout", "step"].max())
        seeds = int(self.frame["seed"].nunique())
        lines = ["# Does the learning rate transfer across depth?" if title else "## Across depth", "",
                 f"**Verdict across depth: {v.label.upper()}** — {md_escape(v.reason)}", ""]
        if title:
            lines += [
                f"Depths {depths}; widths {sorted(int(w) for w in self.frame['width'].unique())}; learning rates "
                f"2^{lrs.min():g} … 2^{lrs.max():g} ({len(lrs)} values); {steps} steps on fresh batches; {seeds} "
                f"seed(s); held-out loss after training.", ""]
        lines += [
            f"Per depth the optimum is fitted as per width; the shift is its slope against log2(depth) (octaves of "
            f"learning rate per depth doubling), with a {r.level:.0%} interval: it transfers across depth when the "
            f"interval lies within ±{r.tol:g}. The best held-out loss against log2(depth) must not rise (deeper is "
            f"not worse): a rise beyond its interval over seeds does not transfer, whatever the shift.", "",
            "### Shift of the optimum per depth doubling", "",
            "| parametrization | family | width | status | shift | interval | best loss per doubling | interval | "
            "reason |", "|---|---|---|---|---|---|---|---|---|"]
        for s in v.shifts.itertuples():
            name = f"{s.parametrization} (control)" if s.control else s.parametrization
            lines.append(f"| {md_escape(name)} | {s.family_id} | {s.width} | {across(s.status, 'depth')} | "
                         f"{num(s.shift)} | [{num(s.ci_low)}, {num(s.ci_high)}] | {num(s.loss_slope, '{:+.3f}')} | "
                         f"[{num(s.loss_slope_low, '{:+.3f}')}, {num(s.loss_slope_high, '{:+.3f}')}] | "
                         f"{md_escape(s.reason)} |")
        lines += ["", "### Optimum and loss at the optimum per depth", "",
                  "| parametrization | width | depth | optimum lr | interval (log2) | from | best grid lr | best "
                  "held-out loss | loss at the fitted optimum | largest stable lr |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        for o in d.optima.itertuples():
            lines.append(f"| {md_escape(o.parametrization)} | {o.width} | {o.depth} | {_lr(o.optimum)} | "
                         f"[{num(o.ci_low)}, {num(o.ci_high)}] | {o.se_source if math.isfinite(o.optimum) else o.edge} "
                         f"| {o.best_lr:.3g} | {num(o.best_loss, '{:.4f}')} | {num(o.optimum_loss, '{:.4f}')} | "
                         f"{_lr(o.max_stable)} |")
        if len(d.deeper):
            lines += ["", "### Deeper is not worse", "",
                      "Held-out loss of every depth at the shallowest depth's optimum learning rate (interpolated).",
                      "", "| parametrization | width | lr | " + " | ".join(f"depth {x}" for x in depths) + " |",
                      "|---|---|---|" + "---|" * len(depths)]
            for _, part in d.deeper.groupby(["family_id", "parametrization", "width"]):
                by = dict(zip(part["depth"], part["loss"]))
                lines.append(f"| {md_escape(part['parametrization'].iloc[0])} | {part['width'].iloc[0]} | "
                             f"{_lr(part['log2_lr'].iloc[0])} | "
                             + " | ".join(num(by.get(x, math.nan), "{:.4f}") for x in depths) + " |")
        return lines

    def _width_lines(self) -> list[str]:
        v, r = self.verdict, self.verdict.rules
        widths = sorted(int(w) for w in self.frame["width"].unique())
        lrs = np.log2(sorted(self.frame["lr"].unique()))
        steps = int(self.frame.loc[self.frame["split"] == "heldout", "step"].max())
        seeds = int(self.frame["seed"].nunique())
        lines = [
            "# Does the learning rate transfer across width?",
            "",
            f"**Verdict: {v.status.upper()}** — {md_escape(v.reason)}",
            "",
            f"Widths {widths}; learning rates 2^{lrs.min():g} … 2^{lrs.max():g} ({len(lrs)} values); {steps} steps "
            f"on fresh batches; {seeds} seed(s); held-out loss after training. The optimum is the vertex of a parabola "
            f"in log2(lr) through the best learning rate and its neighbours; the shift is its slope against "
            f"log2(width) (octaves of learning rate per width doubling), with a {r.level:.0%} interval. It transfers "
            f"when the interval lies within ±{r.tol:g}.",
            "",
            "## Shift of the optimum per width doubling",
            "",
            "| parametrization | status | shift | interval | reason |",
            "|---|---|---|---|---|",
        ]
        for s in v.shifts.itertuples():
            name = f"{s.parametrization} (control)" if s.control else s.parametrization
            lines.append(f"| {md_escape(name)} | {s.status} | {num(s.shift)} | [{num(s.ci_low)}, {num(s.ci_high)}] "
                         f"| {md_escape(s.reason)} |")
        lines += ["", "## Optimum per width", "",
                  "| parametrization | width | optimum lr | interval (log2) | from | best grid lr | held-out loss | "
                  "largest stable lr |", "|---|---|---|---|---|---|---|---|"]
        for o in self.optima.itertuples():
            lines.append(f"| {md_escape(o.parametrization)} | {o.width} | {_lr(o.optimum)} | "
                         f"[{num(o.ci_low)}, {num(o.ci_high)}] | {o.se_source if math.isfinite(o.optimum) else o.edge} "
                         f"| {o.best_lr:.3g} | {num(o.best_loss, '{:.4f}')} | {_lr(o.max_stable)} |")
        if len(self.wider):
            lines += ["", "## Wider is not worse", "",
                      "Held-out loss of every width at the narrowest width's optimum learning rate (interpolated): "
                      "under muP it should not rise with width.", "",
                      "| parametrization | lr | " + " | ".join(f"width {w}" for w in widths) + " |",
                      "|---|---|" + "---|" * len(widths)]
            for (_, par), part in self.wider.groupby(["config_id", "parametrization"]):
                by = dict(zip(part["width"], part["loss"]))
                lines.append(f"| {md_escape(par)} | {_lr(part['log2_lr'].iloc[0])} | "
                             + " | ".join(num(by.get(w, math.nan), "{:.4f}") for w in widths) + " |")
        return lines

    def _tail_lines(self) -> list[str]:
        lines = []
        div = self.diverged()
        lines += ["", "## Diverged runs", ""]
        if len(div):
            deep = bool((div["depth"] > 0).any())  # a depth sweep: say which depth diverged
            lines += ["Stopped early (loss non-finite or above its limit); no held-out loss.", "",
                      f"| parametrization | width |{' depth |' if deep else ''} lr | seeds |",
                      f"|---|---|{'---|' if deep else ''}---|---|"]
            lines += [f"| {md_escape(d.parametrization)} | {d.width} |{f' {d.depth} |' if deep else ''} {d.lr:.3g} | "
                      f"{d.seeds} |" for d in div.itertuples()]
        else:
            lines.append("None.")
        if self.problems:
            lines += ["", "## Jobs that left no frame", "", "| job | status | error |", "|---|---|---|"]
            lines += [f"| {md_escape(p.job)} | {p.status} | {md_escape(p.error)} |" for p in self.problems]
        if self.figures or self.notes:
            lines += ["", "## Figures", ""]
            lines += [f"- {md_escape(n)}" for n in self.notes]
            lines += [f"![{name}]({path})\n" for name, path in self.figures.items() if path.endswith(".png")]
        lines += run_lines(self.environment, self.command, self.config)
        return lines


def build_transfer_report(
    frame: pd.DataFrame, *, rules: TransferRules | None = None, problems: list[JobProblem] | None = None,
    jobs: list[str] | None = None, command: str | None = None, config: str | None = None,
    facts: list[dict] | None = None,
) -> TransferReport:
    """Fit optima and shifts and judge a loss frame (with the jobs that left no frame and the jobs' facts:
    ``judge_transfer``)."""
    rules = rules or TransferRules()
    if frame.empty:
        raise CoordCheckError("no losses to report: every job failed or the frame is empty")
    frame = transfer_frame.conform(frame)
    optima = fit_optima(frame, rules)
    problems = list(problems or [])
    verdict = judge_transfer(optima, fit_shifts(optima, rules), rules, problems=problems, facts=list(facts or []))
    axes = axes_of(frame)
    depth = None
    if "depth" in axes:
        d_optima = fit_optima(frame, rules, axis="depth")
        d_verdict = judge_transfer(d_optima, fit_shifts(d_optima, rules, axis="depth"), rules, problems=problems,
                                   axis="depth")
        depth = DepthFit(d_optima, d_verdict, wider_not_worse(frame, d_optima, axis="depth"))
    experts = None
    if "experts" in axes:
        e_optima = fit_optima(frame, rules, axis="experts")
        e_verdict = judge_transfer(e_optima, fit_shifts(e_optima, rules, axis="experts"), rules, problems=problems,
                                   axis="experts")
        experts = DepthFit(e_optima, e_verdict, pd.DataFrame())
    return TransferReport(frame, curves(frame), optima, verdict, wider_not_worse(frame, optima), problems,
                          list(jobs or []), command, config, depth=depth, experts=experts, axes=axes)


def write_transfer_report(report: TransferReport, out_dir: str | Path, *, figures: bool = True,
                          size: str = "paper") -> Path:
    """Write every report file into ``out_dir``; return the path of ``transfer.md``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write(out / "losses.parquet", lambda p: report.frame.to_parquet(p, index=False))
    atomic_write(out / "curves.csv", lambda p: report.curves.to_csv(p, index=False))
    atomic_write(out / "optima.csv", lambda p: report.optima.to_csv(p, index=False))
    atomic_write(out / "shifts.csv", lambda p: report.shifts.to_csv(p, index=False))
    if report.depth is not None:
        atomic_write(out / "depth_optima.csv", lambda p: report.depth.optima.to_csv(p, index=False))
        atomic_write(out / "depth_shifts.csv", lambda p: report.depth.verdict.shifts.to_csv(p, index=False))
    if report.experts is not None:
        atomic_write(out / "experts_optima.csv", lambda p: report.experts.optima.to_csv(p, index=False))
        atomic_write(out / "experts_shifts.csv", lambda p: report.experts.verdict.shifts.to_csv(p, index=False))
    report.figures, report.notes = {}, []  # this directory's own (a cached report may be written twice)
    if figures:
        report.figures = _write_figures(report, out, size)
    write_json(out / "transfer.json", report.payload(), allow_nan=False)
    write_config(out, report.config)
    md = report.markdown()
    return atomic_write(out / "transfer.md", lambda p: p.write_text(md))


def _write_figures(report: TransferReport, out: Path, size: str) -> dict[str, str]:
    import matplotlib.pyplot as plt

    from coordcheck.transfer.plot import plot_optima, plot_transfer

    title = report.verdict.title
    jobs = {} if "width" not in report.axes else {
        "transfer": lambda: plot_transfer(report.curves, report.optima, out / "transfer", title=title, size=size),
        "optimum": lambda: plot_optima(report.optima, out / "optimum", shifts=report.shifts, size=size),
    }
    for axis, fit in (("depth", report.depth), ("experts", report.experts)):
        if fit is not None:  # (bound per axis: the lambdas run after the loop)
            jobs[f"transfer_{axis}"] = functools.partial(plot_transfer, report.curves, fit.optima,
                                                         out / f"transfer_{axis}", title=fit.verdict.title, size=size,
                                                         axis=axis)
            jobs[f"optimum_{axis}"] = functools.partial(plot_optima, fit.optima, out / f"optimum_{axis}",
                                                        shifts=fit.verdict.shifts, size=size, axis=axis)
    figures = {}
    for name, draw in jobs.items():
        try:
            plt.close(draw())
        except ValueError as e:
            report.notes.append(f"figure {name} skipped: {e}")
            continue
        figures.update({f"{name} ({ext})": f"{name}.{ext}" for ext in ("png", "pdf")})
    return figures


def report_transfer_sweep(sweep_dir: str | Path, *, rules: TransferRules | None = None, figures: bool = True,
                          size: str = "paper") -> tuple[TransferReport, Path]:
    """Aggregate a transfer sweep directory from disk, judge it and write ``SWEEP_DIR/report/``."""
    sweep_dir = Path(sweep_dir)
    sweep = aggregate(sweep_dir, frame_name=transfer_frame.FRAME_NAME, read=transfer_frame.read_frame,
                      concat=transfer_frame.concat_frames, what="transfer frames")
    if sweep.frame.empty:
        raise no_frame_error(sweep_dir, sweep.problems)
    command, config = sweep_config(sweep_dir, program="python -m coordcheck.transfer")
    facts = [job_facts(sweep_dir / job) for job in sweep.jobs]
    report = build_transfer_report(sweep.frame, rules=rules, problems=sweep.problems, jobs=sweep.jobs,
                                   command=command, config=config, facts=facts)
    report.environment = environments(facts)
    path = write_transfer_report(report, sweep_dir / REPORT_DIR, figures=figures, size=size)
    return report, path


def rule_flags(p: argparse.ArgumentParser) -> None:
    """``--tol``, ``--min-points``, ``--min-widths``, ``--level``: the fields of :class:`TransferRules`."""
    from dataclasses import fields

    from coordcheck.transfer.knobs import TRANSFER_REPORT

    TRANSFER_REPORT.add_flags(p, only=tuple(f.name for f in fields(TransferRules)))


def main(argv: list[str] | None = None) -> int:
    from coordcheck.transfer.knobs import TRANSFER_REPORT

    return report_command(
        sys.argv[1:] if argv is None else list(argv), prog="python -m coordcheck.transfer.report",
        knobs=TRANSFER_REPORT, report=report_transfer_sweep,
        description="Aggregate a learning-rate (μTransfer) sweep directory, fit the optimum per width and judge "
                    "whether it transfers; writes report/transfer.md and transfer.json.",
        sweep_help="the multirun directory of python -m coordcheck.transfer",
    )


COMMAND = ReportCommand(frame_name=transfer_frame.FRAME_NAME, main=main)  # for python -m coordcheck.report


def cli() -> None:
    """Console-script entry point (``coordcheck-transfer-report``)."""
    sys.exit(main())


if __name__ == "__main__":
    cli()
