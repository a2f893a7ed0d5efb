"""Parameter shapes per width: the evidence that the builder uses the width it is given, and what each parameter is.

Stage: record (the shapes of a built model, :func:`param_shapes`), read by the judge (the setup, before any slope).
Input: the parameter shapes of the model each job built (``{name: [dims]}``, recorded by ``coordcheck.run.train`` and
``coordcheck.transfer.train`` in the job's facts as ``shapes``, so in ``job.json`` too). Output: one line saying what
is wrong with the setup (:func:`width_problem`), or ``None``; a per-width table of parameter counts and fingerprints
for the reports (:func:`model_table`); and what a parameter is by which of its dimensions grow with width
(:func:`param_class`: input-like, hidden, output-like, vector, fixed — the audit's classes and the verdict's roles).
Identical models at every width give flat
slopes and an optimum that stays put, so without this check a builder that ignores ``width``
would pass. Never imports torch.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from coordcheck.core.frame import digest

if TYPE_CHECKING:
    from torch import nn

__all__ = ["Shapes", "param_shapes", "tied_names", "n_params", "fingerprint", "shapes_by_config", "width_problem",
           "model_table",
           "dim_growth", "growth_text", "param_class", "CLASSES"]

Shapes = Mapping[str, Sequence[int]]  # parameter name -> its dims, as model.named_parameters() gives them

FIX = "make build(width=...) set the layer sizes"
# What a parameter is, by which of its dimensions grow with width (param_class), as muP classes them
CLASSES = ("input-like", "hidden", "output-like", "vector", "fixed")


def param_shapes(model: nn.Module) -> dict[str, list[int]]:
    """``{name: [dims]}`` of every parameter of ``model`` (shared parameters once), in registration order."""
    return {name: list(p.shape) for name, p in model.named_parameters()}


def tied_names(model) -> dict[str, str]:
    """``{alias: name}`` of every parameter a second module shares (a readout tied to the embedding:
    ``lm_head.weight -> transformer.wte.weight``), ``name`` the first registration."""
    first: dict[int, str] = {}
    out = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        if id(p) in first:
            out[name] = first[id(p)]
        else:
            first[id(p)] = name
    return out


def n_params(shapes: Shapes) -> int:
    return sum(math.prod(dims) for dims in shapes.values())


def fingerprint(shapes: Shapes) -> str:
    """Short hash of the sorted (name, dims) list: two models have the same one iff every parameter matches."""
    return digest(sorted((name, list(dims)) for name, dims in shapes.items()))


def shapes_by_config(facts: Iterable[Mapping[str, Any]]) -> dict[str, dict[int, Shapes]]:
    """``{config_id: {width: shapes}}`` from job facts (``job.json`` or the API's); facts without ``shapes`` (jobs
    written before they were recorded) are left out. Jobs of one width (another seed, another lr) built the same
    model: the first one is kept."""
    out: dict[str, dict[int, Shapes]] = {}
    for f in facts:
        if f.get("shapes") is not None and f.get("width") is not None:
            out.setdefault(str(f.get("config_id")), {}).setdefault(int(f["width"]), f["shapes"])
    return out


def _widths(ws: Sequence[int]) -> str:
    return f"{', '.join(map(str, ws[:-1]))} and {ws[-1]}"


def width_problem(by_width: Mapping[int, Shapes]) -> str | None:
    """Why these models cannot tell anything about width (one line that says what to change), or ``None``.

    Widths whose models have the same fingerprint built the same model; at every width: the builder ignores
    ``width``. Models that all differ, but in which no parameter present at both the narrowest and the widest width
    has a dimension larger at the widest, do not grow with width either (e.g. width sets the number of layers).
    """
    widths = sorted(by_width)
    if len(widths) < 2:
        return None
    groups: dict[str, list[int]] = {}
    for w in widths:
        groups.setdefault(fingerprint(by_width[w]), []).append(w)
    same = [ws for ws in groups.values() if len(ws) > 1]
    if len(groups) == 1:
        return (f"the builder ignores `width`: every width ({', '.join(map(str, widths))}) built the same "
                f"{n_params(by_width[widths[0]])}-parameter model — {FIX}")
    if same:
        told = "; ".join(f"widths {_widths(ws)} built the same {n_params(by_width[ws[0]])}-parameter model"
                         for ws in same)
        return f"{told}: the builder ignores `width` there — {FIX} at every width"
    narrow, wide = by_width[widths[0]], by_width[widths[-1]]
    grows = any(len(narrow[k]) == len(wide[k]) and any(b > a for a, b in zip(narrow[k], wide[k]))
                for k in narrow.keys() & wide.keys())
    if not grows:
        return (f"no parameter grows with width: from width {widths[0]} to {widths[-1]} the model goes from "
                f"{n_params(narrow)} to {n_params(wide)} parameters, but none present at both widths gets larger "
                f"— {FIX} (width is the hidden size, not the number of layers)")
    return None


def model_table(facts: Iterable[Mapping[str, Any]]) -> pd.DataFrame:
    """One row per (configuration, width) with recorded shapes: ``config_id, width, n_params, fingerprint``."""
    rows = [(cid, w, n_params(s), fingerprint(s))
            for cid, by_width in shapes_by_config(facts).items() for w, s in sorted(by_width.items())]
    return pd.DataFrame(rows, columns=["config_id", "width", "n_params", "fingerprint"])


def dim_growth(dims_by_width: Mapping[int, list[int]]) -> list[float] | None:
    """Per dimension, the slope of log2 size against log2 width over the widths (0 when fixed); None when the
    number of dimensions changes."""
    widths = sorted(dims_by_width)
    shapes = [list(dims_by_width[w]) for w in widths]
    if len({len(s) for s in shapes}) != 1:
        return None
    x = np.log2(np.asarray(widths, dtype=float))
    out = []
    for i in range(len(shapes[0])):
        d = np.asarray([s[i] for s in shapes], dtype=float)
        out.append(0.0 if (d == d[0]).all() or (d <= 0).any() else round(float(np.polyfit(x, np.log2(d), 1)[0]), 9))
    return out


def growth_text(growth: list[float] | None) -> str:
    """Which dimensions of a parameter grow with width, in words: ``"dims 1, 2 of 3"`` (dimension indices, as
    ``tensor.shape`` counts them), ``"dim 0 of 1"``, ``"none of 2"``, or ``"unmatched"`` (the number of dimensions
    changes)."""
    if growth is None:
        return "unmatched"
    grows = [str(i) for i, g in enumerate(growth) if g > 0]
    what = "none" if not grows else f"dim {grows[0]}" if len(grows) == 1 else f"dims {', '.join(grows)}"
    return f"{what} of {len(growth)}"


def param_class(growth: list[float] | None, embedding: bool = False) -> tuple[str, float, float, float]:
    """``(class, a_in, a_out, a_main)`` from the growth exponent of each dimension (:func:`dim_growth`).

    A parameter with more than two dimensions whose last two grow and whose leading ones do not is a stack of hidden
    matrices (a mixture-of-experts layer's ``experts x out x in``, as Mixtral, GraniteMoe and OLMoE store them in
    transformers), as mup's infshapes find it (``ninf() == 2``, fan-in the last). Otherwise the first two dimensions
    decide (a convolution's ``out x in x k``), and growing dimensions beyond them make it ``other``."""
    if growth is None:
        return "unmatched", 0.0, 0.0, 0.0
    grows = [g > 0 for g in growth]
    main = next((g for g, inf in zip(reversed(growth), reversed(grows)) if inf), 0.0)  # mup: the last width dim
    if len(growth) == 1:
        return ("vector" if grows[0] else "fixed"), 0.0, 0.0, main
    if not any(grows):
        return "fixed", 0.0, 0.0, 0.0
    if len(growth) > 2 and not any(grows[:-2]) and all(grows[-2:]):  # a stack of hidden matrices (experts x out x
        return param_class(growth[-2:], embedding)  # in): the last two grow, the leading dimensions do not
    if sum(grows) > 2 or any(grows[2:]):
        return "other", 0.0, 0.0, main
    a_out, a_in = (growth[1], growth[0]) if embedding else (growth[0], growth[1])
    if sum(grows) == 2:
        return "hidden", growth[1], growth[0], main  # mup's fan-in / fan-out: dimensions 1 and 0
    return ("output-like" if a_in > 0 else "input-like"), a_in, a_out, main
