"""The experts verdict's rules: what must stay flat as the number of experts grows at one width (the rule table of
:mod:`coordcheck.judge.experts`, as :data:`coordcheck.judge.rules.DEPTH_RULES` is the depth verdict's).

Stage: judge (below the experts verdict; the engine is the width verdict's, :func:`coordcheck.judge.series.
judge_by_table`). Input: none. Output: :data:`EXPERTS_PLACES` (where a series sits in a mixture-of-experts layer),
:data:`EXPERTS_RULES` and their Markdown for ``docs/verdict.md`` (:func:`experts_rules_markdown`). Never imports torch.

Measured on the built-in MoE (``model=moe``, width 128, 4-32 experts, top-2, 3 seeds, 10 Adam steps, lr 1e-2;
``experiments/moe_known_answers.py experts``), the slopes quoted are those.
"""

from __future__ import annotations

from coordcheck.judge.rules import ANY, MOE, Rule, rules_markdown, rules_table

__all__ = ["EXPERTS_PLACES", "EXPERTS_RULES", "EXPERTS_MEASURED", "LOAD_STAT", "experts_rules_markdown",
           "all_rules_markdown"]

# Where a series sits, as coordcheck.judge.experts finds it from the jobs' facts and the decided roles
EXPERTS_PLACES = {
    "router": "a router (an output-like matrix inside the model: width → experts)",
    "experts": "a module owning an expert stack (a parameter whose leading dimension is the number of experts)",
    "layer": "the mixture-of-experts layer (the router's nearest recorded ancestor)",
    "load": "a router's load over its experts (its entropy), relative to its step-0 value",
    "other": "any other module",
}
EXPERTS_MEASURED = ("measured on the built-in MoE (width 128, 4-32 experts, top-2, 3 seeds, 10 steps, lr 1e-2): router "
                    "logits -0.05..+0.02, their change -0.14..+0.10; each expert's output, change and own update "
                    "-0.24..+0.06; the layer's output at init -0.03..-0.02; the load's entropy against its step-0 "
                    "value -0.08..+0.04 (experiments/moe_known_answers.py experts)")
ROUTER_COUNT = {ANY: "the router's logits depend on the number of experts: its init or multiplier is scaled by its "
                     "fan_out (the count) — an output weight's scale follows the width alone: std ∝ 1/fan_in, or a "
                     "MuReadout"}
EXPERT_SHRINKS = {ANY: "each expert's update shrinks as the number of experts grows: at a fixed total expert width "
                       "(granularity) each expert's inner size, its fan_in, shrinks with the count while its learning "
                       "rate follows the model width — muP's hidden lr ∝ 1/fan_in must follow the expert's own size "
                       "(lr * base_expert_size / expert_size), or keep the experts' size fixed"}
EXPERT_GROWS = {ANY: "each expert's update grows with the number of experts: its learning rate or init is scaled up "
                     "with the count — keep an expert's lr and std those of a hidden matrix of its own size"}
GATES_SHRINK = {ANY: "the mixture-of-experts layer's output shrinks with the number of experts at initialisation: "
                     "its top-k gates are softmax probabilities over all the experts (about k/E each) — renormalise "
                     "them over the top k (Mixtral; norm_topk_prob=true)"}
LAYER_GROWS = {ANY: "the mixture-of-experts layer's output grows with the number of experts at initialisation: the "
                    "experts' outputs are summed, not weighted by gates that sum to one"}
LOAD_COUNT = {ANY: "the routing collapses faster with more experts: the entropy of the load over the experts (relative "
                   "to step 0) falls with the count — see the router's logits"}
LOAD_STAT = "entropy"  # the load's statistic this verdict judges: the busiest expert's share is too noisy across counts
CAPACITY = ("shown, not judged: with more experts of the same size the layer holds more parameters and fits the fixed "
            "batch faster (the layer's change +0.33..+0.42 at step 10 on the correct built-in MoE)")

EXPERTS_RULES: tuple[Rule, ...] = (
    Rule("experts-router-flat", roles=(), tensors=("out", "delta"), places=("router",), grows=ROUTER_COUNT,
         shrinks=ROUTER_COUNT, source=f"{MOE}: the router's logits Θ(1) in the width; {EXPERTS_MEASURED}",
         test="tests/test_rules.py::test_experts_rules_routers_experts_gates_and_load"),
    Rule("experts-per-expert-flat", roles=(), tensors=("out", "delta", "own"), places=("experts",), steps="updates",
         grows=EXPERT_GROWS, shrinks=EXPERT_SHRINKS,
         source=f"{MOE}; every hidden matrix's update Θ(1) (Tensor Programs V); {EXPERTS_MEASURED}; at a fixed total "
                "expert width: -0.38..-0.81",
         test="tests/test_rules.py::test_experts_rules_routers_experts_gates_and_load"),
    Rule("experts-layer-init-flat", roles=(), tensors=("out",), places=("layer",), steps="init", grows=LAYER_GROWS,
         shrinks=GATES_SHRINK,
         source=f"{EXPERTS_MEASURED}; gates not renormalised over the top k: -0.52 (model.renormalize=false)",
         test="tests/test_rules.py::test_experts_rules_routers_experts_gates_and_load"),
    Rule("experts-load-flat", roles=(), tensors=("load",), places=("load",), steps="updates", expect="no_shrink",
         shrinks=LOAD_COUNT,
         source=f"{EXPERTS_MEASURED}; the busiest expert's share grows with the count at any step (+0.3..+0.7: the "
                "busiest of more experts over a fixed batch) and against its step-0 value it is still noisy (-0.18.."
                "+0.38, one interval +0.24..+0.52 in a correct model), so the load's entropy against its step-0 value "
                "is judged",
         test="tests/test_rules.py::test_experts_rules_routers_experts_gates_and_load"),
    Rule("experts-shown", roles=(), tensors=("out", "delta", "own", "in", "load"), places=("layer", "other", "experts",
                                                                                          "router", "load"),
         expect="shown", judged=False, note=CAPACITY, source=EXPERTS_MEASURED,
         test="tests/test_rules.py::test_experts_rules_routers_experts_gates_and_load"),
)


def experts_rules_markdown() -> str:
    """The experts rule table as Markdown, for ``docs/verdict.md`` (``python experiments/rules_table.py``)."""
    return "\n".join(rules_table(EXPERTS_RULES, EXPERTS_PLACES)) + "\n"


def all_rules_markdown() -> str:
    """Every rule table (width, depth, experts): the block ``python experiments/rules_table.py`` writes in
    ``docs/verdict.md``."""
    return (rules_markdown() + "\nExperts (slopes against the number of experts at one width, by place; the experts "
            "verdict):\n\n" + experts_rules_markdown())
