"""The report's sections for the other axes: Depth (the depth verdict) and Experts (the experts verdict), in report.md
and report.json.

Stage: report (below :mod:`coordcheck.report.compliance`, which places them). Input: a judged :class:`Verdict`.
Output: Markdown lines and report.json objects (``depth``, ``experts``: null when the sweep has no such axis).
"""

from __future__ import annotations

from coordcheck.core.text import md_escape, num, records
from coordcheck.judge.depth import LOSS_PLACE
from coordcheck.judge.places import MATCHING, RESIDUAL
from coordcheck.judge.verdict import Verdict

__all__ = ["DEPTH_SERIES", "EXPERTS_SERIES", "depth_payload", "depth_lines", "experts_payload", "experts_lines"]

DEPTH_SERIES = ["family_id", "width", "place", "place_kind", "role", "tensor", "step", "slope", "ci_low", "ci_high",
                "band_low", "band_high", "status", "diagnosis", "rule"]


def depth_payload(v: Verdict) -> dict | None:
    """report.json's ``depth`` object (schema above); None without a depth verdict."""
    d = v.depth
    if d is None:
        return None
    judged = d.series[d.series["status"] != "skip"] if len(d.series) else d.series
    return {"status": d.status, "reason": d.reason, "width_status": v.width_status, "matching": MATCHING,
            "families": records(d.families, list(d.families.columns)), "series": records(judged, DEPTH_SERIES),
            "causes": records(d.causes, list(d.causes.columns)), "notes": d.notes}


def depth_lines(v: Verdict) -> list[str]:
    """The report's **Depth** section: per family and width its status and reason, the matching used, the judged
    series that failed or were undecided (else the residual stream's), and the causes."""
    d = v.depth
    if d is None:
        return []
    lines = ["## Depth", "", f"**Depth verdict: {d.status.upper()}** — {md_escape(d.reason)}", "",
             f"Width invariance: {v.width_status}.", "", f"Matching across depths: {md_escape(MATCHING)}.", "",
             "| width | parametrization | depth scaling | depths | status | reason |", "|---|---|---|---|---|---|"]
    for f in d.families.itertuples():
        scaling = getattr(f, "depth_scaling", "") or "—"
        lines.append(f"| {f.width} | {md_escape(f.parametrization)} | {md_escape(scaling)} | "
                     f"{f.min_depth}–{f.max_depth} ({f.n_depths}) | {f.status} | {md_escape(f.reason)} |")
    s = d.series[d.series["status"] != "skip"] if len(d.series) else d.series
    bad = s[s["status"].isin(["fail", "inconclusive"])] if len(s) else s
    shown = bad if len(bad) else s[s["place"].isin([RESIDUAL, LOSS_PLACE])]
    if len(shown):
        lines += ["", "Judged series (slope of log2 std vs log2 depth; the loss row: its rise from the shallowest to "
                  "the deepest depth over the step-0 loss)" + (", failing or undecided:" if len(bad) else ":"), "",
                  "| width | place | tensor | step | slope | 95% interval | band | status | diagnosis |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for r in shown.sort_values(["width", "place_order", "tensor", "step"]).head(40).itertuples():
            lines.append(f"| {r.width} | {md_escape(r.place)} | {r.tensor} | {r.step} | {num(r.slope)} | "
                         f"[{num(r.ci_low)}, {num(r.ci_high)}] | [{num(r.band_low)}, {num(r.band_high)}] | "
                         f"{r.status} | {md_escape(r.diagnosis)} |")
    if len(d.causes):
        lines += ["", "Depth causes:", ""]
        lines += [f"- width {c.width}: {md_escape(c.line)}" for c in d.causes.itertuples()]
    return lines + [""]


EXPERTS_SERIES = ["family_id", "width", "depth", "module", "place_kind", "role", "tensor", "step", "slope", "ci_low",
                  "ci_high", "band_low", "band_high", "status", "diagnosis", "rule"]


def experts_payload(v: Verdict) -> dict | None:
    """report.json's ``experts`` object: ``status``, ``reason``, ``width_status``, ``groups`` (per family, width and
    depth: status, reason, n_experts, min_experts, max_experts, window_end), the judged ``series``, ``notes``; None
    without an experts verdict."""
    e = v.experts
    if e is None:
        return None
    judged = e.series[e.series["status"] != "skip"] if len(e.series) else e.series
    return {"status": e.status, "reason": e.reason, "width_status": v.width_status,
            "groups": records(e.groups, list(e.groups.columns)),
            "series": records(judged, [c for c in EXPERTS_SERIES if c in judged.columns]), "notes": e.notes}


def experts_lines(v: Verdict) -> list[str]:
    """The report's **Experts** section: per width its status and reason over the numbers of experts, and the judged
    series that failed or were undecided (else the routers')."""
    e = v.experts
    if e is None:
        return []
    lines = ["## Experts", "", f"**Experts verdict: {e.status.upper()}** — {md_escape(e.reason)}", "",
             f"Width invariance: {v.width_status}.", "", "| width | parametrization | experts | status | reason |",
             "|---|---|---|---|---|"]
    for g in e.groups.itertuples():
        lines.append(f"| {g.width} | {md_escape(g.parametrization)} | {g.min_experts}–{g.max_experts} "
                     f"({g.n_experts}) | {g.status} | {md_escape(g.reason)} |")
    s = e.series[(e.series["status"] != "skip") & e.series["in_window"]] if len(e.series) else e.series
    bad = s[s["status"].isin(["fail", "inconclusive"])] if len(s) else s
    shown = bad if len(bad) else s[s["place_kind"] == "router"]
    if len(shown):
        lines += ["", "Judged series (slope of log2 std vs log2 experts; a router's load: its entropy over its step-0 "
                  "value)" + (", failing or undecided:" if len(bad) else ", the routers':"), "",
                  "| width | module | place | tensor | step | slope | 95% interval | band | status | diagnosis |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        for r in shown.sort_values(["width", "layer_index", "module", "tensor", "step"]).head(40).itertuples():
            lines.append(f"| {r.width} | {md_escape(r.module)} | {r.place_kind} | {r.tensor} | {r.step} | "
                         f"{num(r.slope)} | [{num(r.ci_low)}, {num(r.ci_high)}] | [{num(r.band_low)}, "
                         f"{num(r.band_high)}] | {r.status} | {md_escape(r.diagnosis)} |")
    return lines + [""]
