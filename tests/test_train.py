import pandas as pd
import pytest
import torch
from torch import nn
from mup import set_base_shapes

from coordcheck import coord_check
from coordcheck.setup.data import tokens
from coordcheck.core.errors import CoordCheckError
from coordcheck.core.frame import COLUMNS, DEFAULT_TENSORS, FACT_TENSORS
from coordcheck.setup.models import gpt, mlp


def test_frame_schema_and_content():
    res = coord_check(gpt, [32, 64], seeds=2, steps=2, progress=False, n_layer=1)
    df = res.frame
    assert list(df.columns) == list(COLUMNS)
    assert set(df["width"]) == {32, 64} and set(df["seed"]) == {0, 1} and set(df["step"]) == {0, 1, 2}
    acts = df[~df["tensor"].isin(["loss", *FACT_TENSORS])]
    assert set(FACT_TENSORS) <= set(df["tensor"])  # the weights' facts, beside every sweep's activations
    assert set(acts["stat"]) == {"std", "l1", "rms", "mean", "absmax"}
    assert set(acts["tensor"]) == set(DEFAULT_TENSORS)
    assert acts.loc[acts["tensor"] == "delta", "step"].min() == 1  # delta is 0 by definition at step 0
    assert set(acts["role"]) == {"input", "hidden", "attention", "norm", "output"}
    one = df[(df.tensor == "out") & (df.stat == "std") & (df.width == 32) & (df.seed == 0) & (df.step == 0)]
    assert one["module"].is_unique
    loss = df[df.tensor == "loss"]
    assert len(loss) == 2 * 2 * 3 and (loss["module"] == "(loss)").all()
    assert (df["model"] == "gpt").all() and (df["parametrization"] == "mup").all() and (df["data"] == "tokens").all()
    assert df["config_id"].nunique() == 1


def test_step0_statistics_agree_with_a_direct_forward_pass():
    res = coord_check(gpt, [64], seeds=[3], steps=1, base_width=32, progress=False)
    df = res.frame.set_index(["step", "module", "tensor", "stat"])["value"]
    # rebuild the same model by the seeding contract and run it by hand
    from coordcheck.setup.parametrization import Mup

    p = Mup()
    p.prepare(gpt, 32)
    torch.manual_seed(3)
    model = gpt(64)
    set_base_shapes(model, p._base)
    model.reset_parameters()
    batch = tokens()
    acts = {}
    hooks = [m.register_forward_hook(lambda m, i, o, n=n: acts.__setitem__(n, o.detach()))
             for n, m in model.named_modules() if n]
    logits = model(batch.inputs)
    for h in hooks:
        h.remove()
    for name in ["wte", "blocks.0.attn.c_v", "blocks.1.mlp.act", "blocks.1", "ln_f", "blocks.0.attn.scores"]:
        x = acts[name]
        assert df[0, name, "out", "std"] == pytest.approx(x.std().item(), rel=1e-4, abs=1e-7), name
        assert df[0, name, "out", "l1"] == pytest.approx(x.abs().mean().item(), rel=1e-4, abs=1e-7), name
        assert df[0, name, "out", "absmax"] == pytest.approx(x.abs().max().item(), rel=1e-6), name
    assert df[0, "lm_head", "out", "absmax"] == 0.0  # zero-initialised readout
    assert df[0, "(loss)", "loss", "value"] == pytest.approx(
        torch.nn.functional.cross_entropy(logits.reshape(-1, 256), batch.targets.reshape(-1)).item(), rel=1e-6)


def test_two_runs_give_identical_frames():
    a = coord_check(mlp, [16, 32], seeds=2, steps=3, progress=False).frame
    b = coord_check(mlp, [16, 32], seeds=2, steps=3, progress=False).frame
    pd.testing.assert_frame_equal(a, b)


def test_data_that_does_not_fit_is_one_line():
    x, y = torch.randn(8, 5), torch.randint(0, 10, (8,))  # mlp expects in_dim=32
    with pytest.raises(CoordCheckError, match="data does not fit the model") as e:
        coord_check(mlp, [16], data=(x, y), steps=1, seeds=1, progress=False)
    assert "\n" not in str(e.value)


def test_custom_optimizer_factory_and_loss():
    calls = []

    def factory(model, lr):
        calls.append(lr)
        return torch.optim.SGD(model.parameters(), lr=lr)

    def mse(out, target):
        return (out - target).pow(2).mean()

    def plain(width):  # parametrization="none": the model as given, no base shapes
        return torch.nn.Sequential(torch.nn.Linear(32, width), torch.nn.ReLU(), torch.nn.Linear(width, 10))

    x, y = torch.randn(16, 32), torch.randn(16, 10)
    res = coord_check(plain, [16, 32, 64], parametrization="none", optimizer=factory, lr=0.1, loss=mse,
                      data=(x, y), steps=2, seeds=1, progress=False)
    assert calls == [0.1, 0.1, 0.1]
    assert (res.frame["optimizer"].str.endswith("factory")).all()
    assert (res.frame["parametrization"] == "none").all() and (res.frame["data"] == "custom").all()


def test_divergence_is_recorded_not_raised():
    res = coord_check(mlp, [16], lr=1e30, optimizer="sgd", steps=4, seeds=1, progress=False)
    loss = res.frame[res.frame.tensor == "loss"]
    assert res.facts[0]["diverged"] and res.facts[0]["diverged"][0]["step"] == loss["step"].max()
    assert not pd.Series(loss["value"].iloc[-1:]).map(lambda v: v == v and abs(v) != float("inf")).all()


def test_none_with_mureadout_but_no_base_shapes_says_what_to_do():
    with pytest.raises(CoordCheckError, match="MuReadout.*set_base_shapes"):
        coord_check(mlp, [16], parametrization="none", steps=1, seeds=1, progress=False)


def test_recording_only_out_l1_matches_the_default_l1():
    full = coord_check(mlp, [16, 32], seeds=1, steps=2, progress=False).frame
    small = coord_check(mlp, [16, 32], seeds=1, steps=2, progress=False, tensors=("out",), stats=("l1",)).frame
    acts = small[~small.tensor.isin(["loss", *FACT_TENSORS])]
    assert set(acts["stat"]) == {"l1"} and set(acts["tensor"]) == {"out"}
    ref = full[(full.tensor == "out") & (full.stat == "l1")].reset_index(drop=True)
    pd.testing.assert_series_equal(acts["value"].reset_index(drop=True), ref["value"], rtol=1e-6)
    with pytest.raises(CoordCheckError, match="unknown statistic"):
        coord_check(mlp, [16], seeds=1, steps=1, progress=False, stats=("l3",))


# -- your model as it is: tuple/dict outputs, targets in forward, base_width, grad_clip; errors blamed right --


class DictLM(nn.Module):
    """Returns a dict, takes targets by keyword and reads base_width, as HF-style code does."""

    def __init__(self, width: int, base_width: int):
        super().__init__()
        self.base_width = base_width
        self.fc, self.head = nn.Linear(32, width), nn.Linear(width, 10)

    def forward(self, x, labels=None):
        logits = self.head(torch.relu(self.fc(x))) * (self.base_width / self.fc.out_features)
        loss = None if labels is None else torch.nn.functional.cross_entropy(logits, labels)
        return {"loss": loss, "logits": logits}


def build_dict_lm(width: int, base_width: int = 1) -> DictLM:
    return DictLM(width, base_width)


def test_dict_output_targets_by_keyword_model_loss_and_base_width():
    run = dict(steps=2, seeds=1, progress=False, parametrization="none", data="gaussian", base_width=16)
    r = coord_check(build_dict_lm, [16, 32], output="logits", forward_targets="labels", loss="model", **run)
    root = r.frame[(r.frame["module"] == "(root)") & (r.frame["tensor"] == "out") & (r.frame["stat"] == "std")]
    assert len(root) and root["role"].eq("output").all()  # the selected logits, not the loss
    model = build_dict_lm(32, 16)
    assert model.base_width == 16  # what call_builder passes when the signature has it
    from coordcheck.setup.parametrization import call_builder

    assert call_builder(build_dict_lm, 32, base_width=16).base_width == 16
    with pytest.raises(CoordCheckError, match="output='logit' selects nothing"):
        coord_check(build_dict_lm, [16], output="logit", forward_targets="labels", loss="model", **run)
    with pytest.raises(CoordCheckError, match="loss=model, but the model returned no scalar loss"):
        coord_check(build_dict_lm, [16], output="logits", loss="model", **run)


def test_grad_clip_clips_the_global_norm():
    seen = []

    def factory(model, lr):
        opt = torch.optim.SGD(model.parameters(), lr=lr)
        opt.register_step_pre_hook(lambda o, a, k: seen.append(
            torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in model.parameters()])).item()))
        return opt

    coord_check(mlp, [16], optimizer=factory, grad_clip=1e-3, steps=2, seeds=1, progress=False)
    assert seen and max(seen) <= 1e-3 * (1 + 1e-4)
    with pytest.raises(CoordCheckError, match="grad_clip must be a positive number"):
        coord_check(mlp, [16], grad_clip=-1.0, steps=1, seeds=1, progress=False)


class Broken(nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.inner = nn.Sequential(nn.Linear(32, width))
        self.head = nn.Linear(width, 10)

    def forward(self, x):
        h = self.inner(x)
        return self.head(torch.nn.functional.gelu(h, approximation="tanh"))  # not a keyword gelu takes


class OutOfMemory(nn.Module):
    """Runs out of the device's memory in its first layer (as a CUDA allocation that fails raises it)."""

    def __init__(self, width: int):
        super().__init__()
        self.fc = nn.Linear(32, width)
        self.head = nn.Linear(width, 10)

    def forward(self, x):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")


def test_out_of_memory_in_the_forward_says_so_not_bad_data_nor_the_models_code():
    with pytest.raises(CoordCheckError) as e:
        coord_check(OutOfMemory, [16], parametrization="none", data="gaussian", steps=1, seeds=1, progress=False)
    msg = str(e.value)
    assert msg.startswith("out of memory in the forward (OutOfMemoryError: CUDA out of memory") and "\n" not in msg
    assert "data.batch_size" in msg and "model's own code" not in msg and "does not fit" not in msg


def test_error_inside_the_model_is_a_model_error_not_bad_data():
    with pytest.raises(CoordCheckError) as e:
        coord_check(lambda width: Broken(width), [16], parametrization="none", data="gaussian", steps=1, seeds=1,
                    progress=False)
    msg = str(e.value)
    assert "the model raised an error in (root)" in msg and "TypeError" in msg and "data does not fit" not in msg
    assert "\n" not in msg
