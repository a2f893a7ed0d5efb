"""The margins of the known answers: each test's case rerun under other seeds, and how far it is from flipping.

For each case of tests/test_known_answers.py, tests/test_public_models.py, tests/gradflow/test_checks.py and the
end-to-end tests that assert a verdict (test_app, test_strict, test_experiments, test_device), seed set ``k``
trains with model seeds ``[10k, 10k + 1, ...]`` (as many as the test uses) on the batch drawn with data seed
``k``; ``k = 0`` is the test as written. ``ok`` is the test's own assertions; the margins are the room each
assertion has, in its own units (slopes: log2 per width doubling; gradient trends: decades):

- a pass: the smallest distance of a judged series' slope to its band's nearest edge (``band``), and how many
  series were one-step transients (``transients``: outside the band at one step only, forgiven by rule 4);
- a fail that must name something: how far the named series' 95% interval clears the band (``clears``), and
  how far the other modules stay from failing (``others``: minus their largest clearance);
- not a fail (where a pass at that size is "usually", not "always"): how far the series nearest to failing keeps
  its interval from lying wholly outside its band (``not_fail``);
- a threshold on a slope (``slope > 0.8``): the slope minus the threshold;
- a reason's wording: how much larger |slope| the worst failing series that gives that wording has than the
  worst one that does not (``lead``; the reason is written from the worst failure).

From the repository root (the gradient-flow cases use the tests' own models, ``tests/gradflow``)::

    PYTHONPATH=. python experiments/margins.py                 # every case, 5 seed sets (~15 min on 1 busy core)
    PYTHONPATH=. python experiments/margins.py --sets 3 mlp    # the cases whose name contains "mlp"
    PYTHONPATH=. python experiments/margins.py --group public  # the cases of one test file
"""

from __future__ import annotations

import argparse
import functools
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from coordcheck import coord_check
from coordcheck.setup.data import gaussian, tokens
from coordcheck.setup.models import gpt, mlp
from coordcheck.testing import known_models as km
from coordcheck.testing import public_models as pm
from coordcheck.judge.verdict import Verdict

Margins = dict[str, float]


@dataclass
class Case:
    asserted: str
    run: Callable[[int], object]  # seed set k -> a CoordCheckResult (or a gradient-flow frame)
    check: Callable[[object], tuple[bool, Margins]]  # -> (the test's assertions hold, margins)


def seeds(k: int, n: int) -> list[int]:
    return [10 * k + i for i in range(n)]


# -- margins of a verdict ------------------------------------------------------------------------------------------
def judged(v: Verdict) -> pd.DataFrame:
    s = v.series
    return s[s["in_window"] & ~s["status"].isin(["skip", "zero"])]


def clearance(rows: pd.DataFrame) -> pd.Series:
    """How far each row's 95% interval lies outside its band (> 0: significant)."""
    return np.maximum(rows["ci_low"] - rows["band_high"], rows["band_low"] - rows["ci_high"])


def band(v: Verdict, rows: pd.DataFrame | None = None) -> Margins:
    """A pass: the smallest margin of a passing series to its band, and the transients."""
    s = judged(v) if rows is None else rows
    return {"band": float(s.loc[s["status"] == "pass", "margin"].min()),
            "transients": float((s["status"] == "transient").sum())}


def clears(v: Verdict, mask: Callable[[pd.DataFrame], pd.Series], name: str = "clears") -> Margins:
    """A named failure: the largest clearance of a failing series in ``mask`` (negative when none fails)."""
    s = judged(v)
    s = s[mask(s)]
    bad = s[s["status"] == "fail"]
    if len(bad):
        return {name: float(clearance(bad).max())}
    return {name: -abs(float(clearance(s).max())) if len(s) else -math.inf}


def others(v: Verdict, mask: Callable[[pd.DataFrame], pd.Series]) -> Margins:
    """Series outside ``mask`` must not fail: minus their largest clearance (transients left out, counted)."""
    s = judged(v)
    s = s[~mask(s)]
    counted = s[s["status"] != "transient"]
    return {"others": -float(clearance(counted).max()) if len(counted) else math.inf,
            "others_transients": float((s["status"] == "transient").sum())}


def lead(v: Verdict, gives: Callable[[pd.DataFrame], pd.Series], name: str = "lead") -> Margins:
    """The reason is written from the failing series of largest |slope|: its lead over the best that does not
    give the wording (negative: another wording wins)."""
    s = judged(v)
    bad = s[s["status"] == "fail"]
    if bad.empty:
        return {name: -math.inf}
    yes, no = bad[gives(bad)]["slope"].abs(), bad[~gives(bad)]["slope"].abs()
    if yes.empty:
        return {name: -math.inf}
    return {name: float(yes.max() - no.max()) if len(no) else math.inf}  # no competitor: +inf


def failing(v: Verdict) -> pd.DataFrame:
    s = v.series
    return s[s["in_window"] & (s["status"] == "fail")]


def role(*roles: str) -> Callable[[pd.DataFrame], pd.Series]:
    return lambda s: s["role"].isin(roles)


def module(pred: Callable[[str], bool]) -> Callable[[pd.DataFrame], pd.Series]:
    return lambda s: s["module"].map(pred).astype(bool)


def diagnosis(text: str) -> Callable[[pd.DataFrame], pd.Series]:
    return lambda s: s["diagnosis"].str.contains(text, regex=False)


# -- tests/test_known_answers.py -----------------------------------------------------------------------------------
MLP_WIDTHS, GPT_WIDTHS = [64, 128, 256, 512], [64, 128, 256]


def gpt_data(k: int):
    return tokens(batch_size=2, seq_len=16, seed=k)


def run(build, widths, k, *, n_seeds=2, steps=4, data=None, **kw):
    return coord_check(build, widths, steps=steps, seeds=seeds(k, n_seeds), data=data, progress=False, **kw)


def torch_adam(model, lr):
    return torch.optim.Adam(model.parameters(), lr=lr)


def mup_passes(r) -> tuple[bool, Margins]:
    hidden = r.verdict.series.query("role == 'hidden' and status == 'pass'")
    ok = r.passed and len(hidden) and hidden["slope"].abs().median() < 0.1
    return bool(ok), {**band(r.verdict), "median<0.1": 0.1 - float(hidden["slope"].abs().median())}


def sp_fails(r) -> tuple[bool, Margins]:
    v, bad = r.verdict, failing(r.verdict)
    ok = (v.status == "fail" and {"hidden", "output"} <= set(bad["role"]) and bad["slope"].max() > 0.8
          and "violate muP" in v.reason and "slope +" in v.reason)
    return bool(ok), {**clears(v, role("hidden"), "hidden"), **clears(v, role("output"), "output"),
                      "max>0.8": float(bad["slope"].max()) - 0.8 if len(bad) else -math.inf}


def torch_adam_mlp_fails(r) -> tuple[bool, Margins]:
    v, bad = r.verdict, failing(r.verdict)
    hid = bad.loc[bad.role == "hidden", "slope"]
    ok = (v.status == "fail" and set(bad["role"]) >= {"hidden"} and hid.min() > 0.5
          and "hidden learning rate is not scaled" in v.reason)
    return bool(ok), {**clears(v, role("hidden")), "hidden_min>0.5": float(hid.min()) - 0.5 if len(hid) else -math.inf,
                      **lead(v, diagnosis("hidden learning rate is not scaled"))}


def torch_adam_gpt_fails(r) -> tuple[bool, Margins]:
    v = r.verdict
    ok = v.status == "fail" and "blocks." in v.reason and "hidden learning rate is not scaled" in v.reason
    return ok, {**clears(v, module(lambda m: m.startswith("blocks."))),
                **lead(v, diagnosis("hidden learning rate is not scaled"))}


def hand_passes(r) -> tuple[bool, Margins]:
    ok = r.passed and r.verdict.modules.set_index("module").loc["readout.fc", "status"] == "skip"
    return bool(ok), band(r.verdict)


def no_multiplier_fails(r) -> tuple[bool, Margins]:
    v, bad = r.verdict, failing(r.verdict)
    readout = module(lambda m: m == "readout")
    step1 = bad.loc[bad["step"] == 1, "slope"]
    ok = (v.status == "fail" and set(bad["module"]) == {"readout"} and bad["slope"].min() > 0.6
          and step1.min() > 0.8 and "worst: readout" in v.reason and "output multiplier is missing" in v.reason)
    return bool(ok), {**clears(v, readout), **others(v, readout),
                      "min>0.6": float(bad["slope"].min()) - 0.6 if len(bad) else -math.inf,
                      "step1>0.8": float(step1.min()) - 0.8 if len(step1) else -math.inf}


def unscaled_hidden_lr_fails(r) -> tuple[bool, Margins]:
    v, bad = r.verdict, failing(r.verdict)
    ok = (v.status == "fail" and {"hidden.0", "hidden.1"} <= set(bad["module"]) and "hidden.1" in v.reason
          and "hidden learning rate is not scaled" in v.reason)
    return bool(ok), {**clears(v, module(lambda m: m == "hidden.0"), "hidden.0"),
                      **clears(v, module(lambda m: m == "hidden.1"), "hidden.1"),
                      **lead(v, diagnosis("hidden learning rate is not scaled"))}


def sp_sgd_fails_through_delta(r) -> tuple[bool, Margins]:
    v, s = r.verdict, r.verdict.series
    hidden_out = s[(s.role == "hidden") & (s.tensor == "out")]
    delta = lambda x: x["tensor"] == "delta"  # noqa: E731
    ok = (hidden_out["status"] == "pass").all() and v.status == "fail" and set(failing(v)["tensor"]) == {"delta"}
    return bool(ok), {"hidden_out_band": float(hidden_out["margin"].min()), **clears(v, delta, "delta"),
                      **others(v, delta)}


def unstable_is_inconclusive(r) -> tuple[bool, Margins]:
    v = r.verdict
    end = int(v.configs["window_end"].iloc[0])
    late = v.series[~v.series["in_window"]]
    ok = (v.status == "inconclusive" and "training unstable at this learning rate — lower it" in v.reason
          and end < 10 and (late["slope"].abs() > 0.2).any())
    inside = judged(v)
    return bool(ok), {"window_end<10": float(9 - end), "late>0.2": float(late["slope"].abs().max()) - 0.2,
                      "no_fail_in_window": -float(clearance(inside[inside["status"] != "transient"]).max())}


def sqrt_d_attention(width: int, **kwargs):
    return gpt(width, attn_mult=(width // 4) ** 0.5, **kwargs)


def sqrt_d_fails(r) -> tuple[bool, Margins]:
    v = r.verdict
    att = role("attention")
    ok = (v.status == "fail" and "attn.scores" in v.reason and "1/sqrt(d_head) instead of 1/d_head" in v.reason
          and set(failing(v)["role"]) == {"attention"})
    return bool(ok), {**clears(v, att), **others(v, att)}


def control_holds(r) -> tuple[bool, Margins]:
    """The control of the 1/sqrt(d) case: not a fail, and its attention scores pass."""
    ok, m = not_fail(r)
    scores = judged(r.verdict).query("role == 'attention'")
    return ok and bool((scores["status"] == "pass").all()), {**m, "scores_band": float(scores["margin"].min())}


def passes(r) -> tuple[bool, Margins]:
    return r.passed, band(r.verdict)


def not_fail(r) -> tuple[bool, Margins]:
    """Not a fail: minus the largest clearance of a counted series (transients left out)."""
    v = r.verdict
    s = judged(v)
    return v.status != "fail", {"not_fail": -float(clearance(s[s["status"] != "transient"]).max()),
                                **band(v)}


def fails(r) -> tuple[bool, Margins]:
    v = r.verdict
    return v.status == "fail", clears(v, lambda s: s["status"] == "fail")


KNOWN = {
    "mup mlp passes": Case("pass", lambda k: run(mlp, MLP_WIDTHS, k, data=gaussian(seed=k)), mup_passes),
    "mup gpt passes": Case("pass", lambda k: run(gpt, GPT_WIDTHS, k, n_seeds=3, data=gpt_data(k)), mup_passes),
    "sp mlp fails": Case("fail", lambda k: run(mlp, MLP_WIDTHS, k, data=gaussian(seed=k), parametrization="sp"),
                         sp_fails),
    "sp gpt fails": Case("fail", lambda k: run(gpt, GPT_WIDTHS, k, data=gpt_data(k), parametrization="sp"),
                         sp_fails),
    "mlp torch adam fails": Case("fail hidden", lambda k: run(mlp, MLP_WIDTHS, k, data=gaussian(seed=k),
                                                              optimizer=torch_adam, lr=1e-3), torch_adam_mlp_fails),
    "gpt torch adam fails": Case("fail blocks", lambda k: run(gpt, GPT_WIDTHS, k, data=gpt_data(k),
                                                              optimizer=torch_adam), torch_adam_gpt_fails),
    "hand mup passes": Case("pass", lambda k: run(km.build, MLP_WIDTHS, k, **hand(k)), hand_passes),
    "hand no multiplier fails": Case("fail readout", lambda k: run(km.build_no_multiplier, MLP_WIDTHS, k, **hand(k)),
                                     no_multiplier_fails),
    "hand unscaled hidden lr fails": Case("fail hidden.0/1", lambda k: run(km.build_unscaled_hidden_lr, MLP_WIDTHS, k,
                                                                           **hand(k)), unscaled_hidden_lr_fails),
    "sp sgd tiny lr fails via delta": Case("fail delta", lambda k: run(
        mlp, MLP_WIDTHS, k, data=gaussian(seed=k), parametrization="sp", optimizer="sgd", lr=1e-3,
        readout_zero_init=False), sp_sgd_fails_through_delta),
    "mup gpt unstable lr inconclusive": Case("inconclusive", lambda k: run(gpt, GPT_WIDTHS, k, data=gpt_data(k),
                                                                           lr=5e-2, steps=10),
                                             unstable_is_inconclusive),
    "gpt sqrt-d attention fails": Case("fail attention", lambda k: run(sqrt_d_attention, [64, 128, 256, 512], k,
                                                                       n_seeds=3, data=gpt_data(k), steps=10),
                                       sqrt_d_fails),
    "gpt sqrt-d control: no fail, flat scores": Case("not fail", lambda k: run(gpt, [64, 128, 256, 512], k,
                                                                               data=gpt_data(k), steps=10),
                                                     control_holds),
}


def hand(k: int) -> dict:
    return dict(parametrization="none", optimizer=km.make_optimizer, data=gaussian(seed=k), lr=1e-3)


# -- tests/test_public_models.py -----------------------------------------------------------------------------------
def nanogpt(k: int, lr: float, steps: int = 10, n_seeds: int = 3, **kw):
    return coord_check(pm.gpt_builder, [128, 256, 512], parametrization="none", optimizer=pm.configure_optimizers,
                       forward_targets=True, loss="model", output=0, data=tokens(batch_size=4, seq_len=32, seed=k),
                       steps=steps, seeds=seeds(k, n_seeds), base_width=64, progress=False, lr=lr, **kw)


def nanogpt_bug(k: int, **kw):  # the planted bugs: 4 steps, 2 seeds
    return nanogpt(k, 1e-2, steps=4, n_seeds=2, **kw)


def failing_modules(r) -> set[str]:
    return set(failing(r.verdict)["module"])


def nanogpt_sqrt_fails(r) -> tuple[bool, Margins]:
    v = r.verdict
    sdpa = module(lambda m: m.endswith("attn.(sdpa)"))
    ok = (v.status == "fail" and any(m.endswith("attn.(sdpa)") for m in failing_modules(r))
          and "(sdpa)" in v.reason and "1/sqrt(d_head) instead of 1/d_head" in v.reason)
    return bool(ok), {**clears(v, sdpa), **lead(v, diagnosis("1/sqrt(d_head) instead of 1/d_head"))}


def nanogpt_no_mult_fails(r) -> tuple[bool, Margins]:
    v = r.verdict
    ok = v.status == "fail" and "(root)" in failing_modules(r) and "output multiplier is missing" in v.reason
    return bool(ok), {**clears(v, module(lambda m: m == "(root)")), **lead(v, diagnosis("output multiplier"))}


def hidden_lr_fails(r) -> tuple[bool, Margins]:
    v = r.verdict
    ok = v.status == "fail" and "hidden learning rate is not scaled" in v.reason and "MuAdam" not in v.reason
    return bool(ok), {**clears(v, role("hidden")), **lead(v, diagnosis("hidden learning rate is not scaled"))}


def encoder_adam_fails(r) -> tuple[bool, Margins]:
    v = r.verdict
    ok = v.status == "fail" and "hidden learning rate is not scaled" in v.reason
    return ok, {**clears(v, role("hidden")), **lead(v, diagnosis("hidden learning rate is not scaled"))}


def encoder(k: int, n_seeds: int = 6, **kw):
    return coord_check(pm.encoder_builder, [64, 128, 256], parametrization="mup", data=pm.seq_first_tokens(seed=k),
                       base_width=64, lr=1e-2, steps=6, seeds=seeds(k, n_seeds), progress=False, **kw)


def encoder_sqrt_fails(r) -> tuple[bool, Margins]:
    v = r.verdict
    soft = module(lambda m: m.endswith("self_attn.(softmax)"))
    return bool(v.status == "fail" and any(m.endswith("self_attn.(softmax)") for m in failing_modules(r))), \
        clears(v, soft)


def resnet(k: int, parametrization: str):
    return coord_check(pm.resnet_builder, [8, 16, 32], parametrization=parametrization, data=pm.images(seed=k),
                       base_width=8, lr=1e-2, steps=6, seeds=seeds(k, 2), progress=False)


def llama(k: int, steps: int, lr: float = 1e-2, n_seeds: int = 2, **kw):
    return coord_check(pm.llama_builder, [64, 128, 256], parametrization="mup",
                       data=tokens(batch_size=4, seq_len=32, seed=k), base_width=64, lr=lr, seeds=seeds(k, n_seeds),
                       steps=steps, progress=False, **kw)


def llama_sqrt_fails(r) -> tuple[bool, Margins]:
    v, s = r.verdict, r.verdict.series
    bad = s[(s["status"] == "fail") & (s["step"] == 0)]
    want = {"layers.0.attention.(sdpa)", "layers.1.attention.(sdpa)"}
    ok = v.status == "fail" and set(bad["module"]) == want and "do not shrink at initialisation" in v.reason
    sdpa0 = lambda x: x["module"].isin(want) & (x["step"] == 0)  # noqa: E731
    m = {}
    for name in sorted(want):  # each of the two must fail at step 0
        m.update(clears(v, lambda x, n=name: (x["module"] == n) & (x["step"] == 0), name.split(".")[1]))
    step0 = judged(v)
    step0 = step0[(step0["step"] == 0) & ~sdpa0(step0)]
    m["others_step0"] = -float(clearance(step0).max())
    return bool(ok), {**m, **lead(v, lambda x: x["step"] == 0)}


def adam(model, lr):
    return torch.optim.Adam(model.parameters(), lr=lr)


PUBLIC = {
    "nanogpt passes": Case("pass", lambda k: nanogpt(k, 3e-3), passes),
    "nanogpt sqrt-d fails": Case("fail (sdpa)", lambda k: nanogpt_bug(k, attn_scale="sqrt"), nanogpt_sqrt_fails),
    "nanogpt no output mult fails": Case("fail (root)", lambda k: nanogpt_bug(k, output_mult=False),
                                         nanogpt_no_mult_fails),
    "nanogpt hidden lr unscaled fails": Case("fail hidden lr", lambda k: nanogpt_bug(k, scale_hidden_lr=False),
                                             hidden_lr_fails),
    "encoder passes": Case("pass", lambda k: encoder(k), passes),
    "encoder sqrt-d fails": Case("fail (softmax)", lambda k: encoder(k, attn_scale="sqrt"), encoder_sqrt_fails),
    "encoder plain adam fails": Case("fail hidden lr", lambda k: encoder(k, 3, optimizer=adam),
                                     encoder_adam_fails),
    "resnet mup passes": Case("pass", lambda k: resnet(k, "mup"), passes),
    "resnet sp fails": Case("fail", lambda k: resnet(k, "sp"), fails),
    "llama passes": Case("pass", lambda k: llama(k, 6, lr=3e-3, n_seeds=3), passes),
    "llama sqrt-d fails at init": Case("fail (sdpa) step 0", lambda k: llama(k, 2, attn_scale="sqrt"),
                                       llama_sqrt_fails),
}


# -- end-to-end tests that assert a verdict (the CLI's jobs, run through the same engine) -------------------------
def cli_gpt(k: int, **kw):  # test_app TINY: model.n_layer=1 model.context=8 data.batch_size=2 data.seq_len=8
    return coord_check(gpt, [16, 32, 64], n_layer=1, context=8, data=tokens(batch_size=2, seq_len=8, seed=k),
                       seeds=seeds(k, 2), steps=2, base_width=128, progress=False, **kw)


def cli_mlp(k: int, widths, n_seeds, steps, **kw):
    return coord_check(mlp, widths, data=gaussian(seed=k), seeds=seeds(k, n_seeds), steps=steps, base_width=128,
                       progress=False, **kw)


def sp_vs_mup(k: int, parametrization: str):  # +experiment=sp_vs_mup width=64,128,256 steps=2 seeds=1
    return coord_check(gpt, [64, 128, 256], parametrization=parametrization, data=tokens(seed=k), seeds=seeds(k, 1),
                       steps=2, base_width=128, progress=False)


def bf16(k: int, parametrization: str, n_seeds: int = 2):
    return run(gpt, GPT_WIDTHS, k, n_seeds=n_seeds, data=gpt_data(k), parametrization=parametrization,
               precision="bf16", device="cpu")


def bf16_sp_fails(r) -> tuple[bool, Margins]:
    v = r.verdict
    ok = v.status == "fail" and {"hidden", "output"} <= set(failing(v)["role"])
    return bool(ok), {**clears(v, role("hidden"), "hidden"), **clears(v, role("output"), "output")}


END_TO_END = {
    "app tiny gpt sweep does not fail": Case("not fail", lambda k: cli_gpt(k), not_fail),
    "app mlp sweep passes": Case("pass", lambda k: cli_mlp(k, [64, 128, 256], 2, 4), passes),
    "strict mlp passes": Case("pass", lambda k: cli_mlp(k, [32, 64, 128], 2, 3), passes),
    "strict sp mlp fails": Case("fail", lambda k: cli_mlp(k, [32, 64, 128], 2, 3, parametrization="sp"), fails),
    "sp_vs_mup mup does not fail": Case("not fail", lambda k: sp_vs_mup(k, "mup"), not_fail),
    "sp_vs_mup sp fails": Case("fail", lambda k: sp_vs_mup(k, "sp"), fails),
    "bf16 mup gpt passes": Case("pass", lambda k: bf16(k, "mup", n_seeds=3), passes),
    "bf16 sp gpt fails": Case("fail", lambda k: bf16(k, "sp"), bf16_sp_fails),
}


# -- tests/gradflow/test_checks.py ---------------------------------------------------------------------------------
def gradflow_margins(frame: pd.DataFrame) -> Margins:
    """Room of the depth-trend and saturation checks at every probe step (decades; a fraction)."""
    from coordcheck.gradflow import checks as gc

    m = {"grad_trend": math.inf, "blowup": math.inf, "saturation": math.inf}
    for v in gc.step_views(frame):
        trend = gc._grad_trend(v)  # the check's own trend, not a copy
        if trend is not None:
            m["grad_trend"] = min(m["grad_trend"], gc.GRAD_TREND_DECADES - abs(trend[3]))
        a = v.acts[v.acts["role"].isin(gc.TREND_ROLES)]
        act = gc._depth_trend(a["std"], a["layer_index"])
        if act is not None:  # fires when both the per-layer and the total growth pass their bars
            _, slope, decades = act
            m["blowup"] = min(m["blowup"], max(math.log10(gc.ACT_GROWTH_PER_LAYER) - slope,
                                               math.log10(gc.ACT_GROWTH_TOTAL) - decades))
        sat = v.acts["sat_frac"].dropna()
        if len(sat):
            m["saturation"] = min(m["saturation"], gc.SATURATION_FRAC - float(sat.max()))
    return m


def healthy_gpt(k: int, n_layer: int):
    from tests.gradflow.helpers import mup_model
    model, opt = mup_model(functools.partial(gpt, n_layer=n_layer, context=32), 64, seed=k)
    return _probe(model, tokens(seed=k), opt)


def healthy_mlp(k: int):
    from tests.gradflow.helpers import mup_model
    model, opt = mup_model(mlp, 128, seed=k)
    return _probe(model, gaussian(seed=k), opt)


def _probe(model, batch, opt):
    from coordcheck.gradflow import probe_training
    return probe_training(model, batch, optimizer=opt, steps=3)


def no_diagnosis(frame) -> tuple[bool, Margins]:
    from tests.gradflow.helpers import found
    return found(frame) == {}, gradflow_margins(frame)


def deep(k: int, **kw):
    from coordcheck.gradflow import gradflow_once
    from tests.gradflow.gradflow_models import DeepMLP
    torch.manual_seed(k)
    model = DeepMLP(64, depth=12, **kw)
    return gradflow_once(model, gaussian(batch_size=64, dim=16, n_classes=10, seed=k))


def saturates(frame) -> tuple[bool, Margins]:
    from coordcheck.gradflow import checks as gc
    from tests.gradflow.helpers import found
    d = found(frame)
    ok = (list(d) == ["saturation"] and d["saturation"].names[:2] == ("input.act", "blocks.0.act")
          and len(d["saturation"].names) == 12)
    m = gradflow_margins(frame)
    sat = gc.step_views(frame)[0].acts["sat_frac"].dropna()
    return ok, {"min_sat-0.2": float(sat.min()) - gc.SATURATION_FRAC, "grad_trend": m["grad_trend"],
                "blowup": m["blowup"]}


def vanishes(frame) -> tuple[bool, Margins]:
    from tests.gradflow.helpers import found
    d = found(frame)
    ok = list(d) == ["vanishing_gradients"]
    names = d["vanishing_gradients"].names if ok else ()
    ok = ok and names[0] == "blocks.0.fc.weight" and "blocks.10.fc.weight" not in names
    m = gradflow_margins(frame)
    return ok, {"decades-2": -m["grad_trend"], "blowup": m["blowup"], "saturation": m["saturation"]}


def blows_up(frame) -> tuple[bool, Margins]:
    from tests.gradflow.helpers import found
    d = found(frame)
    ok = (list(d) == ["activation_blowup"] and "blocks.10.fc" in d["activation_blowup"].names
          and "init is too large" in d["activation_blowup"].message)
    m = gradflow_margins(frame)
    return ok, {"blowup_fires": -m["blowup"], "grad_trend": m["grad_trend"]}


GRADFLOW = {
    "gradflow healthy mup gpt 2 layers": Case("no diagnosis", lambda k: healthy_gpt(k, 2), no_diagnosis),
    "gradflow healthy mup gpt 6 layers": Case("no diagnosis", lambda k: healthy_gpt(k, 6), no_diagnosis),
    "gradflow healthy mup mlp": Case("no diagnosis", healthy_mlp, no_diagnosis),
    "gradflow deep tanh saturates": Case("saturation", lambda k: deep(k, activation="tanh", init_scale=3.0),
                                         saturates),
    "gradflow deep sigmoid vanishes": Case("vanishing", lambda k: deep(k, activation="sigmoid", init_scale=1.0),
                                           vanishes),
    "gradflow deep relu blows up": Case("blowup", lambda k: deep(k, activation="relu", init_scale=3.0), blows_up),
    "gradflow deep linear blows up": Case("blowup", lambda k: deep(k, activation="linear", init_scale=3.0), blows_up),
}

GROUPS = {"known": KNOWN, "public": PUBLIC, "end_to_end": END_TO_END, "gradflow": GRADFLOW}
CASES: dict[str, Case] = {n: c for g in GROUPS.values() for n, c in g.items()}


def measure(name: str, case: Case, sets: int) -> dict:
    outcomes, margins, seconds = [], [], []
    for k in range(sets):
        t0 = time.perf_counter()
        result = case.run(k)
        ok, m = case.check(result)
        seconds.append(time.perf_counter() - t0)
        outcomes.append(ok)
        margins.append(m)
        status = result.verdict.status if hasattr(result, "verdict") else ""
        print(f"  {name} [set {k}] ok={ok} {status} " + " ".join(f"{n}={x:+.2f}" for n, x in m.items()), flush=True)
    worst = {n: min(m[n] for m in margins) for n in margins[0]}
    return {"case": name, "asserted": case.asserted, "held": f"{sum(outcomes)}/{sets}",
            "smallest margins": ", ".join(f"{n} {x:+.2f}" for n, x in worst.items()),
            "s/set": f"{np.mean(seconds):.1f}"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("only", nargs="*", help="run the cases whose name contains one of these")
    parser.add_argument("--sets", type=int, default=5, help="seed sets per case (set 0 is the test as written)")
    parser.add_argument("--group", choices=sorted(GROUPS), help="only this test file's cases")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    cases = GROUPS[args.group] if args.group else CASES
    rows = [measure(n, c, args.sets) for n, c in cases.items() if not args.only or any(o in n for o in args.only)]
    print("| " + " | ".join(rows[0]) + " |\n|" + "---|" * len(rows[0]))
    for r in rows:
        print("| " + " | ".join(r.values()) + " |")


if __name__ == "__main__":
    main()
