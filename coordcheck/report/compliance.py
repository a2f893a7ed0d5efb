"""The compliance report: ``python -m coordcheck.report SWEEP_DIR [--strict]``.

Stage: report. Input: a sweep directory (job frames on disk, any launcher) or a tidy frame
(Python API). Output, in ``SWEEP_DIR/report/``: ``combined.parquet`` (all job frames),
``slopes.parquet`` + ``slopes.csv``, ``verdict.csv`` (judged series), ``audit.csv`` (the parameter audit,
:mod:`coordcheck.judge.facts`), the figures
(``coord_check``, ``slopes``, ``loss``, ``causes``; PDF + PNG), ``report.md`` (verdict first, then the causes),
``report.json`` (schema below), ``report.html`` (report.md as one page that needs no network, the figures in it, the
audit as a table; hovering a line of the coord-check figure shows its module, role, slope and cause:
:mod:`coordcheck.report.html`) and ``config.yaml`` (the sweep's resolved config, linked from
``report.md``; when known). Every file is written atomically; re-running is safe.
Never imports torch.

``report.json`` (``"schema": "coordcheck.report/1"``)::

    status          "pass" | "fail" | "inconclusive"
    passed          bool (status == "pass")
    reason          one line: why
    rules           the fields of verdict.Rules {stat, tol, shrink_tol, rise, rise_floor, ...}
    widths          widths that have frames
    jobs            {"ok": [job dirs], "problems": [{job, status, error}]}
    divergence      ["diverged at step t, width w", ...]
    verdict_notes   [what the verdict judged otherwise than usual, or not at all, and why (e.g.
                      a head dimension fixed across widths: no step-0 1/d_head test)]
    configurations  [{config_id, model, parametrization, optimizer, lr, data, data_policy,
                      status, reason, n_widths, window_end, first_unstable_step, instability}]
    causes          [{config_id, parametrization, order, kind, what, modules, measure, step,
                      exponent, ci_low, ci_high, expected, fix, line, direction}]: the causes, first in call
                    explained first (coordcheck.judge.explain; empty without the weights' facts)
    modules         [{config_id, module, layer_index, role, status, tensor, step, slope,
                      ci_low, ci_high, margin, transient_steps, diagnosis, cause, inherited_from,
                      inherited_via}]
                    (worst judged series of each module: most severe status, then smallest
                    margin = distance to the band's nearest edge, negative outside; ``cause``: the
                    ``what`` of the cause it is, ``inherited_from``: of the cause it inherits from,
                    ``inherited_via``: ``forward`` (a cause before it) or ``backward`` (after it))
    worst           the worst offending series (same fields + stat, n_widths, expect)
    instability     [{config_id, width, seed, unstable_step, reason}]
    figures         {name: relative path}
    notes           [figures that could not be drawn, and why]
    environment     [{device, device_name, torch, cuda, precision[, processes, parallel]}]: where the jobs ran (from
                    job.json; under torchrun, how many processes and which wrapping)
    models          [{config_id, width, n_params, fingerprint}]: the model each width built (from job.json's
                    shapes; rule 9 fails widths that built the same one)
    command, config the exact command line (under torchrun or srun, the one that started the processes) and the
                    resolved config, when known
    depth           null for a frame run at one depth; else the depth verdict (coordcheck.judge.depth):
                    {status, reason, width_status ("not judged (one width)" for a pure depth sweep, else the width
                     verdict's own status), matching (how series are matched across depths: places.MATCHING),
                     families: [{family_id, width, parametrization, depth_scaling, status, reason, n_depths,
                                 min_depth, max_depth, window_end, first_unstable_step}],
                     series: [{family_id, width, place, place_kind, role, tensor, step, slope, ci_low, ci_high,
                               band_low, band_high, status, diagnosis}] (the judged ones: pooled block modules are
                              shown, not judged; the loss row's "slope" is the rise of the loss from the shallowest
                              to the deepest depth over the step-0 loss),
                     causes: [{family_id, width, order, kind, what, measure, exponent, expected, fix, line}],
                     notes: [...]}
    experts         null for a frame run at one number of experts; else the experts verdict
                    (coordcheck.judge.experts; report.axes.experts_payload): {status, reason, width_status,
                     groups: [{family_id, width, depth, parametrization, status, reason, n_experts, min_experts,
                               max_experts, window_end, first_unstable_step}],
                     series: [{family_id, width, depth, module, place_kind, role, tensor, step, slope, ci_low,
                               ci_high, band_low, band_high, status, diagnosis, rule}] (the judged ones), notes: [...]}

NaN is written as ``null``. Exit status with ``--strict``: 0 pass, 1 fail, 2 inconclusive
(a CI gate); without it, 0 whenever a report was written. Bad input: one line, exit 2. The
verdict's flags (``--stat``, ``--tol``, ``--min-widths``, ...) are generated from the fields of
``verdict.Rules`` and checked as the sweep's ``report.*`` knobs are
(``coordcheck.report.knobs.ReportOptions``); ``--layout guide|grid`` picks the coord-check figure (guide, the paper
figure, by default).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from coordcheck.judge.explain import loss_jump
from coordcheck.judge.facts import CAUSE_COLUMNS, audit_table
from coordcheck.judge.roles import with_roles
from coordcheck.core.errors import CoordCheckError
from coordcheck.core.frame import atomic_write
from coordcheck.judge.slopes import fit_slopes
from coordcheck.report.axes import depth_lines, depth_payload, experts_lines, experts_payload
from coordcheck.report.common import REPORT_DIR, environments, launched, run_lines, write_config
from coordcheck.report.figures import coord_figure_options, write_figures
from coordcheck.report.html import HTML_NAME, audit_html, write_page
from coordcheck.report.knobs import DEFAULT_LAYOUT
from coordcheck.report.runs import read_runs, recorded, runs_out
from coordcheck.report.terminal import failing_table
from coordcheck.run.sweep import JobProblem, Sweep, aggregate, job_facts, no_frame_error, sweep_config
from coordcheck.core.text import md_escape, num, records, write_json
from coordcheck.judge.verdict import NOT_JUDGED, Rules, Verdict, judge

__all__ = ["Report", "build_report", "write_report", "report_sweep", "coord_figure_options"]

SCHEMA = "coordcheck.report/1"
AUDIT_NAME = "audit.csv"  # SWEEP_DIR/report/audit.csv: the measured facts (judge.facts), linked from report.md
NO_FACTS_NOTE = ("not measured: the causes need the facts measured from the weights (weight, update and gain rows), "
                 "which every sweep and recorder of this version records; this frame has none")
@dataclass
class Report:
    """A judged sweep: the verdict plus what the report files are made of."""

    frame: pd.DataFrame
    slopes: pd.DataFrame
    verdict: Verdict
    problems: list[JobProblem] = field(default_factory=list)
    jobs: list[str] = field(default_factory=list)
    command: str | None = None
    config: str | None = None
    figures: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    environment: list[dict] = field(default_factory=list)  # where the jobs ran: device, torch, CUDA, precision
    audit: pd.DataFrame = field(default_factory=pd.DataFrame)  # the measured facts (coordcheck.judge.facts), audit.csv
    facts: list[dict] = field(default_factory=list)  # the jobs' facts (job.json): the depth figure's labels

    @property
    def status(self) -> str:
        return self.verdict.status

    def summary(self, path: Path) -> list[str]:
        """What the command line prints: the verdict, the failing modules' table (:mod:`coordcheck.report.terminal`:
        at most 100 columns), jobs that left no frame, where the report is, and last the first cause when there is
        one."""
        first = self.verdict.first_cause
        return [f"coordcheck: {self.status.upper()} — {self.verdict.reason}",
                *failing_table(self.verdict),
                *(f"coordcheck: job {p.job} {p.status}: {p.error}" for p in self.problems),
                f"coordcheck: report {path}",
                *([f"coordcheck: first cause: {first}"] if first else [])]

    def payload(self) -> dict:
        v = self.verdict
        mod_cols = ["config_id", "module", "layer_index", "role", "status", "tensor", "step", "slope", "ci_low",
                    "ci_high", "margin", "transient_steps", "diagnosis", "cause", "inherited_from", "inherited_via",
                    "rule", "role_from"]
        worst_cols = [c for c in mod_cols[:13] if c != "transient_steps"] + ["stat", "expect", "n_widths", "n_points",
                                                                             "rule", "role_from"]
        cfg_cols = list(v.configs.columns) if len(v.configs) else []
        return {
            "schema": SCHEMA,
            "status": v.status,
            "passed": v.passed,
            "reason": v.reason,
            "rules": asdict(v.rules),
            "widths": sorted(int(w) for w in self.frame["width"].unique()),
            "jobs": {"ok": self.jobs, "problems": [asdict(p) for p in self.problems]},
            "divergence": v.divergence,
            "verdict_notes": v.notes,
            "configurations": records(v.configs, cfg_cols),
            "causes": records(v.causes, CAUSE_COLUMNS),
            "modules": records(v.modules, mod_cols),
            "worst": records(v.worst(20), worst_cols),
            "instability": records(v.instability.dropna(subset=["unstable_step"]),
                                    ["config_id", "width", "seed", "unstable_step", "reason"]),
            "figures": self.figures,
            "notes": self.notes,
            "environment": self.environment,
            "models": records(v.models, ["config_id", "width", "n_params", "fingerprint"]),
            "command": self.command,
            "config": self.config,
            "depth": depth_payload(v),
            "experts": experts_payload(v),
        }

    def markdown(self) -> str:
        v = self.verdict
        icon = {"pass": "PASS", "fail": "FAIL", "inconclusive": "INCONCLUSIVE"}[v.status]
        widths = sorted(int(w) for w in self.frame["width"].unique())
        r = v.rules
        lines = [
            "# muP coordinate check",
            "",
            f"**Verdict: {icon}** — {md_escape(v.reason)}",
            "",
            *(cause_lines(v) if v.width_status != NOT_JUDGED else []),  # a pure depth sweep: its causes in Depth
            *(line for n in v.notes for line in (f"Note: {md_escape(n)}", "")),
            f"Widths {widths}; statistic `{r.stat}`; a series must stay within slope "
            f"[{-r.shrink_tol:+.2f}, {r.tol:+.2f}] (flat) or below {r.tol:+.2f} (output and attention may shrink); "
            f"slope = d log2({r.stat}) / d log2(width), fitted over every width and seed.",
            "",
        ]
        if len(v.configs) > 1 and v.width_status != NOT_JUDGED:
            lines += ["## Configurations", "", "| parametrization | optimizer | lr | status | reason |",
                      "|---|---|---|---|---|"]
            for c in v.configs.itertuples():
                lines.append(f"| {md_escape(c.parametrization)} | {md_escape(c.optimizer)} | {c.lr:g} | {c.status} | "
                             f"{md_escape(c.reason)} |")
            lines.append("")
        lines += depth_lines(v) + experts_lines(v)
        if self.problems:
            lines += ["## Jobs that left no frame", "", "| job | status | error |", "|---|---|---|"]
            lines += [f"| {md_escape(p.job)} | {p.status} | {md_escape(p.error)} |" for p in self.problems]
            lines.append("")
        one_width = v.width_status == NOT_JUDGED  # a pure depth sweep: the width tables would only say "undefined"
        worst = v.worst(10)
        lines += ["## Worst offenders", ""]
        if one_width:
            lines.append("Width invariance not judged (one width): the " + ("experts" if v.depth is None else "depth")
                         + " verdict's series are in " + ("Experts." if v.depth is None else "Depth."))
        elif len(worst):
            lines += ["| module | role | tensor | step | slope | 95% interval | status | likely cause |",
                      "|---|---|---|---|---|---|---|---|"]
            walked = v.modules.set_index(["config_id", "module"])[["cause", "inherited_from", "inherited_via"]]
            measured = set(v.evidence["config_id"])
            said: dict[str, str] = {}  # each text once: a repeat points at the row that says it
            for w in worst.itertuples():
                why = w.diagnosis  # the guess from the symptom, unless the causes say better
                if w.config_id in measured and (w.config_id, w.module) in walked.index:
                    m = walked.loc[(w.config_id, w.module)]
                    why = (("the cause: see Cause" if m["cause"] == w.module else f"a cause ({m['cause']}): see Cause")
                           if m["cause"] else
                           f"inherited from {m['inherited_from']}" + (" (through the backward pass)"
                                                                      if m["inherited_via"] == "backward" else "")
                           if m["inherited_from"] else "undecided: no cause the measurements show (see Cause)"
                           if w.status == "inconclusive" else "no cause found (see Cause)")
                if len(why) > 100 and why in said:
                    why = f"as for {said[why]}"
                said.setdefault(why, w.module)
                lines.append(
                    f"| {md_escape(w.module)} | {role_cell(w)} | {w.tensor} | {w.step} | {num(w.slope)} | "
                    f"[{num(w.ci_low)}, {num(w.ci_high)}] | {w.status} | {md_escape(why)} |"
                )
        else:
            lines.append("None: every judged series is within tolerance.")
        lines += ["", "## Training stability", ""]
        unstable = v.instability.dropna(subset=["unstable_step"])
        if len(unstable):
            lines += ["| width | seed | step | what happened |", "|---|---|---|---|"]
            lines += [f"| {u.width} | {u.seed} | {int(u.unstable_step)} | {md_escape(u.reason)} |"
                      for u in unstable.itertuples()]
            ends = ", ".join(f"{c.parametrization}: steps 0 to {c.window_end}" for c in v.configs.itertuples())
            lines += ["", f"Slopes are judged on the steps before the first instability at any width ({ends})."]
        else:
            loss_rows = self.frame[self.frame["tensor"] == "loss"]
            jumps = [(cid, loss_jump(g)) for cid, g in loss_rows.groupby("config_id", sort=False)]
            jumps = [(cid, j) for cid, j in jumps if j is not None]
            rule = f"never above {1 + r.rise:g}x its running minimum for {r.persist} steps"
            if jumps:
                step, width, a, b, where = jumps[0][1]
                lines.append(f"The loss did not turn unstable by the stability rule ({rule}), so every step is "
                             f"judged; it does jump at step {step} ({where}; width {width}: {a:.3g} -> {b:.3g}, "
                             f"{b / a - 1:+.0%}), which the verdict reads as dynamics near the edge of stability.")
            else:
                lines.append(f"The loss never turned unstable at any width ({rule}): every step is judged.")
        loss = self.frame[self.frame["tensor"] == "loss"]
        if len(loss):
            steps = sorted(loss["step"].unique())
            shown = sorted({steps[0], steps[len(steps) // 2], steps[-1]})
            by = ["width", "depth"] if loss["depth"].nunique() > 1 else ["width"]  # a depth sweep: each depth
            table = loss[loss["step"].isin(shown)].pivot_table(index=by, columns="step", values="value",
                                                                 dropna=False, aggfunc="mean")
            what = ("Loss by width and depth (mean over seeds; under muP with depth scaling at a sound learning rate "
                    "wider and deeper are not worse):" if len(by) > 1 else
                    "Loss by width (mean over seeds; under muP at a sound learning rate the curves coincide "
                    "and wider is not worse):")
            lines += ["", what, "", "| " + " | ".join(by) + " | " + " | ".join(f"step {t}" for t in shown) + " |",
                      "|" + "---|" * (len(by) + len(shown))]
            lines += ["| " + " | ".join(str(k) for k in (key if isinstance(key, tuple) else (key,))) + " | "
                      + " | ".join(num(row[t], "{:.3g}") for t in shown) + " |" for key, row in table.iterrows()]
        if not one_width:
            lines += ["", "## Modules", "",
                      "Each module's worst judged series (the most severe status, then the smallest margin): its slope "
                      "and its margin to the band (negative: outside). Transients: one-step excursions not counted "
                      "(rule 4).", "",
                      "| layer | module | role | status | worst slope | margin | at | transients | cause |",
                      "|---|---|---|---|---|---|---|---|---|"]
            for m in v.modules.itertuples():
                lines.append(f"| {m.layer_index} | {md_escape(m.module)} | {role_cell(m)} | {m.status} | "
                             f"{num(m.slope)} | "
                             f"{num(m.margin)} | {m.tensor}, step {m.step} | {m.transient_steps or ''} | "
                             f"{md_escape(module_cause(m))} |")
        if self.figures or self.notes:
            lines += ["", "## Figures", ""]
            lines += [f"- {md_escape(n)}" for n in self.notes]
            for name, path in self.figures.items():
                if path.endswith(".png"):
                    lines += [f"![{name}]({path})", ""]
        built = []  # the model each width built (rule 9)
        for c in v.configs.itertuples() if len(v.models) else []:
            rows = v.models[v.models["config_id"] == c.config_id]
            if len(rows):
                built.append(f"{c.parametrization + ': ' if len(v.configs) > 1 else ''}{models_line(rows)}")
        if len(self.audit):
            built.append(f"parameter facts (class; effective init, update per step and multiplier measured from the "
                         f"weights, weight decay and ε as declared; exponents in width): [{AUDIT_NAME}]({AUDIT_NAME})")
        lines += run_lines(self.environment, self.command, self.config, more=built)
        return "\n".join(lines) + "\n"


def cause_lines(v: Verdict) -> list[str]:
    """The report's **Cause** section: one line per cause (parameter or class, what is off, the measured exponent
    with its interval, what muP expects, the fix), per configuration; for one without a cause, what was seen instead;
    for a frame without ``own`` rows, that the causes need it."""
    lines = ["## Cause", ""]
    many = len(v.configs) > 1
    for c in v.configs.itertuples() if len(v.configs) else []:
        mine = v.causes[v.causes["config_id"] == c.config_id].sort_values("order")
        where = f"{c.parametrization}: " if many else ""
        if len(mine):
            lines += [f"- {where}**{md_escape(r.what)}**: {md_escape(r.line.removeprefix(f'{r.what}: '))}"
                      for r in mine.itertuples()]
        elif c.config_id not in set(v.evidence["config_id"]):
            lines.append(f"- {where}{md_escape(NO_FACTS_NOTE)}")
        elif c.status == "pass":
            lines.append(f"- {where}none: every judged series is within tolerance (a cause needs a symptom)")
        else:
            lines.append(f"- {where}{md_escape(c.reason)}")
    return lines + [""]


def role_cell(row: Any) -> str:
    """A table's role cell: the role and, where the jobs' facts decided it, what did (``output (weight: width →
    fixed)``; :mod:`coordcheck.judge.roles`)."""
    said = getattr(row, "role_from", None)
    return md_escape(f"{row.role} ({said})" if isinstance(said, str) and said else row.role)


def module_cause(m: Any) -> str:
    """A module row's cause column: "cause", "from X" (forward) or "from X (backward)"."""
    if m.cause:
        return "cause" if m.cause == m.module else f"cause ({m.cause})"
    if m.inherited_from:
        return f"from {m.inherited_from}" + (" (through the backward pass)" if m.inherited_via == "backward" else "")
    return ""


def models_line(models: pd.DataFrame) -> str:
    """``parameters by width: 64: 1738, 128: 1738 (same model as 64)`` — one configuration's rows of
    ``Verdict.models``."""
    seen: dict[str, int] = {}
    parts = []
    for r in models.sort_values("width").itertuples():
        same = f" (same model as {seen[r.fingerprint]})" if r.fingerprint in seen else ""
        seen.setdefault(r.fingerprint, r.width)
        parts.append(f"{r.width}: {r.n_params}{same}")
    return "parameters by width: " + ", ".join(parts)


def build_report(
    frame: pd.DataFrame, *, rules: Rules = Rules(), problems: list[JobProblem] | None = None,
    jobs: list[str] | None = None, command: str | None = None, config: str | None = None,
    facts: list[dict] | None = None,
) -> Report:
    """Fit slopes and judge a tidy frame (with the jobs that left no frame: rule 8 of the verdict; with the jobs'
    ``facts``, their parameter shapes: rule 9)."""
    if frame.empty:
        raise CoordCheckError("no measurements to report: every job failed or the frame is empty")
    slopes = fit_slopes(frame)
    problems = list(problems or [])
    facts = list(facts or [])
    verdict = judge(frame, slopes, rules, problems=problems, facts=facts)  # rules 8 and 9; the audit, once
    frame, slopes = with_roles(frame, verdict.roles), with_roles(slopes, verdict.roles)  # one story: the judged roles
    return Report(frame, slopes, verdict, problems, list(jobs or []), command, config,
                  audit=audit_table(verdict.audit), facts=facts)


def write_report(
    report: Report, out_dir: str | Path, *, figures: bool = True, steps: list[int] | None = None,
    size: str = "paper", layout: str = DEFAULT_LAYOUT,
) -> Path:
    """Write every report file into ``out_dir``; return the path of ``report.md``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write(out / "combined.parquet", lambda p: report.frame.to_parquet(p, index=False))
    atomic_write(out / "slopes.parquet", lambda p: report.slopes.to_parquet(p, index=False))
    atomic_write(out / "slopes.csv", lambda p: report.slopes.to_csv(p, index=False))
    atomic_write(out / "verdict.csv", lambda p: report.verdict.series.to_csv(p, index=False))
    atomic_write(out / AUDIT_NAME, lambda p: report.audit.to_csv(p, index=False))
    shown: dict[str, str] = {}  # report.html's interactive figures, by the PNG report.md shows in their place
    tips: dict[str, dict] = {}
    if figures:
        report.figures = write_figures(report, out, steps, size, layout, page=(shown, tips))
    write_json(out / "report.json", report.payload(), allow_nan=False)
    write_config(out, report.config)
    md = report.markdown()
    write_page(out / HTML_NAME, md, title=report.verdict.title, status=report.status, images=shown, tips=tips,
               after=audit_html(report.audit, AUDIT_NAME))
    return atomic_write(out / "report.md", lambda p: p.write_text(md))


def report_sweep(
    sweep_dir: str | Path | list, *, rules: Rules = Rules(), figures: bool = True, steps: list[int] | None = None,
    size: str = "paper", layout: str = DEFAULT_LAYOUT, out: str | Path | None = None,
) -> tuple[Report, Path]:
    """Aggregate a sweep directory from disk, judge it and write ``SWEEP_DIR/report/`` (``out``: elsewhere).

    ``sweep_dir`` a list: runs made elsewhere (:func:`coordcheck.record`: run directories, folders of them, globs),
    judged as one sweep (:mod:`coordcheck.report.runs`), the report in the folder that holds them all."""
    if not isinstance(sweep_dir, (list, tuple)) and Path(sweep_dir).is_dir() and recorded(Path(sweep_dir)):
        sweep_dir = [sweep_dir]  # a folder of runs recorded elsewhere
    if isinstance(sweep_dir, (list, tuple)):
        runs = read_runs(sweep_dir)
        report = build_report(runs.frame, rules=rules, jobs=runs.jobs, facts=runs.facts,
                              command="python -m coordcheck.report " + " ".join(map(str, sweep_dir)))
        report.environment, report.notes = environments(runs.facts), [*report.notes, *runs.notes]
        path = Path(out) if out is not None else runs_out(sweep_dir)
        return report, write_report(report, path, figures=figures, steps=steps, size=size, layout=layout)
    sweep_dir = Path(sweep_dir)
    report = _judge_sweep(sweep_dir, rules)
    path = write_report(report, Path(out) if out is not None else sweep_dir / REPORT_DIR, figures=figures,
                        steps=steps, size=size, layout=layout)
    return report, path


def _judge_sweep(sweep_dir: Path, rules: Rules) -> Report:
    """The report of the frames and facts on disk under ``sweep_dir``, not yet written."""
    sweep: Sweep = aggregate(sweep_dir)
    command, config = sweep_config(sweep_dir)
    if sweep.frame.empty:
        raise no_frame_error(sweep_dir, sweep.problems)
    facts = [job_facts(sweep_dir / job) for job in sweep.jobs]
    launch = launched(facts)  # several processes ran it: the command that started them runs it again
    if launch is not None:
        command = launch if not launch.endswith(" -m coordcheck") else sweep_config(sweep_dir, program=launch)[0]
    report = build_report(sweep.frame, rules=rules, problems=sweep.problems, jobs=sweep.jobs, command=command,
                          config=config, facts=facts)
    report.environment = environments(facts)
    return report
