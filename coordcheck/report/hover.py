"""What hovering a line of the coordinate-check figure says: which series each drawn line is, and its tooltip.

Stage: report (what the HTML page and the notebook show; never imports torch). Input: a figure that
:func:`coordcheck.plot.plot_coords` drew (either layout), the tidy frame it drew and the verdict that judged it.
Output: :func:`line_tips`, a tooltip for every line it recognises — ``{Line2D: tip}``, a tip being a JSON-ready dict
``{"title", "lines", "module", "step", "tensor", ...}``.

A line is recognised by its points, not by asking the plotting code how it drew them: in the grid layout a line is
one module at one step (its value at each width, the geometric mean over seeds), in the guide layout one kind of
activation at one step (the geometric mean over that kind's modules, then over seeds, as
:func:`coordcheck.plot.guide_kinds` groups them). Each panel holds one (configuration, tensor, step) or
(configuration, tensor, kind); the panel that matches most of an axes' lines is that axes', and each of its lines is
the series there whose log values agree to :data:`MATCH_TOL`. A line no series matches (a reference line, a new kind
of mark) gets no tooltip.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

import numpy as np
import pandas as pd

from coordcheck.core.text import num
from coordcheck.judge.rules import RANK
from coordcheck.judge.verdict import Verdict

if TYPE_CHECKING:
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D

__all__ = ["line_tips", "module_tip", "MATCH_TOL", "MAX_POOLED"]

MATCH_TOL = 1e-6  # |log(drawn) - log(series)| at every width: the same numbers up to float rounding
MAX_POOLED = 6  # modules listed in a guide line's tooltip (the worst first), then how many more


def line_tips(fig: Figure, frame: pd.DataFrame, verdict: Verdict,
              layout: Literal["guide", "grid"]) -> dict[Line2D, dict]:
    """The tooltip of every line of ``fig`` that is a series of ``frame`` (see the module docstring): in the grid
    layout a module's (:func:`module_tip`), in the guide layout a kind's, listing the modules it pools."""
    stat = verdict.rules.stat
    series = _grid_series(frame, stat) if layout == "grid" else _guide_series(frame, stat)
    by_widths: dict[tuple, list[tuple[tuple, np.ndarray]]] = {}
    for key, (widths, logv) in series.items():
        by_widths.setdefault(widths, []).append((key, logv))
    tips: dict[Line2D, dict] = {}
    used: set[tuple] = set()  # each panel is one axes
    for ax in fig.axes:
        found: list[tuple[Line2D, list[tuple]]] = []
        for line in ax.lines:
            x = np.asarray(line.get_xdata(), dtype=float)
            y = np.asarray(line.get_ydata(), dtype=float)
            keep = np.isfinite(x) & np.isfinite(y) & (y > 0)
            if keep.sum() < 1:
                continue
            order = np.argsort(x[keep])
            widths, logy = tuple(x[keep][order].tolist()), np.log(y[keep][order])
            hits = [key for key, logv in by_widths.get(widths, []) if np.max(np.abs(logv - logy)) < MATCH_TOL]
            if hits:
                found.append((line, hits))
        votes: dict[tuple, int] = {}
        for _, hits in found:
            for panel in dict.fromkeys(key[:3] for key in hits):
                votes[panel] = votes.get(panel, 0) + 1
        free = [p for p in votes if p not in used] or list(votes)
        if not free:
            continue
        # the panel most of its lines are; between panels whose lines are equal, the one drawn first (the panels go
        # row by row: tensor, then step or kind)
        panel = min(free, key=lambda p: (-votes[p], _panel_order(p, layout)))
        used.add(panel)
        taken: set[tuple] = set()
        for line, hits in found:
            key = next((k for k in hits if k[:3] == panel and k not in taken), None)
            if key is None:
                continue
            taken.add(key)
            config, tensor = key[0], key[1]
            tips[line] = (module_tip(verdict, config, key[3], tensor, key[2]) if layout == "grid"
                          else _kind_tip(verdict, frame, config, tensor, kind=key[2], step=key[3]))
    return tips


def _panel_order(panel: tuple, layout: str) -> tuple:
    """Where a panel (configuration, tensor, step or kind) is drawn: by configuration, tensor, then step (grid) or
    kind (guide), as :func:`coordcheck.plot.plot_coords` lays them out."""
    from coordcheck.plot import KINDS, tensor_rank

    config, tensor, col = panel
    return (str(config), tensor_rank(tensor), col if layout == "grid" else
            KINDS.index(col) if col in KINDS else len(KINDS))


def module_tip(verdict: Verdict, config_id: str, module: str, tensor: str, step: int) -> dict:
    """A module's line at one step: its role and layer, the slope of ``tensor`` at ``step`` with its 95% interval and
    status, and its cause (the cause it is, the one it inherits from, or why it has none)."""
    m = _module_row(verdict, config_id, module)
    s = _series_row(verdict, config_id, module, tensor, step)
    role = m.get("role", "")
    said = m.get("role_from")
    lines = [f"role: {role} ({said})" if isinstance(said, str) and said else f"role: {role}"]
    if "layer_index" in m:
        lines[0] += f", layer {m['layer_index']}"
    lines.append(_slope_line(s, tensor, step))
    cause = _cause_text(verdict, config_id, m, s)
    lines.append(cause)
    label = _config_label(verdict, config_id)
    if label:
        lines.append(label)
    return {"title": module, "lines": lines, "module": module, "role": role, "tensor": tensor, "step": int(step),
            "slope": _float(s.get("slope")), "ci": [_float(s.get("ci_low")), _float(s.get("ci_high"))],
            "status": s.get("status", ""), "cause": cause}


def _kind_tip(verdict: Verdict, frame: pd.DataFrame, config_id: str, tensor: str, *, kind: str, step: int) -> dict:
    """A guide line (a kind of activation at one step): the modules it pools, worst first, each with its role, slope
    [interval], status and the cause it belongs to."""
    from coordcheck.plot import guide_kinds

    part = frame[(frame["config_id"] == config_id) & (frame["tensor"] == tensor)
                 & (frame["stat"] == verdict.rules.stat)]
    part = part.assign(kind=guide_kinds(part, "config_id"))
    modules = list(dict.fromkeys(part.loc[(part["kind"] == kind) & (part["step"] == step), "module"]))
    rows = []
    for module in modules:
        s = _series_row(verdict, config_id, module, tensor, step)
        m = _module_row(verdict, config_id, module)
        why = m.get("cause") or (f"from {m['inherited_from']}" if m.get("inherited_from") else "")
        rank = RANK.get(s.get("status", ""), 0)
        text = (f"{module} ({m.get('role', '')}): slope {num(s.get('slope'))} [{num(s.get('ci_low'))}, "
                f"{num(s.get('ci_high'))}] {s.get('status', 'not judged')}" + (f" — cause: {why}" if why else ""))
        rows.append((-rank, _float(s.get("margin")), text))
    rows.sort(key=lambda r: (r[0], np.inf if r[1] is None else r[1]))
    lines = [f"{tensor} at step {step}: the geometric mean of {len(modules)} module(s)"]
    lines += [text for *_, text in rows[:MAX_POOLED]]
    if len(rows) > MAX_POOLED:
        lines.append(f"… and {len(rows) - MAX_POOLED} more")
    label = _config_label(verdict, config_id)
    if label:
        lines.append(label)
    return {"title": f"{kind}, step {step}", "lines": lines, "kind": kind, "tensor": tensor, "step": int(step),
            "modules": modules}


# -- the series a line can be -----------------------------------------------------------------------------------
def _drawn(frame: pd.DataFrame, stat: str) -> pd.DataFrame:
    """The rows a coord-check figure can draw: ``stat`` of the activations, finite and positive (|mean| for mean)."""
    data = frame[(frame["stat"] == stat) & (frame["tensor"] != "loss")]
    if stat == "mean":
        data = data.assign(value=data["value"].abs())
    return data[np.isfinite(data["value"]) & (data["value"] > 0)]


def _grid_series(frame: pd.DataFrame, stat: str) -> dict[tuple, tuple[tuple, np.ndarray]]:
    """{(config_id, tensor, step, module): (widths, log of the geometric mean over seeds at each)}."""
    data = _drawn(frame, stat)
    logs = data.assign(value=np.log(data["value"]))
    means = logs.groupby(["config_id", "tensor", "step", "module", "width"], observed=True)["value"].mean()
    return _by_series(means, ["config_id", "tensor", "step", "module"])


def _guide_series(frame: pd.DataFrame, stat: str) -> dict[tuple, tuple[tuple, np.ndarray]]:
    """{(config_id, tensor, kind, step): (widths, log values)}: each kind's modules pooled by the geometric mean at
    each (width, seed), then the seeds averaged in log space."""
    from coordcheck.plot import guide_kinds

    data = frame[(frame["stat"] == stat) & (frame["tensor"] != "loss")]
    parts = []
    for _, part in data.groupby("tensor", observed=True, sort=False):
        parts.append(part.assign(kind=guide_kinds(part, "config_id")))
    if not parts:
        return {}
    data = _drawn(pd.concat(parts), stat)
    data = data[data["kind"].notna()]
    logs = data.assign(value=np.log(data["value"]))
    pooled = logs.groupby(["config_id", "tensor", "kind", "step", "width", "seed"], observed=True)["value"].mean()
    means = pooled.groupby(level=["config_id", "tensor", "kind", "step", "width"], observed=True).mean()
    return _by_series(means, ["config_id", "tensor", "kind", "step"])


def _by_series(means: pd.Series, keys: list[str]) -> dict[tuple, tuple[tuple, np.ndarray]]:
    out = {}
    for key, part in means.groupby(level=keys, observed=True):
        widths = part.index.get_level_values("width").to_numpy(dtype=float)
        order = np.argsort(widths)
        out[tuple(key)] = (tuple(widths[order].tolist()), part.to_numpy(dtype=float)[order])
    return out


# -- what a tooltip says --------------------------------------------------------------------------------------
def _module_row(verdict: Verdict, config_id: str, module: str) -> dict:
    mods = verdict.modules
    rows = mods[(mods["config_id"] == config_id) & (mods["module"] == module)] if len(mods) else mods
    return rows.iloc[0].to_dict() if len(rows) else {}


def _series_row(verdict: Verdict, config_id: str, module: str, tensor: str, step: int) -> dict:
    s = verdict.series
    if s.empty:
        return {}
    rows = s[(s["config_id"] == config_id) & (s["module"] == module) & (s["tensor"] == tensor)
             & (s["stat"] == verdict.rules.stat) & (s["step"] == step)]
    return rows.iloc[0].to_dict() if len(rows) else {}


def _slope_line(s: dict, tensor: str, step: int) -> str:
    if not s:
        return f"{tensor} at step {step}: not judged"
    slope = _float(s.get("slope"))
    if slope is None:
        why = s.get("diagnosis") or "no slope"
        return f"{tensor} at step {step}: no slope ({why}) — {s.get('status', '')}"
    return (f"{tensor} at step {step}: slope {num(slope)}, 95% interval [{num(s.get('ci_low'))}, "
            f"{num(s.get('ci_high'))}] — {s.get('status', '')}")


def _cause_text(verdict: Verdict, config_id: str, m: dict, s: dict) -> str:
    """The cause the module is (its line), the one it inherits from, or why it has none."""
    lines = _cause_lines(verdict, config_id)
    if m.get("cause"):
        return f"cause: {lines.get(m['cause'], m['cause'])}"
    if m.get("inherited_from"):
        via = " (through the backward pass)" if m.get("inherited_via") == "backward" else ""
        return f"inherited from {m['inherited_from']}{via}: {lines.get(m['inherited_from'], '')}".rstrip(": ")
    if RANK.get(m.get("status", ""), 0) == 0:
        return "cause: none (within the band muP allows)"
    diagnosis = m.get("diagnosis") or s.get("diagnosis")
    said = f"cause: none found; the module is {m.get('status')}"
    return f"{said}: {diagnosis}" if diagnosis else said


def _cause_lines(verdict: Verdict, config_id: str) -> dict[str, str]:
    c = verdict.causes
    mine = c[c["config_id"] == config_id] if len(c) else c
    return dict(zip(mine["what"], mine["line"])) if len(mine) else {}


def _config_label(verdict: Verdict, config_id: str) -> str:
    """``parametrization=sp`` (what varies between the configurations), or nothing for one configuration."""
    c = verdict.configs
    if len(c) <= 1:
        return ""
    varying = [k for k in ("parametrization", "optimizer", "lr", "data", "model") if k in c and c[k].nunique() > 1]
    row = c[c["config_id"] == config_id]
    if row.empty:
        return ""
    return ", ".join(f"{k}={row[k].iloc[0]:g}" if k == "lr" else f"{k}={row[k].iloc[0]}"
                     for k in varying or ["config_id"])


def _float(x: object) -> float | None:
    try:
        x = float(x)
    except (TypeError, ValueError):
        return None
    return x if np.isfinite(x) else None

