"""The verdict's rules: the numbers it judges with (:class:`Rules`, every one a knob), and the rule table
(:data:`RULES`).

Stage: judge (below the engine that applies the table, :mod:`coordcheck.judge.series`, the verdict, the audit and the
depth verdict, which all read it). Input: none. Output: the :class:`Rules` knobs (``report.tol`` in a sweep, ``--tol``
in the report CLI), the statuses and their severity, and one :class:`Rule` per kind of series — where it applies
(role, op kind, tensor, steps, and any fact it needs), the band it expects, what a violation means and how to fix it,
its source and the test that proves it. ``docs/verdict.md`` lists the table (:func:`rules_markdown`, written by
``python experiments/rules_table.py``; a test keeps it current). Never imports torch.

A new kind of series (an architecture with a new op) is one entry here and one test, not a branch in the engine.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from coordcheck.core.errors import check_knobs, knob
from coordcheck.core.frame import STATS

__all__ = ["Rules", "STATUSES", "RANK", "Rule", "RULES", "DEPTH_RULES", "BANDS", "FACTS", "OPS", "PLACES", "EXPECT",
           "rule_named", "expected_band", "likely_cause", "rules_markdown", "rules_table"]


STATUSES = ("pass", "fail", "inconclusive", "zero", "skip", "transient")
RANK = {"pass": 0, "zero": 0, "skip": 0, "transient": 0, "inconclusive": 1, "fail": 2}  # a status's severity


@dataclass(frozen=True)
class Rules:
    """The numbers behind the verdict; every one can be overridden (sweep: ``report.tol``; CLI: ``--tol``), and each
    is checked against its range when set (:func:`coordcheck.core.errors.check_knobs`)."""

    stat: str = knob("std", choices=STATS,
                     help="statistic judged: std (activation std) or l1 (mean |x|, as the mup package)")
    tol: float = knob(0.2, (">", 0), help="max growth slope d log2(stat) / d log2(width) (and half-band of flat "
                                          "series)")
    shrink_tol: float = knob(0.35, (">", 0), help="max shrink slope for series that must not vanish (hidden out, "
                                                  "every delta)")
    rise: float = knob(0.5, (">=", 0), help="instability: loss above (1 + rise) x its running minimum ...")
    rise_floor: float = knob(0.1, (">=", 0), help="... and above it by more than this fraction of the step-0 loss")
    min_widths: int = knob(3, (">=", 2), help="fewer widths than this is inconclusive")
    min_depths: int = knob(3, (">=", 2), help="fewer depths than this is inconclusive (the depth verdict)")
    depth_loss_tol: float = knob(0.05, (">=", 0), help="depth verdict: max rise of the last judged loss from the "
                                                       "shallowest to the deepest depth, as a fraction of the step-0 "
                                                       "loss (deeper must not be worse)")
    min_window: int = knob(2, (">=", 1), help="updated steps the stable window must hold, else inconclusive")
    persist: int = knob(2, (">=", 1), help="a violation after updates must last this many consecutive judged "
                                           "steps ...")
    gross: float = knob(0.4, (">=", 0), help="... unless its whole interval lies more than this beyond the band")

    def __post_init__(self) -> None:
        check_knobs(self)


# -- the rule table ---------------------------------------------------------------------------------------------------

# The bands a rule can expect, on the slope of log2(stat) against log2(width): (low, high) as multiples of the knobs.
# "flat": [-shrink_tol, tol]; "no_growth": (-inf, tol]; "qk_init": (-inf, QK_INIT_SLOPE * a + tol], with a the head
# dimension's width exponent (the series' fact ``head_exponent``).
BANDS = {
    "flat": "[-shrink_tol, +tol]",
    "no_growth": "(-inf, +tol]",
    "qk_init": "(-inf, -a/2 + tol], a = the head dimension's width exponent",
    "shrink_half": "(-inf, -1/2 + tol]: an output weight's logits at init (variance 1/fan_in², or a 1/width "
                   "multiplier)",
    "noisy_update": "[-1/2 - tol, +tol]: an update that may still be noise in its input's direction (Adam's signs at "
                    "lr ∝ 1/fan_in move a fan_in-sum like width^-1/2 until the gradient carries signal)",
    "no_shrink": "[-tol, +inf)",
    "shown": "(-inf, +inf)",
    "as_width": "the width verdict's band for the role, tensor and step (the width rules)",
}
# Where a depth series sits (coordcheck.judge.places): the residual stream, block modules pooled over the blocks, or a
# module outside the blocks (matched across depths by name).
PLACES = {"residual": "the residual stream (the last block's output)", "pooled": "a module inside the blocks, pooled",
          "module": "a module outside the blocks (embeddings, final norm, readout)"}
# Captured q k^T * scale at step 0: independent q and k give q.k ~ sqrt(d_head), so muP's 1/d_head scale shrinks the
# logits like d_head^-0.5 — width^-0.5 when d_head grows like width. With d_head ~ width^a: QK_INIT_SLOPE * a.
QK_INIT_SLOPE = -0.5
# Op kinds a rule can ask for (the series' ``op``): the probes' capture of pure q k^T * scale logits — what
# F.scaled_dot_product_attention and nn.MultiheadAttention compute (module names ending (sdpa), (mha)) — or any other.
OPS = {"qk": "pure q·kᵀ·scale logits, captured from F.scaled_dot_product_attention or nn.MultiheadAttention"}
# Facts a rule can need, computed for each series by the engine (coordcheck.judge.series.series_facts).
FACTS = {
    "inner_output": "an output-role module in the model's output chain before its output: after the last module of "
                    "another role, before the last output module to run (logits, then a multiplier)",
    "head_grows": "the head dimension grows with width by more than the step-0 test can resolve (a/2 > tol)",
    "head_weak": "the head dimension grows with width, too slowly for the step-0 test (0 < a/2 <= tol)",
    "head_fixed": "the head dimension is the same at every width (the number of heads grows)",
    "head_shrinks": "the head dimension shrinks as width grows",
    "head_unknown": "the head dimension was not recorded at every width (a frame from before the head_dim column)",
}
Steps = Literal["init", "updates", "any"]
ANY = "*"  # a cause text for any parametrization
TP5 = "Yang & Hu et al. 2021, Tensor Programs V (muP), Table 3"


@dataclass(frozen=True)
class Rule:
    """One rule of a verdict: the series it applies to, what it expects of them, and what a violation means.

    A series (configuration, module, tensor, statistic, step) gets the first rule of :data:`RULES` whose ``roles``,
    ``tensors``, ``steps``, ``ops`` and ``facts`` all match (an empty tuple matches anything); a series of the depth
    verdict, the first of :data:`DEPTH_RULES` whose ``places`` (:data:`PLACES`) match too. ``expect`` names its band
    (:data:`BANDS`); ``judged=False`` shows the series with its band but never counts it (status ``skip``, ``note``
    says why). ``grows`` / ``shrinks``: the cause and fix of a series leaving the band that way, by parametrization
    (``*``: any; Python format fields ``dims``, ``slope``, ``power``, ``final`` come from the series' facts; in the
    depth verdict ``role`` and ``what``, "output" or "change since step 0"). ``corroborate``: a failure counts only
    where the same module's series of these tensors fail in the same direction (else it is inconclusive and
    ``alone`` says why). ``learns``: a module whose ``delta`` this rule judges must change — exactly zero at every
    updated step is "does not change during training" (inconclusive), not a pass. ``note``: said of every series the
    rule judges; with ``tell`` the verdict's notes list the modules too. ``source``: the paper or the measurement
    the rule rests on; ``test``: the test that proves it (``tests/path.py::name``).
    """

    name: str
    roles: tuple[str, ...]
    tensors: tuple[str, ...]
    steps: Steps = "any"
    ops: tuple[str, ...] = ()
    places: tuple[str, ...] = ()
    facts: tuple[str, ...] = ()
    expect: str = "flat"
    judged: bool = True
    grows: Mapping[str, str] = field(default_factory=dict)
    shrinks: Mapping[str, str] = field(default_factory=dict)
    corroborate: tuple[str, ...] = ()
    alone: str = ""
    learns: bool = False
    note: str = ""
    tell: bool = False
    source: str = ""
    test: str = ""

    def cause(self, direction: str, parametrization: str) -> str:
        """What leaving the band in ``direction`` means under ``parametrization`` (a template: see the class)."""
        texts = self.grows if direction == "grows" else self.shrinks if direction == "shrinks" else {}
        return texts.get(parametrization, texts.get(ANY, ""))


# The cause texts several rules share (one definition each).
READOUT_GROWS = {
    "sp": "readout grows with width: standard parametrization has no 1/width output multiplier (expected for the SP "
          "control; parametrization=mup adds it)",
    ANY: "readout grows with width: the readout is not a MuReadout or its 1/width output multiplier is missing (use "
         "mup.MuReadout, or scale the logits by base_width/width)",
}
ATTENTION_GROWS = {ANY: "attention logits grow with width: scores are scaled by 1/sqrt(d_head) instead of 1/d_head "
                        "(muP attention uses q.k/d)"}
LAZY = {ANY: "feature updates vanish with width (lazy / kernel regime): the learning rate of hidden or output layers "
             "is scaled down too much, or the model is in standard parametrization at a small LR"}
INIT_GROWS = {ANY: "activations grow with width at initialisation: init too large — hidden weights need variance "
                   "1/fan_in (mup.init or nn.init with std fan_in**-0.5)"}
INIT_SHRINKS = {ANY: "activations shrink with width at initialisation: init too small (hidden variance should be "
                     "1/fan_in)"}
HIDDEN_GROWS = {
    "sp": "hidden features grow with width after updates: standard parametrization uses one learning rate for every "
          "layer (expected for the SP control; parametrization=mup scales it)",
    "none": "hidden features grow with width after updates: the hidden learning rate is not scaled by width — give "
            "hidden matrices lr * base_width / width in your optimizer's parameter groups (Adam)",
    ANY: "hidden features grow with width after updates: the hidden learning rate is not scaled by width — use "
         "MuAdam/MuAdamW/MuSGD, or divide the hidden-matrix LR by width/base_width",
}
INPUT_GROWS = "input-layer features grow with width after updates: the input layer's learning rate or init is scaled " \
              "with width — keep them constant"
INNER_OUTPUT = "not the model's output (e.g. logits before an output multiplier): judged at {final}"
QK_GROWS = {ANY: "attention logits do not shrink at initialisation (independent q and k give q.k ~ sqrt(d_head), which "
                 "q.k/d_head shrinks like width^{slope:.2g} where d_head grows like width{power}, as here: {dims}): "
                 "scores are scaled by 1/sqrt(d_head) instead of 1/d_head"}
MOE = ("Małaśnicki et al. 2025, μ-Parameterization for Mixture of Experts (arXiv 2508.09752): the router is an "
       "output weight")
ROUTER_INIT = {ANY: "router logits do not shrink at initialisation: an output-like matrix inside the model (width → "
                    "a fixed size: a router, width → experts) is an output weight, not a hidden matrix — give it std "
                    "∝ 1/fan_in (or zero), or multiply its logits by base_width/width (a MuReadout)"}
ROUTER_GROWS = {ANY: "router logits grow with width after updates: an output-like matrix inside the model (width → a "
                     "fixed size: a router, width → experts) is an output weight — with Adam give it lr * base_width "
                     "/ width, or multiply its logits by base_width/width (a MuReadout) and keep the base lr"}
ROUTER_SHRINKS = {ANY: "router updates vanish with width: its learning rate is scaled down too much — a router with a "
                       "1/width logit multiplier (MuReadout) keeps the base lr, one without it takes lr * base_width / "
                       "width, once"}
ROUTING_GROWS = {ANY: "routing logits grow with width (the softmax over the experts sharpens as width grows): the "
                      "router's logits are not kept Θ(1) — see the router's cause (an output weight: lr * base_width / "
                      "width, or a base_width/width multiplier on its logits)"}
ROUTING_COLLAPSES = {ANY: "the routing collapses with width: the busiest expert's share of the tokens grows with width "
                          "(a router whose logits are not kept Θ(1) sends more of the tokens to fewer experts at "
                          "larger width) — the router is an output weight: a base_width/width multiplier on its logits "
                          "(a MuReadout) with the base lr, or lr * base_width / width without it"}
LOAD_MEASURED = ("measured on the built-in MoE (model=moe, widths 64-512, 3 seeds, 40 steps, lr 1e-2): muP's busiest "
                 "expert's share -0.08..+0.14 at every step; standard parametrization +0.25..+0.55 from step 2 (layer "
                 "1: 1.3 at width 64 to 3.7 at width 512, of a possible 4); a router alone built as a hidden layer "
                 "-0.09..+0.17, caught by its change since step 0 instead (experiments/moe_known_answers.py load)")
ROUTER_MEASURED = ("measured on the built-in MoE (model=moe, widths 64-512, 40 steps): router logits -0.51 and -0.48 "
                   "at step 0, change since step 0 -0.38 .. -0.12 after it (experiments/moe_known_answers.py)")

RULES: tuple[Rule, ...] = (
    # -- shown, not judged ------------------------------------------------------------------------------------------
    Rule("input-evidence", roles=(), tensors=("in",), judged=False,
         note="the module's input: evidence for inheritance, not judged",
         source="design (issue 17): a module's input is some other module's output, read by the causes walk",
         test="tests/test_rules.py::test_a_modules_input_is_shown_never_judged"),
    Rule("scan-not-judged", roles=("scan",), tensors=("out", "delta", "own"), expect="shown", judged=False,
         tell=True,
         note="not judged: no established muP rule for a selective scan (its step size dt, decay A and skip D under "
              "width); its measured slope is shown",
         source="Vankadara et al., NeurIPS 2024, On Feature Learning in Structured State Space Models: SSMs are not "
                "tensor programs and muP's rules do not carry over to the scan",
         test="tests/test_rules.py::test_a_scan_is_shown_never_judged"),
    Rule("own-evidence", roles=(), tensors=("own",), judged=False,
         note="a module's own update (the tensor own): evidence, not judged — the causes come from the facts measured "
              "from the weights (coordcheck.judge.facts), which every path records alike",
         source="issue 42: a fact is measured from the weights, not read off a gain the input may carry",
         test="tests/test_rules.py::test_own_updates_are_shown_never_judged"),
    Rule("inner-output", roles=("output",), tensors=("out",), facts=("inner_output",), expect="no_growth",
         judged=False, note=INNER_OUTPUT,
         source="hand-written muP (nanoGPT-mup, OLMo): logits = lm_head(x) * base_width / width outside the readout "
                "module; the readout's output grows like width^+0.5..+1 while the model's output is flat",
         test="tests/test_rules.py::test_output_rules_judge_the_models_output_not_logits_before_its_multiplier"),
    Rule("inner-output-delta", roles=("output",), tensors=("delta",), facts=("inner_output",), judged=False,
         note=INNER_OUTPUT,
         source="as inner-output",
         test="tests/test_rules.py::test_output_rules_judge_the_models_output_not_logits_before_its_multiplier"),
    # -- attention logits at initialisation: the 1/d_head test -------------------------------------------------------
    Rule("qk-init-shrinks", roles=("attention",), tensors=("out",), steps="init", ops=("qk",), facts=("head_grows",),
         expect="qk_init",
         grows=QK_GROWS,
         source=f"{TP5} (attention 1/d); measured: -0.50 and -0.51 on two public-style models under muP, -0.01 with "
                "1/sqrt(d_head) (experiments/head_dim.py)",
         test="tests/test_rules.py::test_pure_qk_logits_must_shrink_at_init_where_the_head_dimension_grows"),
    Rule("qk-init-weak-head", roles=("attention",), tensors=("out",), steps="init", ops=("qk",),
         facts=("head_weak",), expect="qk_init", tell=True,
         grows=QK_GROWS,
         note="head dimension grows only like width^{a:.2f} ({dims}): 1/d_head and 1/sqrt(d_head) differ at step 0 "
              "by a slope of {gap:.2f}, within the tolerance {tol:g}, so the step-0 test cannot tell them apart here",
         source="as qk-init-shrinks, with the gap a/2 against tol",
         test="tests/test_rules.py::test_a_slowly_growing_head_dimension_is_judged_on_its_own_slope_with_a_note"),
    Rule("qk-init-heads-outgrow-width", roles=("attention",), tensors=("out",), steps="init", ops=("qk",),
         facts=("head_shrinks",), expect="no_growth", judged=False, tell=True,
         note="head dimension shrinks with width ({dims}): the step-0 1/d_head test is not judged",
         source="TP5: 1/d_head lets the logits grow at initialisation when heads grow faster than width",
         test="tests/test_rules.py::test_a_shrinking_head_dimension_is_not_judged_at_init"),
    Rule("qk-init-fixed-head", roles=("attention",), tensors=("out",), steps="init", ops=("qk",),
         facts=("head_fixed",), expect="no_growth", tell=True,
         grows={ANY: "attention logits grow with width although the head dimension is fixed at {dims} "
                     "(1/sqrt(d_head) versus 1/d_head is then a constant factor, not the cause): q or k grow with "
                     "width — check the query and key projections' init (variance 1/fan_in) and learning rate "
                     "(Adam: hidden matrices lr * base_width / width)"},
         note="head dimension fixed at {dims} across widths: the 1/d_head vs 1/sqrt(d_head) test needs a head "
              "dimension that grows with width; step 0 judged by the no-growth rule",
         source="torchtitan-style LLaMAs (head_dim 128, heads grow with width): measured with experiments/head_dim.py",
         test="tests/test_rules.py::test_a_fixed_head_dimension_is_judged_by_no_growth_with_a_note"),
    Rule("qk-init-unknown-head", roles=("attention",), tensors=("out",), steps="init", ops=("qk",),
         facts=("head_unknown",), expect="no_growth", tell=True, grows=ATTENTION_GROWS,
         note="head dimension not recorded at every width (a frame from before the head_dim column): the step-0 "
              "1/d_head vs 1/sqrt(d_head) test is not applied; step 0 judged by the no-growth rule",
         source="frames written before the head_dim column (second release)",
         test="tests/test_rules.py::test_an_unrecorded_head_dimension_falls_back_to_no_growth_with_a_note"),
    # -- attention, output ------------------------------------------------------------------------------------------
    Rule("attention-no-growth", roles=("attention",), tensors=("out", "delta"), expect="no_growth",
         grows=ATTENTION_GROWS,
         source=f"{TP5}: attention logits q.k/d stay Θ(1); a zero query makes them shrink at init, which is allowed",
         test="tests/test_rules.py::test_attention_logits_must_not_grow"),
    Rule("output-no-growth", roles=("output",), tensors=("out",), expect="no_growth", grows=READOUT_GROWS,
         source=f"{TP5}: the readout's output is Θ(1) after updates and may shrink like 1/width at init (exactly 0 "
                "with a zero-initialised readout)",
         test="tests/test_rules.py::test_the_models_output_may_shrink_but_not_grow"),
    Rule("output-delta-flat", roles=("output",), tensors=("delta",), grows=READOUT_GROWS, shrinks=LAZY, learns=True,
         source=f"{TP5}: the output's change is Θ(1) (maximal update); one that vanishes is the lazy regime",
         test="tests/test_rules.py::test_the_outputs_change_must_neither_grow_nor_vanish"),
    # -- mixture of experts: the router (an output weight inside the model) and the routing over its logits --------
    Rule("router-init-shrinks", roles=("router",), tensors=("out",), steps="init", expect="shrink_half",
         grows=ROUTER_INIT,
         source=f"{TP5} (output weights: init variance 1/fan_in², Adam lr 1/fan_in); {MOE}; {ROUTER_MEASURED}",
         test="tests/test_rules.py::test_a_routers_logits_must_shrink_at_init_like_an_output_weights"),
    Rule("router-no-growth", roles=("router",), tensors=("out",), expect="no_growth", grows=ROUTER_GROWS,
         source=f"{TP5}; {MOE}: the router's logits Θ(1) after updates",
         test="tests/test_rules.py::test_a_routers_logits_and_their_change_must_not_grow_after_updates"),
    Rule("router-delta-flat", roles=("router",), tensors=("delta",), expect="noisy_update", grows=ROUTER_GROWS,
         shrinks=ROUTER_SHRINKS, learns=True,
         source=f"{TP5}; {MOE}: the router's change is Θ(1) once its gradient carries signal; its gradient "
                "<dL/dy, expert output> starts uncorrelated, and Adam's sign-like steps at lr ∝ 1/fan_in then move "
                f"the logits like width^-1/2; {ROUTER_MEASURED}; GraniteMoe under granite_mup: -0.43 at step 3, "
                "-0.17 at step 10",
         test="tests/test_rules.py::test_a_routers_logits_and_their_change_must_not_grow_after_updates"),
    Rule("routing-no-growth", roles=("routing",), tensors=("out", "delta"), expect="no_growth", grows=ROUTING_GROWS,
         source=f"{MOE}: a softmax over router logits is routing, not attention; the logits may shrink (a router "
                "initialised small or at zero routes uniformly at init)",
         test="tests/test_rules.py::test_routing_is_judged_by_its_own_rule_never_attentions"),
    Rule("routing-no-collapse", roles=("routing",), tensors=("load",), expect="no_growth", grows=ROUTING_COLLAPSES,
         source=f"{MOE}: with the router's logits Θ(1) the load over the experts does not depend on the width; "
                f"{LOAD_MEASURED}",
         test="tests/test_rules.py::test_a_router_whose_load_collapses_with_width_fails_with_that_cause"),
    # -- input, hidden, norm ----------------------------------------------------------------------------------------
    Rule("init-flat", roles=(), tensors=("out",), steps="init", grows=INIT_GROWS, shrinks=INIT_SHRINKS,
         source=f"{TP5}: activations Θ(1) at initialisation with variance 1/fan_in",
         test="tests/test_rules.py::test_activations_at_init_must_be_flat"),
    Rule("input-updates-flat", roles=("input",), tensors=("out", "delta"),
         grows={"none": INPUT_GROWS, ANY: INPUT_GROWS + " (vector-like in MuAdam)"},
         shrinks={ANY: "input-layer updates vanish with width: the embedding learning rate is scaled like a hidden "
                       "matrix (embeddings keep the base LR in muP)"},
         source=f"{TP5}: input weights keep a width-independent learning rate under Adam",
         test="tests/test_rules.py::test_input_features_must_stay_flat_after_updates"),
    Rule("hidden-updates-flat", roles=("hidden",), tensors=("out", "delta"), grows=HIDDEN_GROWS, shrinks=LAZY,
         learns=True,
         source=f"{TP5}: hidden features and their updates Θ(1); measured: muP-correct |slope| <= 0.05 over widths "
                "128-1024, standard parametrization with Adam 0.5-3 within 10 steps (experiments/known_answers.py)",
         test="tests/test_rules.py::test_hidden_features_must_neither_grow_nor_vanish_after_updates"),
    Rule("updates-flat", roles=(), tensors=("out", "delta"), grows=HIDDEN_GROWS, shrinks=LAZY,
         source=f"{TP5}: every feature Θ(1) after updates (norm layers, and roles a model declares itself)",
         test="tests/test_rules.py::test_norms_and_other_roles_must_stay_flat_after_updates"),
)
DEPTH_SOURCE = ("CompleteP (Dey et al. 2025) and depth-μP (Yang et al. 2023); measured with "
                "experiments/depth_known_answers.py on the built-in GPT, width 128, depths 2-16 (docs/depth.md)")
DEPTH_RULES: tuple[Rule, ...] = (
    Rule("depth-pooled-shown", roles=(), tensors=("out", "delta", "own", "in"), places=("pooled",), expect="shown",
         judged=False, note="inside the blocks: shown, not judged (depth-μP shrinks per-block updates like depth^-1/2 "
                            "by design)",
         source=f"{DEPTH_SOURCE}: the pooled mlp.c_proj change -0.23..-0.50 under correct depth-μP",
         test="tests/test_rules.py::test_depth_modules_inside_the_blocks_are_shown_not_judged"),
    Rule("depth-residual-init", roles=(), tensors=("out",), steps="init", places=("residual",), expect="no_growth",
         grows={ANY: "the residual stream grows with depth at initialisation"},
         source=f"{DEPTH_SOURCE}: CompleteP's residual at step 0 -0.02; a missing multiplier with a fan-in init "
                "+0.38",
         test="tests/test_rules.py::test_the_residual_stream_must_not_grow_with_depth_at_init"),
    Rule("depth-residual-value", roles=(), tensors=("out", "own", "in"), places=("residual",), expect="shown",
         judged=False, note="the residual's value after updates: shown, judged by its change since step 0",
         source=DEPTH_SOURCE,
         test="tests/test_rules.py::test_the_residual_streams_change_must_be_flat_in_depth"),
    Rule("depth-residual-change", roles=(), tensors=("delta",), places=("residual",),
         grows={ANY: "the residual stream change since step 0 grows with depth after updates"},
         shrinks={ANY: "the residual stream change since step 0 vanishes with depth"},
         source=f"{DEPTH_SOURCE}: correct depth-μP -0.09..+0.19, CompleteP -0.31..+0.02; no multiplier "
                "+0.6..+1.7, GPT-2's 1/sqrt(2L) init +0.6..+1.2",
         test="tests/test_rules.py::test_the_residual_streams_change_must_be_flat_in_depth"),
    Rule("depth-module", roles=(), tensors=("out", "delta", "own", "in"), places=("module",), expect="as_width",
         grows={ANY: "the {role} layer {what} grows with depth after updates"},
         shrinks={ANY: "the {role} layer {what} vanishes with depth"},
         source=f"{DEPTH_SOURCE}: embeddings, final norm and readout are judged as the width verdict judges them",
         test="tests/test_rules.py::test_modules_outside_the_blocks_are_judged_by_their_width_rule_along_depth"),
)
_BY_NAME = {r.name: r for r in (*RULES, *DEPTH_RULES)}


def rule_named(name: str) -> Rule:
    return _BY_NAME[name]


def _matches(rule: Rule, role: str, tensor: str, step: int, op: str = "", facts: frozenset[str] = frozenset()) -> bool:
    return (not rule.places and (not rule.roles or role in rule.roles) and tensor in rule.tensors
            and (rule.steps == "any" or (rule.steps == "init") == (step == 0))
            and (not rule.ops or op in rule.ops) and set(rule.facts) <= facts)


def rule_for(role: str, tensor: str, step: int, op: str = "", facts: frozenset[str] = frozenset()) -> Rule | None:
    """The rule that judges a series of this role, tensor, step, op kind and facts (the first that matches)."""
    return next((r for r in RULES if _matches(r, role, tensor, step, op, facts)), None)


def expected_band(role: str, tensor: str, step: int) -> str:
    """The band (:data:`BANDS`) the table expects of a plain series — no op kind, no special fact — of this role and
    tensor at ``step``: how the depth verdict judges the modules outside the blocks as the width verdict does."""
    rule = rule_for(role, tensor, step)
    return rule.expect if rule is not None else "flat"


def likely_cause(role: str, tensor: str, step: int, direction: str, parametrization: str = "mup") -> str:
    """Likely cause and fix, in words a user can act on, for a plain series of this role, tensor and step leaving its
    band in ``direction`` under ``parametrization`` (the matching rule's text)."""
    if direction == "diverged":
        return DIVERGED
    rule = rule_for(role, tensor, step)
    return rule.cause(direction, parametrization) if rule is not None else ""


DIVERGED = "training diverged (non-finite values): lower the learning rate, or check the initialisation"
EXPECT = {(role, tensor): expected_band(role, tensor, 1)  # kept for old imports: the band after updates by (role,
          for role in ("input", "hidden", "norm", "output", "attention") for tensor in ("out", "delta")}  # tensor)


def rules_table(rules: tuple[Rule, ...], places: Mapping[str, str] = PLACES) -> list[str]:
    """One rule table as Markdown lines (``places``: what each place of the table's rules means)."""
    def cell(text: str) -> str:
        return " ".join(str(text).split()).replace("|", "\\|")

    def causes(rule: Rule) -> str:
        parts = []
        for word, texts in (("grows", rule.grows), ("shrinks", rule.shrinks)):
            for par, text in texts.items():
                parts.append(f"*{word}{'' if par == ANY else f' ({par})'}*: {text}")
        return "<br>".join(cell(p) for p in parts) or "—"

    lines = ["| rule | applies to | expects | cause and fix | source | proved by |", "|---|---|---|---|---|---|"]
    for r in rules:
        where = [places[p] for p in r.places]
        where += [f"role {', '.join(r.roles)}" if r.roles else "any role", f"tensor {', '.join(r.tensors)}",
                  {"init": "step 0", "updates": "steps ≥ 1", "any": "every step"}[r.steps]]
        where += [f"op {o}" for o in r.ops] + [f"{FACTS[f]}" for f in r.facts]
        expects = f"`{r.expect}` {BANDS[r.expect]}" + ("" if r.judged else ", not judged (shown)")
        evidence = []
        if r.corroborate:
            evidence.append(f"counts only with the module's {' or '.join(r.corroborate)} failing the same way")
        if r.learns:
            evidence.append("its module must change: a delta exactly zero at every updated step is inconclusive")
        if r.note:
            evidence.append(f"note: {r.note}")
        test = r.test.split("::")
        lines.append(f"| `{r.name}` | {cell('; '.join(where))} | "
                     f"{cell(expects + ''.join('; ' + e for e in evidence))} | {causes(r)} | {cell(r.source)} | "
                     f"`{test[-1]}` |")
    return lines


def rules_markdown() -> str:
    """The rule tables as Markdown, for ``docs/verdict.md`` (``python experiments/rules_table.py`` writes it there)."""
    return "\n".join(["Width (slopes against width; the first rule that matches):", "", *rules_table(RULES), "",
                      "Depth (slopes against depth, by place; the depth verdict):", "", *rules_table(DEPTH_RULES)]
                     ) + "\n"
