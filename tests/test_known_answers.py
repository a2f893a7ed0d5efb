"""Known answers on real training runs at small widths: the verdict must get them right.

Each case trains for real (2 seeds, 4 steps) and asserts the verdict, the module(s) it names,
the step and the slope. Learning rates are ones at which training is stable at every width
(an unstable run is inconclusive by design; see test_verdict).
"""

import pytest
import torch

from coordcheck import coord_check
from coordcheck.setup.data import tokens
from coordcheck.setup.models import gpt, mlp
from coordcheck.testing import known_models as km

pytestmark = pytest.mark.slow  # every case trains real models for its verdict

MLP_WIDTHS = [64, 128, 256, 512]
GPT_WIDTHS = [64, 128, 256]
RUN = dict(steps=4, seeds=2, progress=False)
GPT_DATA = tokens(batch_size=2, seq_len=16)  # few tokens per batch: width >> tokens, as muP's limit


def torch_adam(model, lr):
    return torch.optim.Adam(model.parameters(), lr=lr)


def failing(result, tensor=None):
    """The failing activation series (``out``/``delta``; the ``own`` gains are the causes' evidence, asserted apart)."""
    s = result.verdict.series
    s = s[s["in_window"] & (s["status"] == "fail")]
    return s[s["tensor"].isin(["out", "delta"])] if tensor is None else s[s["tensor"] == tensor]


# The GPT's residual-branch outputs are noisy at these widths: with 2 seeds one comes within 0.01 of the band in 1 of 5
# seed sets, with 3 the closest is 0.07 away (experiments/margins.py)
@pytest.mark.parametrize("build,widths,data,seeds", [(mlp, MLP_WIDTHS, None, 2), (gpt, GPT_WIDTHS, GPT_DATA, 3)])
def test_mup_models_pass(build, widths, data, seeds):
    r = coord_check(build, widths, data=data, **{**RUN, "seeds": seeds})
    assert r.passed, r.verdict.reason
    hidden = r.verdict.series.query("role == 'hidden' and status == 'pass'")
    # flat: the median |slope| is 0.02-0.04 (SP: 0.5); the largest reaches 0.19 on the GPT, which the band allows
    assert len(hidden) and hidden["slope"].abs().median() < 0.1


@pytest.mark.parametrize("build,widths,data", [(mlp, MLP_WIDTHS, None), (gpt, GPT_WIDTHS, GPT_DATA)])
def test_same_models_in_sp_with_adam_fail(build, widths, data):
    r = coord_check(build, widths, data=data, parametrization="sp", **RUN)
    assert r.verdict.status == "fail"
    bad = failing(r)
    assert {"hidden", "output"} <= set(bad["role"]) and bad["slope"].max() > 0.8
    # the story: the unscaled hidden learning rate first, the readout's missing multiplier next, both as SP does
    assert list(r.verdict.causes["kind"][:2]) == ["lr", "output_multiplier"]
    assert r.verdict.reason.startswith("cause: ") and "expected for the SP control" in r.verdict.reason
    assert "violate muP" in r.verdict.reason


HIDDEN_FIX = "multiply their learning rate by base_width / width"  # Adam's hidden lr, measured unscaled


def test_mup_shapes_with_plain_torch_adam_fail_on_hidden_layers():
    r = coord_check(mlp, MLP_WIDTHS, optimizer=torch_adam, lr=1e-3, **RUN)
    assert r.verdict.status == "fail"
    bad = failing(r)
    assert set(bad["role"]) >= {"hidden"} and bad.loc[bad.role == "hidden", "slope"].min() > 0.5
    # measured: each hidden matrix's update ∝ width^0 under one lr, where muP's goes as 1/width
    assert r.verdict.reason.startswith("cause: both hidden matrices: update ∝ width^")
    assert HIDDEN_FIX in r.verdict.reason


def test_gpt_with_plain_torch_adam_fails_on_hidden_layers():
    r = coord_check(gpt, GPT_WIDTHS, data=GPT_DATA, optimizer=torch_adam, **RUN)
    assert r.verdict.status == "fail"
    assert r.verdict.reason.startswith("cause: all 12 hidden matrices: update ∝ width^")
    assert HIDDEN_FIX in r.verdict.reason


HAND = dict(parametrization="none", optimizer=km.make_optimizer, data="gaussian", lr=1e-3, **RUN)


def test_hand_written_mup_passes():
    r = coord_check(km.build, MLP_WIDTHS, **HAND)
    assert r.passed, r.verdict.reason
    assert r.verdict.modules.set_index("module").loc["readout.fc", "status"] == "skip"  # pre-multiplier logits


def test_hand_written_without_output_multiplier_fails_naming_the_readout():
    r = coord_check(km.build_no_multiplier, MLP_WIDTHS, **HAND)
    assert r.verdict.status == "fail"
    bad = failing(r)
    # the readout jumps like width^+1 at the first update (+0.91 to +1.03 over 5 seed sets), then eases (+0.73 to
    # +0.86 by step 4): experiments/margins.py
    assert set(bad["module"]) == {"readout"} and bad["slope"].min() > 0.6
    assert bad.loc[bad["step"] == 1, "slope"].min() > 0.8
    # measured on the readout's own weight: its update at width^0 behind no multiplier, muP's at width^-1
    assert r.verdict.reason.startswith("cause: readout.fc: update ∝ width^")
    assert "multiply its output by base_width / width" in r.verdict.reason


def test_hand_written_with_unscaled_hidden_lr_fails_naming_hidden_layers():
    r = coord_check(km.build_unscaled_hidden_lr, MLP_WIDTHS, **HAND)
    assert r.verdict.status == "fail"
    bad = failing(r)
    assert {"hidden.0", "hidden.1"} <= set(bad["module"])
    assert r.verdict.reason.startswith("cause: both hidden matrices: update ∝ width^")
    assert HIDDEN_FIX in r.verdict.reason


def test_sp_at_tiny_lr_has_flat_activations_but_fails_through_delta():
    r = coord_check(mlp, MLP_WIDTHS, parametrization="sp", optimizer="sgd", lr=1e-3, readout_zero_init=False, **RUN)
    s = r.verdict.series
    hidden_out = s[(s.role == "hidden") & (s.tensor == "out")]
    assert (hidden_out["status"] == "pass").all()  # activations look flat ...
    assert r.verdict.status == "fail"
    assert set(failing(r)["tensor"]) == {"delta"}  # ... but their updates do not scale like muP


def test_mup_at_an_unstable_lr_is_inconclusive_never_fail():
    r = coord_check(gpt, GPT_WIDTHS, data=GPT_DATA, lr=5e-2, steps=10, seeds=2, progress=False)
    v = r.verdict
    assert v.status == "inconclusive" and "training unstable at this learning rate — lower it" in v.reason
    assert int(v.configs["window_end"].iloc[0]) < 10
    late = v.series[~v.series["in_window"]]
    assert (late["slope"].abs() > 0.2).any()  # after the blow-up, slopes are outside the band: not judged


def sqrt_d_attention(width: int, **kwargs):
    """Planted bug: attention logits q.k / sqrt(d_head) instead of q.k / d_head."""
    return gpt(width, attn_mult=(width // 4) ** 0.5, **kwargs)


def test_attention_scaled_by_one_over_sqrt_d_fails_naming_the_scores():
    # needs several updates: at step 2-4 the growth (+0.5) is offset by muP's early shrink (about -0.3). 3 seeds: with
    # 2 the scores' interval clears the band by only 0.06 in 1 of 5 seed sets, with 3 by 0.10 (experiments/margins.py)
    widths = [64, 128, 256, 512]
    bug = coord_check(sqrt_d_attention, widths, data=GPT_DATA, steps=10, seeds=3, progress=False)
    assert bug.verdict.status == "fail"
    assert "attn.scores" in bug.verdict.reason and "1/sqrt(d_head) instead of 1/d_head" in bug.verdict.reason
    assert set(failing(bug)["role"]) == {"attention"}
    # the control passes in 5 of 5 seed sets, but a query's drift at these widths (+0.17 at step 6) leaves it 0.03 to
    # spare on 2 seeds, 0.04 on 3: usually, not always. What always holds: it does not fail (its nearest series 0.14
    # from it) and its scores stay in the band (0.10 to spare; the bug's reach +0.4 to +0.7) or are zero (step 0)
    control = coord_check(gpt, widths, data=GPT_DATA, steps=10, seeds=2, progress=False)
    assert control.verdict.status != "fail", control.verdict.reason
    scores = control.verdict.series.query("in_window and role == 'attention'")
    assert len(scores) and scores["status"].isin(["pass", "zero"]).all()
