"""The gradient-flow frame: its columns, statistics, roles and file names, one definition each.

Stage: schema, shared by the measuring side (:mod:`coordcheck.gradflow.probe`) and the analysis
side (checks, report, plot; never imports torch). Input: none. Output: the constants that say what
a gradient-flow frame holds (``gradflow.parquet`` on disk) and what the files of a report are called.

The frame: one row per measurement, long in the statistic.

==================  =======  ===================================================
column              dtype    meaning
==================  =======  ===================================================
``model``           str      builder name (``gpt``, ``mlp``, a dotted path, or the
                             model's class name in a user's loop)
``parametrization`` str      ``mup`` / ``sp`` / ``none`` (a user's loop: ``none``)
``width``           int64    model width; -1 when unknown
``step``            int64    the probe step (0 = before any update)
``kind``            str      ``param`` / ``activation`` / ``global``
``name``            str      parameter or module dotted name (``(root)``,
                             ``(global)``)
``module``          str      the owning module (a parameter's), else the module
``layer_index``     int64    block depth, the coord check's convention
                             (``coordcheck.record.layout.infer_layout``); -1 for global
                             rows and for parameters whose module never ran
``role``            str      ``input`` / ``hidden`` / ``attention`` / ``norm`` /
                             ``output``; ``unused`` (module never ran in the probed
                             forward), ``global``
``stat``            str      see below
``value``           float64  the measurement (NaN when it does not apply)
==================  =======  ===================================================

Extra identity columns (``optimizer``, ``lr``, ``seed`` from the CLI, or whatever a user passes
as ``labels``) may follow. Statistics:

* ``param``: ``grad_is_none`` (0/1), ``grad_norm`` (‖g‖₂, unscaled under a GradScaler; NaN when
  the grad is None), ``param_norm``, ``grad_param_ratio`` (‖g‖/‖p‖), ``nonfinite`` (count of
  NaN/inf gradient entries), ``in_optimizer`` (0/1; NaN without an optimizer),
  ``requires_grad`` (0/1), ``backward_order`` (0 = the first gradient the backward produced,
  closest to the loss; NaN when none arrived), ``stale`` (1 = the gradient was not zeroed
  since the previous step; NaN at the first probe step), ``numel``, ``ndim``.
* ``activation`` (module outputs of the probed forward, every call pooled): ``mean``,
  ``std``, ``absmax``, ``zero_frac`` (exact zeros), ``sat_frac`` (``nn.Tanh``: |y| > 0.99;
  ``nn.Sigmoid``: y outside [0.01, 0.99]; NaN for other modules), ``numel``.
* ``global``: ``global_grad_norm`` (‖all grads‖₂), ``loss`` and ``loss_requires_grad`` (when
  the loss is given), ``loss_scale`` (the GradScaler's scale; NaN without one).
"""

from __future__ import annotations

__all__ = ["SCHEMA", "FRAME_NAME", "REPORT_NAME", "JSON_NAME", "FIGURE_NAME", "GLOBAL_NAME", "UNUSED", "COLUMNS",
           "PARAM_STATS", "ACTIVATION_STATS", "GLOBAL_STATS"]

SCHEMA = "coordcheck.gradflow/1"  # the "schema" of gradflow.json
FRAME_NAME = "gradflow.parquet"  # fixed file names; what varies lives in directory names
REPORT_NAME = "gradflow.md"
JSON_NAME = "gradflow.json"
FIGURE_NAME = "gradflow"
GLOBAL_NAME = "(global)"
UNUSED = "unused"  # role of a parameter whose module never ran in the probed forward

COLUMNS: dict[str, str] = {
    "model": "str",
    "parametrization": "str",
    "width": "int64",
    "step": "int64",
    "kind": "str",
    "name": "str",
    "module": "str",
    "layer_index": "int64",
    "role": "str",
    "stat": "str",
    "value": "float64",
}
PARAM_STATS = ("grad_is_none", "grad_norm", "param_norm", "grad_param_ratio", "nonfinite", "in_optimizer",
               "requires_grad", "backward_order", "stale", "numel", "ndim")
ACTIVATION_STATS = ("mean", "std", "absmax", "zero_frac", "sat_frac", "numel")
GLOBAL_STATS = ("global_grad_norm", "loss", "loss_requires_grad", "loss_scale")
