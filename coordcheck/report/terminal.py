"""The terminal's table: the failing modules of a verdict, compact enough for a 100-column terminal.

Stage: report (what the command line prints at the end of a sweep, and ``python -m coordcheck.report``). Input: a
:class:`coordcheck.judge.verdict.Verdict`. Output: lines of text — one per failing module of the configuration that
decides the verdict (its worst judged series: tensor, step, slope and 95 % interval) and its cause: the cause it is,
or the one it follows from; the modules the causes name first, in the causes' order, then the rest by depth. Never
wider than ``width`` columns (long module names and causes are cut with an ellipsis: ``report.md`` has them whole).
Never imports torch.
"""

from __future__ import annotations

from typing import Any

from coordcheck.core.text import num
from coordcheck.judge.rules import RANK

__all__ = ["failing_table", "WIDTH", "ROWS"]

WIDTH = 100  # columns
ROWS = 10  # failing modules shown; the rest are counted


def _cut(text: str, n: int) -> str:
    """``text`` in at most ``n`` characters: its end kept for a module name (``…blocks.11.mlp.c_fc``)."""
    return text if len(text) <= n else "…" + text[-(n - 1):]


def _cut_end(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


def _cause(m: Any) -> str:
    if isinstance(m.cause, str) and m.cause:
        return "cause" if m.cause == m.module else f"cause: {m.cause}"
    if isinstance(m.inherited_from, str) and m.inherited_from:
        return f"from {m.inherited_from}" + (" (backward)" if m.inherited_via == "backward" else "")
    return str(m.diagnosis or "") if isinstance(m.diagnosis, str) else ""


def failing_table(verdict: Any, width: int = WIDTH, rows: int = ROWS) -> list[str]:
    """The failing modules of ``verdict``'s deciding configuration as lines of at most ``width`` columns (module
    docstring); ``[]`` when none fails."""
    mods, configs = verdict.modules, verdict.configs
    if mods.empty or configs.empty or "status" not in mods:
        return []
    worst = configs.assign(_r=configs["status"].map(RANK)).sort_values("_r", ascending=False, kind="stable")
    cid = worst["config_id"].iloc[0]
    bad = mods[(mods["config_id"] == cid) & (mods["status"] == "fail")]
    if bad.empty:
        return []
    lead: dict[str, int] = {}
    causes = verdict.causes
    if len(causes):
        for ms in causes[causes["config_id"] == cid].sort_values("order")["modules"]:
            for m in ms:
                lead.setdefault(m, len(lead))
    bad = bad.assign(_lead=[lead.get(m, len(lead)) for m in bad["module"]]).sort_values(
        ["_lead", "layer_index"], kind="stable")
    name_w = min(32, max(12, int(bad["module"].str.len().max())))
    head = f"  {'module':<{name_w}}  {'tensor':<6} {'step':>4} {'slope':>6}  {'95% interval':<16} "
    cause_w = max(12, width - len(head))
    lines = [f"coordcheck: failing modules ({len(bad)}; the cause of each, or what it follows from):",
             head + "cause"]
    for m in bad.head(rows).itertuples():
        interval = f"[{num(m.ci_low)}, {num(m.ci_high)}]"
        lines.append(f"  {_cut(str(m.module), name_w):<{name_w}}  {str(m.tensor):<6} {int(m.step):>4} "
                     f"{num(m.slope):>6}  {interval:<16} {_cut_end(_cause(m), cause_w)}")
    if len(bad) > rows:
        lines.append(f"  … and {len(bad) - rows} more (report.md lists every module)")
    return [line[:width] for line in lines]
