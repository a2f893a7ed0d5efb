"""The verdict: is this model muP? Role-aware rules over the slopes, inside a stable window.

Stage: judge. Input: a tidy frame (and optionally its slopes table). Output: a
:class:`Verdict` — overall ``pass`` / ``fail`` / ``inconclusive``, one row per judged series
(with its rule, status and diagnosis), one row per module, and the loss-stability facts.
Never imports torch.

The rules, numbered as in docs/verdict.md (``Rules`` holds the numbers). A series = (configuration,
module, tensor, stat, step) with the slope of ``log2|stat|`` against ``log2(width)`` over every
(width, seed) point and its 95% interval (``coordcheck.judge.slopes``).

1. **Statistic.** Only ``Rules.stat`` is judged (default ``std``).
2. **Flat.** ``out`` of input / hidden / norm layers and ``delta`` (change since step 0) of
   input / hidden / norm / output layers: slope in ``[-shrink_tol, tol]`` — growing means not
   muP, a shrinking ``delta`` means the features barely learn (lazy regime). ``in`` and ``own``
   (a module's input and its own update, where recorded) are shown, never judged: what decides is
   what every path records alike, and the causes come from the facts measured from the weights.
3. **No growth.** ``out`` of output layers and ``out``/``delta`` of attention logits: slope <= ``tol``; they may
   shrink (the
   readout at initialisation shrinks like 1/width, or is exactly zero). Output rules apply to the
   model's output — the last output module to run; an output-role module that runs before it
   (logits before a hand-written output multiplier) is ``skip``. Captured pure ``q k^T * scale``
   logits (``(sdpa)``, ``(mha)``) at step 0 must shrink where their head dimension grows with
   width: with d_head ~ width^a (``a`` fitted from the frame's ``head_dim`` over the widths; 1
   when the number of heads is fixed),
   slope <= ``-0.5 a + tol`` (independent q and k give q.k ~ sqrt(d_head); 1/d_head shrinks
   that like width^(-a/2), 1/sqrt(d_head) leaves it flat). See :func:`head_dim_growth`:
   a **fixed** head dimension (the number of heads grows, as in torchtitan-style LLaMAs) is
   judged by the no-growth rule alone, a shrinking one is ``skip``, an unrecorded one (a frame
   from before the ``head_dim`` column) falls back to no growth; each is noted in
   ``Verdict.notes``.
4. **Significance and transients.** A series fails only when its slope is outside the band
   *and* its whole 95% interval is; an estimate outside with an overlapping interval is
   ``inconclusive``. After updates a violation must persist over ``persist`` consecutive
   judged steps, else it is a ``transient`` (:func:`mark_transients`).
5. **Zeros.** A series exactly zero at every point is ``zero``, not a failure; zero at some
   widths only is ``inconclusive``; a hidden or output module whose ``delta`` is zero at every
   judged step does not learn: ``inconclusive``.
6. **Stability window.** Per (width, seed), training turns unstable at the first of ``persist``
   consecutive steps whose loss exceeds its running minimum by more than ``rise`` of it and by
   more than ``rise_floor`` of the step-0 loss, or at a non-finite loss. Only steps before the
   first instability at *any* width are judged; a violation there fails; a window with fewer
   than ``min_window`` updated steps and no violation is ``inconclusive: training unstable at
   this learning rate — lower it``.
7. **Divergence.** A non-finite value anywhere (loss or activation) fails: "diverged at step t,
   width w".
8. **Widths.** Fewer than ``min_widths`` widths is ``inconclusive``, never ``pass``; so is a sweep
   in which a job left no frame (``judge(..., problems=...)``): a width is missing from the evidence.
9. **The model grows with width.** From the parameter shapes each job recorded (``judge(...,
   facts=...)``, :mod:`coordcheck.record.shapes`): widths that built the same model (every name and shape
   alike) fail — "the builder ignores `width`: every width built the same N-parameter model", or
   "widths 128 and 256 built the same ..." — and so does a sweep in which no parameter present at the
   narrowest and the widest width is larger at the widest. Identical models are flat at every step:
   without this rule they would pass. Jobs that recorded no shapes are not checked
   (:func:`_fail_fixed_models`).
10. **Causes.** :func:`coordcheck.judge.explain.explain`: each failing series explained by the violations
   upstream of it in call order among the facts measured from the weights (:mod:`coordcheck.judge.facts`: each
   parameter's effective init and update against muP's table for its class and optimizer); a violation that
   explains one is a cause, a failing module inherits from the nearest (``Verdict.causes``,
   ``Verdict.evidence``, ``Verdict.audit``, the module table's ``cause`` / ``inherited_from``); a failing
   configuration's reason leads with its first cause, one without says what was seen and names no knob. A
   violation no failing series shows is a note with its forecast: it never fails a configuration.
11. **Overall.** ``fail`` if any configuration fails, else ``inconclusive`` if any is, else
   ``pass``.
12. **Depth.** A frame run at two depths or more is also judged along depth (:mod:`coordcheck.judge.depth`,
   ``Verdict.depth``) and the overall status is the worse of the two; a pure depth sweep (one width) leaves width
   invariance ``not judged (one width)`` (``Verdict.width_status``) and the depth verdict decides
   (:func:`coordcheck.judge.axes.add_depth`).
13. **Experts.** A frame run at two numbers of experts or more is also judged along that axis
   (:mod:`coordcheck.judge.experts`, ``Verdict.experts``), combined as depth is
   (:func:`coordcheck.judge.axes.add_experts`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from coordcheck.judge.axes import NOT_JUDGED, add_depth, add_experts
from coordcheck.judge.depth import DepthVerdict
from coordcheck.judge.experts import ExpertsVerdict
from coordcheck.judge.explain import CAUSE_COLUMNS, EVIDENCE_COLUMNS, explain
from coordcheck.core.frame import LOAD_JUDGED, LOAD_TENSOR, NOT_ACTIVATIONS
from coordcheck.judge.narrow import mark_narrow, narrow_reason
from coordcheck.record.shapes import model_table, shapes_by_config, width_problem
from coordcheck.judge.roles import ROLE_COLUMNS, decide_roles, with_roles
from coordcheck.judge.rules import EXPECT, RANK, RULES, STATUSES, Rules, likely_cause  # noqa: F401  (re-exported)
from coordcheck.judge.series import (  # noqa: F401  (head_dim_growth, UNDECIDED_PREFIX: re-exported)
    UNDECIDED_PREFIX, apply_rules, corroborate, head_dim_growth, rule_notes,
)
from coordcheck.judge.slopes import CONFIG_COLUMNS, fit_slopes
from coordcheck.judge.stability import find_instability, mark_transients  # noqa: F401  (re-exported)

__all__ = ["Rules", "Verdict", "judge", "find_instability", "mark_transients", "likely_cause", "head_dim_growth",
           "STATUSES", "RANK"]

# The tensors whose undecided series make a configuration undecided. An undecided own (or in) series is evidence for
# the causes only: a correct ResNet's strided 1x1 shortcut has own -0.40 [-0.55, -0.26] while every activation is
# flat, and "not decided" would then be said of a model whose coordinates pass. A failing own series still fails.
DECIDING = ("out", "delta")
LEARNS = frozenset(r.name for r in RULES if r.learns)  # the rules whose modules must change during training
FROZEN = "does not change during training (frozen, or lr=0?)"


@dataclass
class Verdict:
    """Overall status, with the per-series, per-module and per-configuration evidence."""

    status: str
    reason: str
    rules: Rules
    series: pd.DataFrame  # slopes + expect, band_low, band_high, margin, status, direction, diagnosis, in_window
    modules: pd.DataFrame  # one row per (configuration, module)
    configs: pd.DataFrame  # one row per configuration: status, reason, window
    instability: pd.DataFrame
    divergence: list[str] = field(default_factory=list)
    models: pd.DataFrame = field(default_factory=pd.DataFrame)  # per (configuration, width): n_params, fingerprint
    notes: list[str] = field(default_factory=list)  # what was judged otherwise than usual, or not at all, and why
    causes: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=CAUSE_COLUMNS))  # judge.explain
    quiet: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=CAUSE_COLUMNS))  # deviations no series
    # shows yet (judge.explain): notes with their forecast, never causes
    evidence: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=EVIDENCE_COLUMNS))
    depth: DepthVerdict | None = None  # the depth verdict of a depth sweep or grid; None otherwise
    experts: ExpertsVerdict | None = None  # the experts verdict of a sweep over the number of experts; None otherwise
    width_status: str = ""  # the width verdict alone, when a depth verdict joined it ("not judged (one width)": a
    # pure depth sweep)
    roles: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=ROLE_COLUMNS))  # judge.roles: each
    # module's role and what decided it
    audit: pd.DataFrame = field(default_factory=pd.DataFrame)  # the measured facts, long (judge.facts.measured_facts)

    @property
    def passed(self) -> bool:
        return self.status == "pass"

    @property
    def first_cause(self) -> str | None:
        """The first cause (in call order) of the configuration that decides the verdict, as the report prints it
        (prefixed with its parametrization when there are several configurations); None without one."""
        depth = self.depth.causes if self.depth is not None else None
        if self.causes.empty or self.configs.empty or (self.width_status == NOT_JUDGED and depth is not None):
            return None if depth is None or depth.empty else depth["line"].iloc[0]
        ranked = self.configs.assign(_rank=self.configs["status"].map(RANK)).sort_values("_rank", ascending=False,
                                                                                         kind="stable")
        for c in ranked.itertuples():
            mine = self.causes[self.causes["config_id"] == c.config_id].sort_values("order")
            if len(mine):
                return (f"{c.parametrization}: " if len(self.configs) > 1 else "") + mine["line"].iloc[0]
        return None

    @property
    def title(self) -> str:
        """The figures' title: the verdict at a glance, naming what was judged — "coordinate check
        (parametrization=sp) — FAIL", or with several configurations each by what varies between them:
        "coordinate check — FAIL (parametrization=mup: PASS; parametrization=sp: FAIL)"."""
        c = self.configs
        varying = [k for k in ("parametrization", "optimizer", "lr", "data", "model") if k in c and c[k].nunique() > 1]
        depth = f" — {self.depth.summary}" if self.depth is not None and self.depth.summary else ""
        if len(c) <= 1 or not varying:
            what = f" (parametrization={c['parametrization'].iloc[0]})" if len(c) and "parametrization" in c else ""
            return f"coordinate check{what} — {self.status.upper()}{depth}"
        parts = [", ".join(f"{k}={row[k]:g}" if k == "lr" else f"{k}={row[k]}" for k in varying)
                 + f": {row['status'].upper()}" for _, row in c.iterrows()]
        return f"coordinate check — {self.status.upper()} ({'; '.join(parts)}){depth}"

    @property
    def caption(self) -> str:
        """The figures' caption, where a paper puts the verdict (not in the title): :attr:`title` then the reason."""
        return f"{self.title[:1].upper()}{self.title[1:]}: {self.reason}"

    def worst_modules(self, n: int = 4) -> list[str]:
        """The ``n`` modules of the worst offending series (highlighted in the figures)."""
        return list(dict.fromkeys(self.worst(5 * n)["module"]))[:n]

    def worst(self, n: int = 10) -> pd.DataFrame:
        """The worst offenders: one series per module (its worst: failures first, then inconclusive, largest |slope|
        first), the modules the causes name leading in the causes' order (the first cause's first), then the others
        by their worst series."""
        s = self.series[self.series["in_window"] & self.series["status"].isin(["fail", "inconclusive"])].copy()
        s["_rank"] = s["status"].map(RANK)
        s["_abs"] = s["slope"].abs().fillna(np.inf)
        s = s.sort_values(["_rank", "_abs"], ascending=False).drop_duplicates(["config_id", "module"])
        lead = {}
        if len(self.causes):
            ranked = self.configs.assign(_c=self.configs["status"].map(RANK)).sort_values("_c", ascending=False,
                                                                                          kind="stable")
            for cid in ranked["config_id"]:
                for ms in self.causes[self.causes["config_id"] == cid].sort_values("order")["modules"]:
                    for m in ms:
                        lead.setdefault((cid, m), len(lead))
        s["_lead"] = [lead.get(k, len(lead)) for k in zip(s["config_id"], s["module"])]
        s = s.sort_values("_lead", kind="stable")
        return s.drop(columns=["_rank", "_abs", "_lead"]).head(n)


def _module_table(series: pd.DataFrame, min_window: int) -> pd.DataFrame:
    """One row per (configuration, module): its worst judged series, its margin, and a module status.

    The worst series is the most severe status, then the smallest margin to the band (a
    passing module shows how close it came).
    """
    rows = []
    judged = series[series["in_window"]]
    for key, g in judged.groupby(CONFIG_COLUMNS + ["module"], sort=False, dropna=False):
        ranks = g["status"].map(RANK)
        worst = g.loc[ranks == ranks.max()]
        counted = ~worst["status"].isin(["skip", "transient"])  # a transient is reported in its own column
        scored = worst[counted] if counted.any() else worst
        w = scored.loc[scored["margin"].fillna(np.inf).sort_values(kind="stable").index[0]]
        status = next((s for s in ("zero", "skip") if (g["status"] == s).all()), None) or (
            "pass" if ranks.max() == 0 else w["status"])
        diagnosis = w["diagnosis"] if status in ("fail", "inconclusive") else ""
        learned = g[(g["tensor"] == "delta") & (g["step"] >= 1) & g["rule"].isin(LEARNS)]
        long_enough = learned["step"].nunique() >= min_window  # a zero readout delays hidden updates by a step
        if status in ("pass", "zero") and long_enough and (learned["status"] == "zero").all():
            status, diagnosis = "inconclusive", FROZEN
        n_transient = int((g["status"] == "transient").sum())
        rows.append((*key, int(g["layer_index"].iloc[0]), g["role"].iloc[0], status, w["tensor"], int(w["step"]),
                     w["slope"], w["ci_low"], w["ci_high"], w["margin"], n_transient, diagnosis, w["rule"]))
    cols = CONFIG_COLUMNS + ["module", "layer_index", "role", "status", "tensor", "step", "slope", "ci_low",
                             "ci_high", "margin", "transient_steps", "diagnosis", "rule"]
    return pd.DataFrame(rows, columns=cols).sort_values(CONFIG_COLUMNS[:1] + ["layer_index", "module"], kind="stable")


def judge(frame: pd.DataFrame, slopes: pd.DataFrame | None = None, rules: Rules = Rules(),
          problems: Sequence[Any] = (), facts: Sequence[Mapping[str, Any]] = ()) -> Verdict:
    """Judge a sweep's tidy frame; see the module docstring for the rules.

    ``problems``: the sweep's jobs that left no frame (objects with ``job`` and ``error``, as
    ``coordcheck.run.sweep.JobProblem``); any makes a passing verdict inconclusive (rule 8).
    ``facts``: the jobs' facts (``job.json``, or ``CoordCheckResult.facts``); their ``config_id``, ``width`` and
    ``shapes`` say whether the model grows with width (rule 9) and give each parameter's class and optimizer for the
    measured facts (rule 10, ``Verdict.audit``).
    """
    roles = decide_roles(frame, facts)  # roles from measured facts (judge.roles), where the jobs recorded them
    frame = with_roles(frame, roles)
    verdict = _judge(frame, with_roles(slopes, roles) if slopes is not None else None, rules)
    verdict.roles = roles
    if len(roles):
        said = roles[["config_id", "module", "role_from"]]
        verdict.series = verdict.series.merge(said, on=["config_id", "module"], how="left")
        verdict.modules = verdict.modules.merge(said, on=["config_id", "module"], how="left")
    if problems and verdict.status == "pass":
        verdict.status = "inconclusive"
        verdict.reason = f"{len(problems)} job(s) left no frame ({problems[0].job}: {problems[0].error})"
    _fail_fixed_models(verdict, facts)
    explain(verdict, frame, facts, rules)
    _note_routing(verdict, facts)
    add_depth(verdict, frame, rules, facts)
    add_experts(verdict, frame, rules, facts)
    return verdict




def _note_routing(verdict: Verdict, facts: Sequence[Mapping[str, Any]]) -> None:
    """One note per router whose choice of experts the probes did not count (the jobs' ``routing_notes``), once
    whatever the number of jobs: its load is not judged, and says why."""
    said: dict[str, str] = {}
    for f in facts:
        for module, why in (f.get("routing_notes") or {}).items():
            said.setdefault(str(module), str(why))
    verdict.notes += [f"routing load not recorded for {m}: {why}" for m, why in said.items()]


def _fail_fixed_models(verdict: Verdict, facts: Sequence[Mapping[str, Any]]) -> None:
    """Rule 9: a configuration whose widths built the same model (or models that do not grow) fails, whatever its
    slopes say — they are flat because nothing changed. The setup's failure comes first in the reason."""
    verdict.models = model_table(facts)
    if verdict.configs.empty:
        return
    built = shapes_by_config(facts)
    first = None
    for i, c in verdict.configs.iterrows():
        problem = width_problem(built.get(str(c["config_id"]), {}))
        if problem is not None:
            verdict.configs.loc[i, ["status", "reason"]] = ["fail", problem]
            first = first or (problem if len(verdict.configs) == 1 else f"{c['parametrization']}: {problem}")
    if first is not None:
        verdict.status, verdict.reason = "fail", first


def _judge(frame: pd.DataFrame, slopes: pd.DataFrame | None, rules: Rules) -> Verdict:
    if slopes is None:
        slopes = fit_slopes(frame)
    judged = slopes[((slopes["stat"] == rules.stat) & ~slopes["tensor"].isin(NOT_ACTIVATIONS))
                    | ((slopes["tensor"] == LOAD_TENSOR) & (slopes["stat"] == LOAD_JUDGED))]  # a router's load
    series = apply_rules(judged, rules, head_dim_growth(frame))  # each series by its rule (judge.rules.RULES)
    inst = find_instability(frame, rules.rise, rules.rise_floor, rules.persist)
    acts = frame[~frame["tensor"].isin(NOT_ACTIVATIONS) & (frame["stat"] == rules.stat)]
    bad_acts = acts[~np.isfinite(acts["value"].to_numpy(dtype=float))]
    configs, in_window = [], pd.Series(False, index=series.index)
    divergence: list[str] = []
    ends: dict[str, tuple[int | None, int]] = {}
    for cid, cs in series.groupby("config_id", sort=False):  # the stability window of each configuration
        unstable = inst[(inst["config_id"] == cid)].dropna(subset=["unstable_step"])
        first = int(unstable["unstable_step"].min()) if len(unstable) else None
        ends[cid] = (first, first - 1 if first is not None else int(cs["step"].max()))
        in_window[cs.index] = cs["step"] <= ends[cid][1]
    series = mark_transients(series, in_window, {c: e[1] for c, e in ends.items()}, persist=rules.persist,
                              gross=rules.gross)
    series = mark_narrow(frame, series, rules.min_widths)  # issue 17 item 7: say narrow-width effects as such
    series = series.assign(in_window=in_window.astype(bool))
    series = corroborate(series)
    modules = _module_table(series, rules.min_window)
    for cid, cs in series.groupby("config_id", sort=False):
        ci = inst[inst["config_id"] == cid]
        n_widths = int(frame.loc[frame["config_id"] == cid, "width"].nunique())
        unstable = ci.dropna(subset=["unstable_step"])
        first, window_end = ends[cid]
        judged = cs[in_window[cs.index]]
        fails = judged[judged["status"] == "fail"]
        # divergence anywhere (loss or activations) fails, inside the window or not
        div = [f"diverged at step {int(r.unstable_step)}, width {r.width} (seed {r.seed})"
               for r in ci.itertuples() if r.reason == "non-finite loss"]
        bad = bad_acts[bad_acts["config_id"] == cid]
        if not div and len(bad):
            r = bad.sort_values(["step", "width"]).iloc[0]
            div = [f"diverged at step {int(r.step)}, width {r.width} ({r.module} is non-finite)"]
        divergence += div
        unstable_txt = "; ".join(
            f"width {r.width} seed {r.seed}: {r.reason} at step {int(r.unstable_step)}" for r in unstable.itertuples()
        )
        updated = sorted(set(judged["step"]) - {0})
        if div:
            status, reason = "fail", div[0]
        elif len(fails):
            w = fails.loc[fails["slope"].abs().fillna(np.inf).idxmax()]
            status = "fail"
            names = list(dict.fromkeys(fails.sort_values("layer_index")["module"]))
            listed = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
            reason = (f"{len(names)} module(s) violate muP ({listed}); worst: {w['module']} {w['tensor']} at "
                      f"step {w['step']}, slope {w['slope']:+.2f} — {w['diagnosis']}")  # the causes lead it where
            # the weights' facts were measured (judge.explain); without them, the symptom's likely cause
        elif n_widths < rules.min_widths:
            status, reason = "inconclusive", f"only {n_widths} width(s): at least {rules.min_widths} are needed"
        elif len(updated) < rules.min_window and unstable_txt:
            status = "inconclusive"
            reason = (f"training unstable at this learning rate — lower it ({unstable_txt}); "
                      f"only {len(updated)} updated step(s) before the first instability")
        elif len(updated) < rules.min_window:  # stable, but too short to judge updates (steps=1)
            status = "inconclusive"
            reason = (f"only {len(updated)} updated step(s): at least {rules.min_window} are needed to judge "
                      f"updates (report.min_window) — run more steps")
        elif ((judged["status"] == "inconclusive") & judged["tensor"].isin(DECIDING)).any():
            k = judged[(judged["status"] == "inconclusive") & judged["tensor"].isin(DECIDING)]
            status, narrow = "inconclusive", narrow_reason(k)  # every undecided series narrow-width: say so
            r = k.iloc[0]
            said = str(r["diagnosis"] or "interval overlaps the band")
            if said.startswith(UNDECIDED_PREFIX):  # a knob guessed from the symptom: not named, none is shown wrong
                said = (f"{r['direction']} with width ({r['slope']:+.2f} [{r['ci_low']:+.2f}, {r['ci_high']:+.2f}]), "
                        "not decided")
            reason = narrow or (f"{len(set(k['module']))} module(s) could not be decided (e.g. {r['module']} "
                                f"{r['tensor']} step {r['step']}: {said}) — add seeds or widths")
        else:
            status, reason = "pass", f"every judged series is flat within tolerance over widths " \
                                     f"{int(cs['min_width'].min())}-{int(cs['max_width'].max())}"
        configs.append({**cs[CONFIG_COLUMNS].iloc[0].to_dict(), "status": status, "reason": reason,
                        "n_widths": n_widths, "window_end": window_end, "first_unstable_step": first,
                        "instability": unstable_txt})
    if len(modules):  # module-level "does not learn" makes a passing configuration inconclusive
        for c in configs:
            stuck = modules[(modules["config_id"] == c["config_id"]) & (modules["diagnosis"] == FROZEN)]
            if c["status"] == "pass" and len(stuck):
                c["status"] = "inconclusive"
                c["reason"] = f"{stuck['module'].iloc[0]} does not change during training (frozen, or lr=0?)"
    configs_df = pd.DataFrame(configs)
    if configs_df.empty:
        return Verdict("inconclusive", "no activation statistics to judge", rules, series, modules, configs_df, inst)
    worst = configs_df.loc[configs_df["status"].map(RANK).idxmax()]
    reason = worst["reason"] if len(configs_df) == 1 else f"{worst['parametrization']}: {worst['reason']}"
    return Verdict(worst["status"], reason, rules, series, modules, configs_df, inst, divergence,
                   notes=rule_notes(series, rules))
