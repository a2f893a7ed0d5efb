"""The verdict's causes assembled: the walk's, the parameter audit's and Adam's ε, held against the facts, a
structural mismatch first, and each failing configuration's reason led by its first cause.

Stage: judge (the last step of :func:`coordcheck.judge.verdict.judge`, after the series and the walk). Input: the
verdict as the walk left it (:mod:`coordcheck.judge.causes`), the tidy frame, the jobs' facts and the rules. Output:
the same verdict with ``audit`` (the parameter audit, the readout against its measured multiplier:
:mod:`coordcheck.judge.readout`), ``causes`` (reconciled with the facts: :mod:`coordcheck.judge.reconcile`),
``evidence``, the module table's cause columns, ``notes``, and the configurations' statuses and reasons. One answer:
the CLI, ``report.md``, ``report.json``, ``coord_check().verdict`` and ``assert_mup`` all read what is set here.
Never imports torch.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from coordcheck.core.frame import EPS_TENSOR
from coordcheck.judge.audit import NO_RULE, audit_causes, audit_evidence, audit_long
from coordcheck.judge.eps import eps_causes, eps_evidence, eps_table
from coordcheck.judge.readout import output_scales
from coordcheck.judge.reconcile import reconcile
from coordcheck.judge.rules import RANK, Rules
from coordcheck.judge.structure import structure_causes
from coordcheck.record.shapes import shapes_by_config, width_problem

Verdict = Any  # coordcheck.judge.verdict.Verdict, which calls this module (so it is not imported here)

__all__ = ["assemble_causes"]


def assemble_causes(verdict: Verdict, frame: pd.DataFrame, facts: Sequence[Mapping[str, Any]], rules: Rules,
                    audit: pd.DataFrame | None = None) -> None:
    """Everything after the walk, in place on ``verdict`` (module docstring); ``audit``: an audit table to use where
    no facts are given."""
    outputs = output_scales(verdict.series, facts)
    long = audit_long(facts, rules, outputs) if facts else audit
    verdict.audit = long if long is not None else verdict.audit
    _add_parameter_causes(verdict, frame, facts, rules, long)
    eps = eps_table(frame, rules) if (frame["tensor"] == EPS_TENSOR).any() else None
    verdict.causes, verdict.modules = reconcile(verdict.causes, verdict.modules, verdict.series, long, outputs,
                                                rules.tol, eps)
    _note_no_rule(verdict, long)
    _note_routing(verdict, facts)
    _add_structure(verdict, facts)
    _lead_with_causes(verdict, facts)


def _note_routing(verdict: Verdict, facts: Sequence[Mapping[str, Any]]) -> None:
    """One note per router whose choice of experts the probes did not count (the jobs' ``routing_notes``:
    :class:`coordcheck.record.load.Choices`), once whatever the number of jobs: its load is not judged, and says
    why."""
    said: dict[str, str] = {}
    for f in facts:
        for module, why in (f.get("routing_notes") or {}).items():
            said.setdefault(str(module), str(why))
    verdict.notes += [f"routing load not recorded for {m}: {why}" for m, why in said.items()]


def _note_no_rule(verdict: Verdict, long: pd.DataFrame | None) -> None:
    """A note for the parameters the audit measured but has no established muP rule for (a selective scan's:
    :data:`coordcheck.judge.audit.NO_RULE`), with their measured exponents: "not judged", never a cause."""
    if long is None or long.empty:
        return
    rows = long[(long["reason"] == NO_RULE) & long["quantity"].isin(["init", "lr"])]
    for cid, g in rows.groupby("config_id", sort=False):
        per = g.pivot_table(index="parameter", columns="quantity", values="exponent", sort=False)
        said = [f"{name} (" + ", ".join(f"{q} ∝ width^{per.at[name, q]:+.2f}" for q in ("init", "lr")
                                          if q in per.columns and np.isfinite(per.at[name, q])) + ")"
                for name in per.index]
        if not said:
            continue
        more = f" and {len(said) - 6} more" if len(said) > 6 else ""
        verdict.notes.append(f"not judged: no established muP rule for {', '.join(said[:6])}{more} — a selective "
                             "scan's parameters (Vankadara et al., NeurIPS 2024); measured, not judged")


def _add_parameter_causes(verdict: Verdict, frame: pd.DataFrame, facts: Sequence[Mapping[str, Any]],
                          rules: Rules, long: pd.DataFrame | None = None) -> None:
    """The parameter audit's and Adam's ε causes (:mod:`coordcheck.judge.audit`), after the walk's. An audit cause whose
    modules the walk already named is the same knob seen as configured: left out of ``causes`` (its evidence stays).
    A judged audit or ε violation is significant by construction, so it fails a configuration that passed or was
    undecided, and its line leads that configuration's reason."""
    if long is None:
        long = audit_long(facts, rules) if facts else None
    audited = long is not None and len(long) > 0
    eps = bool((frame["tensor"] == EPS_TENSOR).any())
    extra = [audit_causes(long) if audited else None,
             _eps_corroborated(eps_causes(frame, rules), verdict) if eps else None]
    evidence = [audit_evidence(long) if audited else None, eps_evidence(frame, rules) if eps else None]
    evidence = [e for e in evidence if e is not None and len(e)]
    if evidence:
        verdict.evidence = pd.concat([verdict.evidence, *evidence], ignore_index=True) if len(verdict.evidence) \
            else pd.concat(evidence, ignore_index=True)
    extra = [e for e in extra if e is not None and len(e)]
    if not extra or verdict.configs.empty:
        return
    rows, causes = [], verdict.causes
    for _, c in pd.concat(extra, ignore_index=True).iterrows():
        mine = causes[causes["config_id"] == c["config_id"]]
        c = c.copy()
        c["modules"] = _pooled(c["modules"], {m for ms in mine["modules"] for m in ms})
        c["order"] = (int(mine["order"].max()) + 1 if len(mine) else 0) + sum(
            r["config_id"] == c["config_id"] for r in rows)
        rows.append(c)
    if not rows:
        return
    added = pd.DataFrame(rows)[causes.columns] if len(causes.columns) else pd.DataFrame(rows)
    verdict.causes = pd.concat([causes, added], ignore_index=True) if len(causes) else added.reset_index(drop=True)
    for i, c in verdict.configs.iterrows():
        new = added[added["config_id"] == c["config_id"]]
        if len(new) and c["status"] != "fail":
            verdict.configs.loc[i, ["status", "reason"]] = ["fail", new["line"].iloc[0]]
    worst = verdict.configs.loc[verdict.configs["status"].map(RANK).idxmax()]
    if worst["status"] == "fail" and verdict.status != "fail":
        verdict.status = "fail"
        many = len(verdict.configs) > 1
        verdict.reason = f"{worst['parametrization']}: {worst['reason']}" if many else worst["reason"]


def _eps_corroborated(found: pd.DataFrame, verdict: Verdict) -> pd.DataFrame:
    """The ε causes that join the verdict: in a configuration that does not fail otherwise (ε growing with width and
    material at the widest: a fault before the activations show it), or where the parameter's module's own update
    fails shrinking (ε takes over its step; a change since step 0 that shrinks may be inherited from upstream). In a
    failing configuration whose symptoms ε cannot explain, ε is evidence only: a cause pass records it for a few steps
    after the first failure, where behind a zero-initialised query the keys' fraction is still high for a reason that
    passes (:func:`coordcheck.judge.eps.eps_table`)."""
    if found.empty:
        return found
    fails = verdict.configs.set_index("config_id")["status"] == "fail" if len(verdict.configs) else pd.Series()
    s = verdict.series
    own = s[(s["status"] == "fail") & (s["direction"] == "shrinks") & (s["tensor"] == "own")]
    shrinking = set(zip(own["config_id"], own["module"]))  # its own update (not what it inherits) shrinks
    keep = [not bool(fails.get(c["config_id"], False)) or any((c["config_id"], m) in shrinking for m in c["modules"])
            for _, c in found.iterrows()]
    return found[np.asarray(keep, dtype=bool)]


def _pooled(modules: Sequence[str], named: set[str]) -> list[str]:
    """``modules`` with each expert of a pooled expert list the walk named (``experts.*.fc1``) given that name."""
    pooled = [(m, re.compile(re.escape(m).replace(r"\*", r"\d+"))) for m in named if "*" in m]
    out = [next((p for p, rx in pooled if rx.fullmatch(m)), m) for m in modules]
    return list(dict.fromkeys(out))


KNOB_WORDS = {"init": "init", "lr": "learning rate", "wd": "weight decay", "adam_eps": "ε", "epsilon": "ε",
              "mult": "output multiplier", "output_multiplier": "output multiplier", "readout_lr": "learning rate",
              "attention_scale": "attention scale", "structure": "structure", "candidates": "undecided"}


def _knob(cause: Any) -> str:
    """The knob a cause row names: its kind, or the audit quantity it measured."""
    return str(cause.measure).removeprefix("audit:") if cause.kind == "audit" else str(cause.kind)


VIOLATE = re.compile(r"; \d+ module\(s\) violate muP \(.*\)$")


def _lead_with_causes(verdict: Verdict, facts: Sequence[Mapping[str, Any]]) -> None:
    """Each failing configuration's reason, and the verdict's, led by its first cause in the final order (after the
    facts held the causes to account): one answer everywhere (the CLI, report.md, report.json, the API and the
    pytest gate read this reason and these causes). A setup that cannot be judged (rule 9: widths that built the
    same model) and a structural mismatch keep their own reason."""
    if verdict.causes.empty or verdict.configs.empty:
        return
    built = shapes_by_config(facts)
    for i, c in verdict.configs.iterrows():
        if width_problem(built.get(str(c["config_id"]), {})) is not None:
            continue
        mine = verdict.causes[verdict.causes["config_id"] == c["config_id"]].sort_values("order", kind="stable")
        if mine.empty or c["status"] != "fail" or str(c["reason"]).startswith("diverged") \
                or mine["kind"].iloc[0] == "structure":  # a structural mismatch is the reason itself
            continue
        more = "" if len(mine) < 2 else f"; {len(mine) - 1} more cause(s): " + ", ".join(
            f"{r.what} ({KNOB_WORDS.get(_knob(r), _knob(r))})" for r in mine.iloc[1:].itertuples())
        tail = VIOLATE.search(str(c["reason"]))
        verdict.configs.loc[i, "reason"] = f"cause: {mine['line'].iloc[0]}{more}" + (tail.group(0) if tail else "")
    worst = verdict.configs.loc[verdict.configs["status"].map(RANK).idxmax()]
    if worst["status"] == verdict.status == "fail":
        verdict.reason = worst["reason"] if len(verdict.configs) == 1 else f"{worst['parametrization']}: " \
                                                                             f"{worst['reason']}"


def _add_structure(verdict: Verdict, facts: Sequence[Mapping[str, Any]]) -> None:
    """A structural mismatch with the parametrization (:mod:`coordcheck.judge.structure`: a plain readout under mup)
    is the first cause of its configuration and fails it. A cause of the walk or the audit on the same modules says
    the same in general terms ("the readout is not a MuReadout or its multiplier is missing"): it gives way."""
    found = structure_causes(facts, verdict.series)
    if found.empty or verdict.configs.empty:
        return
    causes = verdict.causes
    if len(causes):
        named = {(cid, m) for cid, ms in zip(found["config_id"], found["modules"]) for m in ms}
        same = [all((cid, m) in named for m in ms) for cid, ms in zip(causes["config_id"], causes["modules"])]
        causes = causes[~np.asarray(same, dtype=bool)]
        ahead = found.groupby("config_id").size()
        causes = causes.assign(order=causes["order"] + causes["config_id"].map(ahead).fillna(0).astype("int64"))
    found = found.assign(order=found.groupby("config_id").cumcount().astype("int64"))
    verdict.causes = (pd.concat([found, causes[found.columns]], ignore_index=True) if len(causes) else found)
    verdict.causes = verdict.causes.sort_values(["config_id", "order"], kind="stable").reset_index(drop=True)
    first = None
    for i, c in verdict.configs.iterrows():
        mine = found[found["config_id"] == c["config_id"]]
        if len(mine):
            verdict.configs.loc[i, ["status", "reason"]] = ["fail", mine["line"].iloc[0]]
            first = first or (mine["line"].iloc[0] if len(verdict.configs) == 1
                              else f"{c['parametrization']}: {mine['line'].iloc[0]}")
    if first is not None:
        verdict.status, verdict.reason = "fail", first
