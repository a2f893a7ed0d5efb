"""The learning-rate sweep's engine and API: divergence, data sources, bad input (small real runs; its fresh batches:
test_data.py)."""

from __future__ import annotations

import pytest
import torch
from cli_builders import gpt_no_width

import coordcheck
from coordcheck.setup import models
from coordcheck.setup.data import text_stream
from coordcheck.core.errors import CoordCheckError
from coordcheck.setup.optim import adam
from coordcheck.setup.parametrization import Mup
from coordcheck.transfer.frame import COLUMNS, TransferIdentity
from coordcheck.transfer.train import check_data_source, run_cell

IDENTITY = TransferIdentity("cfg", "gpt", "mup", "adam", "text")


def cell(lr, *, data=text_stream, steps=4, seeds=(0,), **kwargs):
    par = Mup()
    return run_cell(models.gpt, 32, lr, seeds=list(seeds), parametrization=par,
                    optimizer=lambda m, lr: adam(m, lr, mu=True), data=data, steps=steps, eval_batches=2,
                    identity=IDENTITY, base_width=32, progress=False, **kwargs)


def test_a_cell_records_train_losses_and_one_heldout_loss_per_seed():
    frame, facts = cell(2.0 ** -7, seeds=(0, 1))
    assert list(frame.columns) == list(COLUMNS)
    assert len(frame) == 2 * (4 + 1)
    held = frame[frame.split == "heldout"]
    assert list(held.seed) == [0, 1] and (held.step == 4).all() and held.loss.notna().all()
    assert (frame.status == "ok").all() and facts["diverged"] == []
    assert frame[frame.split == "train"].groupby("seed").step.apply(list).tolist() == [[0, 1, 2, 3]] * 2


def test_a_diverging_run_stops_early_and_is_recorded_as_diverged():
    frame, facts = cell(30.0, steps=20)
    held = frame[frame.split == "heldout"]
    assert held.status.eq("diverged").all() and held.loss.isna().all()
    assert facts["diverged"] and facts["diverged"][0]["step"] < 19
    assert len(frame[frame.split == "train"]) == facts["diverged"][0]["step"] + 1  # stopped where it diverged


def test_data_source_contract_is_one_line():
    with pytest.raises(CoordCheckError, match=r"accept \(split, seed\)"):
        check_data_source(lambda: iter(()))
    with pytest.raises(CoordCheckError, match="callable"):
        check_data_source([1, 2])

    def short(split, seed):
        yield torch.randint(0, 256, (2, 8)), torch.randint(0, 256, (2, 8))

    with pytest.raises(CoordCheckError, match="ran out of train batches"):
        cell(1e-3, data=short)


def test_a_user_data_callable_works():
    def stream(split, seed):
        g = torch.Generator().manual_seed(seed + (1000 if split == "heldout" else 0))
        while True:
            x = torch.randint(0, 256, (2, 8), generator=g)
            yield x, x.roll(-1, dims=1)

    frame, _ = cell(1e-3, data=stream)
    assert frame.loss.notna().all()


@pytest.mark.parametrize("kwargs, words", [
    ({"lrs": []}, "lrs must be"),
    ({"lrs": [0.01, -1]}, "positive"),
    ({"parametrization": "mu"}, "unknown parametrization"),
    ({"data": "tokens"}, "unknown data"),
    ({"optimizer": "lion"}, "unknown optimizer"),
    ({"device": "tpu"}, "device must be"),
    ({"precision": "fp8"}, "precision must be one of"),
    ({"widths": 64}, "widths must be"),
])
def test_api_bad_input_is_one_line(kwargs, words):
    args = {"widths": [32, 64], "lrs": [1e-3, 1e-2], **kwargs}
    with pytest.raises(CoordCheckError, match=words) as e:
        coordcheck.transfer(models.gpt, progress=False, steps=2, **args)
    assert "\n" not in str(e.value)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on a machine without CUDA")
def test_cuda_without_cuda_is_one_line():
    with pytest.raises(CoordCheckError, match="no CUDA device"):
        coordcheck.transfer(models.gpt, [32, 64], [1e-3], device="cuda", steps=2, progress=False)


def test_api_runs_the_grid_and_the_package_is_the_function(tmp_path):
    import coordcheck.transfer as package

    result = package(models.gpt, [32, 64], [2.0 ** -9, 2.0 ** -7, 2.0 ** -5], parametrization=["mup", "sp"],
                     steps=3, eval_batches=1, base_width=32, progress=False)
    held = result.frame[result.frame.split == "heldout"]
    assert len(held) == 2 * 2 * 3 and set(held.parametrization) == {"mup", "sp"}
    assert held.groupby("parametrization").config_id.nunique().eq(1).all()
    assert len(result.optima) == 4 and list(result.shifts.parametrization) == ["mup", "sp"]
    assert result.verdict.status in ("transfers", "does not transfer", "inconclusive")
    path = result.write(tmp_path, figures=False)
    assert path.read_text().startswith("# Does the learning rate transfer")
    assert held.loss.notna().all()


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_mixed_precision_runs_and_is_recorded(precision):
    frame, facts = cell(2.0 ** -7, precision=precision)
    assert frame.loss.notna().all() and facts["precision"] == precision


def test_divergence_is_relative_to_the_first_loss_even_when_it_is_negative():
    shift = lambda out, y: torch.nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1)) - 10  # noqa: E731
    frame, facts = cell(2.0 ** -9, loss_fn=shift, steps=4)
    assert facts["diverged"] == [] and (frame.loss < 0).all()


def test_a_builder_that_ignores_width_does_not_transfer():
    r = coordcheck.transfer(gpt_no_width, widths=[16, 32, 64], lrs=[2.0 ** -8, 2.0 ** -4], steps=2,
                            seeds=1, eval_batches=1, progress=False)
    n = {f["n_params"] for f in r.facts}
    assert len(n) == 1 and {f["shapes"]["lm_head.weight"][1] for f in r.facts} == {16}
    assert r.verdict.status == "does not transfer" and not r.transfers
    assert r.verdict.reason == (f"mup: the builder ignores `width`: every width (16, 32, 64) built the same "
                                f"{n.pop()}-parameter model — make build(width=...) set the layer sizes")
