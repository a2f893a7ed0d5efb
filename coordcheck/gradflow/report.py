"""Gradient-flow report: ``gradflow.md`` (diagnoses first), ``gradflow.json`` and the figure.

Stage: report (analysis side; never imports torch). Input: a gradient-flow frame (schema in
:mod:`coordcheck.gradflow.schema`) and its diagnoses (:func:`coordcheck.gradflow.checks.diagnose`).
Output: a per-layer summary (:func:`layer_summary`), the JSON document (:func:`payload`), the
Markdown (:func:`markdown`), the files, written atomically (:func:`write_gradflow_report`), and what a notebook shows
(:func:`notebook_html`).

``gradflow.json`` (``"schema": "coordcheck.gradflow/1"``)::

    status       "ok" | "warning" | "error"
    exit_code    0, or 1 when a blocking (error) diagnosis fired
    blocking     the codes that block
    identity     {model, parametrization, width}
    steps        probe steps in the frame
    diagnoses    [{code, severity, message, fix, names, steps}]   errors first
    notes        [facts that are not problems, e.g. a zero-initialised readout]
    global       [{step, global_grad_norm, loss, loss_scale}]
    layers       [{step, layer_index, roles, n_params, grad_norm, grad_rms_median,
                   grad_param_ratio_median, grads_none, nonfinite, act_std_median,
                   act_absmax, zero_frac_max, sat_frac_max}]
    thresholds   the constants of coordcheck.gradflow.checks (grad/param has none: shown, not judged)
    figures      {name: relative path}

NaN is written as ``null``.
"""

from __future__ import annotations

import math
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pandas as pd

from coordcheck.core.frame import atomic_write
from coordcheck.gradflow.checks import (
    ACT_GROWTH_PER_LAYER, ACT_GROWTH_TOTAL, BLOCKING, GRAD_TREND_DECADES, MIN_TREND_LAYERS, RATIO_NOT_JUDGED,
    SATURATION_FRAC, notes,
)
from coordcheck.gradflow.plot import plot_gradflow
from coordcheck.gradflow.registry import NOTEBOOK_VIEW, Diagnosis, exit_code, name_list, status, step_views
from coordcheck.gradflow.schema import COLUMNS, FIGURE_NAME, JSON_NAME, REPORT_NAME, SCHEMA
from coordcheck.core.text import json_safe, md_escape, num, records, write_json

__all__ = ["layer_summary", "payload", "markdown", "notebook_html", "write_gradflow_report"]

DIGITS = "{:.3g}"  # numbers in the Markdown table


# -- summaries --------------------------------------------------------------------------
def layer_summary(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per (step, layer_index): parameter count, layer grad norm (‖grads‖₂ over the
    layer), medians of grad RMS and grad/param ratio, counts of None and non-finite grads,
    median activation std, max |activation|, max zero and saturated fractions."""
    rows = []
    for v in step_views(frame):
        p, a = v.params, v.acts
        for li in sorted(set(p["layer_index"]) | set(a["layer_index"])):
            pl, al = p[p["layer_index"] == li], a[a["layer_index"] == li]
            g = pl["grad_norm"][np.isfinite(pl["grad_norm"])]
            rows.append({
                "step": v.step, "layer_index": int(li),
                "roles": ",".join(dict.fromkeys([*pl["role"], *al["role"]])),
                "n_params": len(pl),
                "grad_norm": float(np.sqrt((g ** 2).sum())) if len(g) else math.nan,
                "grad_rms_median": float((pl["grad_norm"] / np.sqrt(pl["numel"])).median()) if len(pl) else math.nan,
                "grad_param_ratio_median": float(pl["grad_param_ratio"].median()) if len(pl) else math.nan,
                "grads_none": int((pl["grad_is_none"] == 1).sum()),
                "nonfinite": int(pl["nonfinite"].fillna(0).sum()),
                "act_std_median": float(al["std"].median()) if len(al) else math.nan,
                "act_absmax": float(al["absmax"].max()) if len(al) else math.nan,
                "zero_frac_max": float(al["zero_frac"].max()) if len(al) else math.nan,
                "sat_frac_max": float(al["sat_frac"].max()) if len(al) and al["sat_frac"].notna().any() else math.nan,
            })
    return pd.DataFrame(rows)


def payload(frame: pd.DataFrame, diagnoses: list[Diagnosis], figures: dict[str, str] | None = None) -> dict:
    """The ``gradflow.json`` document (schema in the module docstring), JSON-safe."""
    first = frame.iloc[0] if len(frame) else {}
    glob = frame[frame["kind"] == "global"].pivot(index="step", columns="stat", values="value")
    glob = glob.reindex(columns=["global_grad_norm", "loss", "loss_scale"]).reset_index()
    layers = layer_summary(frame)
    return json_safe({
        "schema": SCHEMA,
        "status": status(diagnoses),
        "exit_code": exit_code(diagnoses),
        "blocking": list(BLOCKING),
        "identity": {k: first[k] for k in ("model", "parametrization", "width")} if len(frame) else {},
        "steps": sorted(int(s) for s in frame["step"].unique()),
        "diagnoses": [asdict(d) for d in diagnoses],
        "notes": notes(frame),
        "global": records(glob, list(glob.columns)),
        "layers": records(layers, list(layers.columns)),
        "thresholds": {
            "min_trend_layers": MIN_TREND_LAYERS, "grad_trend_decades": GRAD_TREND_DECADES,
            "act_growth_per_layer": ACT_GROWTH_PER_LAYER, "act_growth_total": ACT_GROWTH_TOTAL,
            "saturation_frac": SATURATION_FRAC,
        },
        "figures": figures or {},
    })


def markdown(frame: pd.DataFrame, diagnoses: list[Diagnosis], figures: dict[str, str] | None = None) -> str:
    """``gradflow.md``: status and diagnoses (each with its fix) first, then notes, the per-layer
    table of the last probe step, the figure and the thresholds."""
    st = status(diagnoses)
    n_err = sum(d.severity == "error" for d in diagnoses)
    head = {"ok": "no diagnosis: gradients reach every layer at a healthy scale",
            "warning": f"{len(diagnoses)} warning(s), nothing blocking (exit 0)",
            "error": f"{n_err} blocking diagnosis(es) (exit 1)"}[st]
    if frame.empty:
        head = "no probe step was recorded: nothing to judge"
    steps = sorted(int(s) for s in frame["step"].unique())
    ident = frame.iloc[0] if len(frame) else None
    lines = ["# Gradient flow", "", f"**Status: {st.upper()}** — {head}", ""]
    if ident is not None:
        width = "unknown" if ident["width"] < 0 else ident["width"]
        lines += [f"Model {md_escape(ident['model'])}, parametrization {md_escape(ident['parametrization'])}, "
                  f"width {width}; probe steps {steps}.", ""]
    lines += ["## Diagnoses", ""]
    if not diagnoses:
        lines.append("None.")
    for i, d in enumerate(diagnoses, 1):
        lines += [f"{i}. **{d.severity.upper()} {md_escape(d.code)}**: {md_escape(d.message)}",
                  f"   - Fix: {md_escape(d.fix)}"]
        if d.names:
            lines.append(f"   - Names: {md_escape(name_list(d.names))}")
    facts = notes(frame)
    if facts:
        lines += ["", "## Notes", ""] + [f"- {md_escape(n)}" for n in facts]
    layers = layer_summary(frame)
    if len(layers):
        last = layers[layers["step"] == layers["step"].max()]
        lines += ["", f"## Layers (step {int(last['step'].iloc[0])})", "",
                  "| layer | roles | params | grad norm | median grad/param | no grad | non-finite | median act std "
                  "| max abs act | max zero frac | max sat frac |",
                  "|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in last.itertuples():
            lines.append(
                f"| {r.layer_index} | {md_escape(r.roles)} | {r.n_params} | {num(r.grad_norm, DIGITS)} | "
                f"{num(r.grad_param_ratio_median, DIGITS)} | {r.grads_none} | {r.nonfinite} | "
                f"{num(r.act_std_median, DIGITS)} | {num(r.act_absmax, DIGITS)} | {num(r.zero_frac_max, '{:.2f}')} | "
                f"{num(r.sat_frac_max, '{:.2f}')} |")
    glob = frame[(frame["kind"] == "global") & (frame["stat"] == "global_grad_norm")]
    if len(glob):
        norms = ", ".join(f"step {s}: {num(x, DIGITS)}" for s, x in zip(glob["step"], glob["value"]))
        lines += ["", f"Global grad norm: {norms}."]
    if figures:
        lines += ["", "## Figure", ""]
        lines += [f"![{md_escape(name)}]({path})" for name, path in figures.items() if path.endswith(".png")]
    lines += ["", "## Thresholds", "",
              f"Depth trends: least-squares slope of log10(per-layer median) over >= {MIN_TREND_LAYERS} hidden layer "
              f"indices; vanishing/exploding at >= {GRAD_TREND_DECADES:g} decades of hidden-weight grad RMS across the "
              f"depth; activation blow-up at >= {ACT_GROWTH_PER_LAYER:g}x per layer and >= {ACT_GROWTH_TOTAL:g}x in "
              f"total; saturation at >= {SATURATION_FRAC:.0%} of outputs. Blocking codes (exit 1): "
              f"{', '.join(BLOCKING)}. {RATIO_NOT_JUDGED[:1].upper()}{RATIO_NOT_JUDGED[1:]}."]
    return "\n".join(lines) + "\n"


# -- in a notebook ----------------------------------------------------------------------
def notebook_html(diagnoses: list[Diagnosis], frame: pd.DataFrame | None,
                  figure: str | None = None) -> tuple[dict[str, str], str]:
    """What :class:`~coordcheck.gradflow.registry.Diagnoses` shows in a notebook: ``(bundle, figure)`` — the status
    line as text, and as HTML (:func:`coordcheck.report.html.fragment`) the status, the diagnoses with their fixes and
    the notes, the figure (``figure`` when given: drawn before) and the rest folded."""
    from coordcheck.report.html import drawn, notebook_bundle, svg_of

    if frame is None:  # diagnoses without the frame they were read from: no figure, no table
        frame = pd.DataFrame({c: pd.Series(dtype=t) for c, t in COLUMNS.items()})
    if figure is None:
        figure = drawn(lambda: svg_of(lambda: plot_gradflow(frame, diagnoses=diagnoses))) if len(frame) else ""
    st = status(diagnoses)
    text = f"coordcheck.gradflow: {st.upper()}" + "".join(f"\n{d.line()}" for d in diagnoses)
    bundle = notebook_bundle(text, markdown(frame, diagnoses), status={"ok": "pass"}.get(st, st), figure=figure,
                             open_sections=("Diagnoses", "Notes"))
    return bundle, figure


# -- files ------------------------------------------------------------------------------
def write_gradflow_report(frame: pd.DataFrame, diagnoses: list[Diagnosis], out_dir: str | Path, *,
                          figures: bool = True) -> Path:
    """Write ``gradflow.{png,pdf}`` (unless ``figures=False``), ``gradflow.json`` and
    ``gradflow.md`` into ``out_dir``, each atomically; return the path of ``gradflow.md``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written: dict[str, str] = {}
    if figures and len(frame):
        import matplotlib.pyplot as plt

        plt.close(plot_gradflow(frame, out / FIGURE_NAME, diagnoses=diagnoses))
        written = {f"gradflow ({ext})": f"{FIGURE_NAME}.{ext}" for ext in ("png", "pdf")}
    write_json(out / JSON_NAME, payload(frame, diagnoses, written))
    md = markdown(frame, diagnoses, written)
    return atomic_write(out / REPORT_NAME, lambda p: p.write_text(md))


NOTEBOOK_VIEW.append(notebook_html)  # what Diagnoses shows in a notebook (registry.Diagnoses._repr_mimebundle_)
