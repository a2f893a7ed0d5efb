"""Synthetic tidy frames with known slopes, for the analysis-side unit tests."""

from __future__ import annotations

import numpy as np
import pandas as pd

from coordcheck.core.frame import conform

IDENTITY = dict(config_id="cfg", model="toy", parametrization="mup", optimizer="adam", lr=0.01, data="toy",
                data_policy="fixed")


def make_frame(
    series: dict[tuple[str, str, str], float | str],
    *,
    widths=(64, 128, 256, 512),
    seeds=(0, 1),
    steps=(0, 1, 2, 3, 4),
    noise: float = 0.0,
    loss: dict[int, list[float]] | None = None,
    identity: dict | None = None,
    layer_index: dict[str, int] | None = None,
    head_dim: dict[str, object] | None = None,
) -> pd.DataFrame:
    """``series[(module, role, tensor)] = slope`` (value = 2 * width**slope), or "zero" / "nan", or ``f(step)``
    giving the slope at each step (e.g. an init gain that differs from the updates').

    ``delta`` rows start at step 1. ``loss[width] = [loss at step 0, 1, ...]`` (default: a
    smooth decrease, the same at every width). Every stat is written with the same value.
    ``head_dim[module]``: the ``head_dim`` column of a captured attention module, a number or
    ``f(width)`` (default 0: not recorded).
    """
    rng = np.random.default_rng(0)
    ident = {**IDENTITY, **(identity or {})}
    rows = []
    modules = list(dict.fromkeys(m for m, _, _ in series))
    for (module, role, tensor), slope in series.items():
        for w in widths:
            for s in seeds:
                for t in steps:
                    if tensor == "delta" and t == 0:
                        continue
                    if callable(slope):
                        v = 2.0 * w ** float(slope(t)) * float(np.exp(noise * rng.standard_normal()))
                    elif slope == "zero":
                        v = 0.0
                    elif slope == "nan":
                        v = np.nan if (w == max(widths) and t == max(steps)) else 1.0
                    else:
                        v = 2.0 * w ** float(slope) * float(np.exp(noise * rng.standard_normal()))
                    hd = (head_dim or {}).get(module, 0)
                    for stat in (("max_load", "entropy") if tensor == "load" else ("std", "l1")):
                        rows.append({**ident, "width": w, "seed": s, "step": t, "module": module,
                                     "layer_index": (layer_index or {}).get(module, modules.index(module)),
                                     "role": role, "call_order": modules.index(module), "tensor": tensor,
                                     "stat": stat, "value": v, "head_dim": hd(w) if callable(hd) else hd})
    for w in widths:
        curve = (loss or {}).get(w, [5.0 - 0.3 * t for t in steps])
        for s in seeds:
            for t, v in zip(steps, curve):
                rows.append({**ident, "width": w, "seed": s, "step": t, "module": "(loss)", "layer_index": -1,
                             "role": "loss", "call_order": -1, "tensor": "loss", "stat": "value", "value": v})
    return conform(pd.DataFrame(rows))
