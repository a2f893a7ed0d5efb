"""GPU readiness: the probes never synchronise inside hooks; one device-to-host transfer per step.

Skips cleanly without CUDA.
"""

import pytest
import torch

from coordcheck.setup.data import tokens
from coordcheck.setup.models import gpt
from coordcheck.setup.parametrization import Mup, build_model
from coordcheck.record.probes import Probes
from coordcheck.run.train import cross_entropy

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def test_no_sync_in_hooks_and_one_transfer_per_step(monkeypatch):
    par = Mup()
    par.prepare(gpt, 64)
    model = build_model(gpt, 256, 0, par).cuda()
    batch = tokens()
    x, y = batch.inputs.cuda(), batch.targets.cuda()
    probes = Probes(model)
    transfers = []
    real_cpu = torch.Tensor.cpu
    monkeypatch.setattr(torch.Tensor, "cpu",
                        lambda self, *a, **k: transfers.append(self.shape) or real_cpu(self, *a, **k))
    for step in range(3):
        probes.begin_step(step)
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")  # any host sync inside the probed forward raises
        try:
            loss = cross_entropy(model(x), y)
        finally:
            torch.cuda.set_sync_debug_mode(0)
        rec = probes.end_step(loss)
        assert rec.keys and rec.moments.shape[0] == len(rec.keys)
        with torch.no_grad():
            for p in model.parameters():
                p.add_(1e-3 * torch.randn_like(p))
    assert len(transfers) == 3  # exactly one device-to-host copy per step
    probes.remove()


def test_models_are_built_on_the_device_and_the_environment_is_recorded():
    from coordcheck import coord_check

    seen = []

    def build(width):
        model = gpt(width)
        seen.append(next(model.parameters()).device.type)  # built, not moved: already on CUDA here
        return model

    r = coord_check(build, [64, 128], data=tokens(batch_size=2, seq_len=16), steps=2, seeds=1, device="cuda",
                    progress=False)
    assert seen and set(seen) == {"cuda"}
    assert {f["device"] for f in r.facts} == {"cuda"} and all(f["cuda"] for f in r.facts)
    assert r.frame["value"].notna().all()


def test_bf16_and_fp16_on_cuda():
    from coordcheck import coord_check

    for precision in ("bf16", "fp16"):
        r = coord_check(gpt, [64, 128], data=tokens(batch_size=2, seq_len=16), steps=2, seeds=1, device="cuda",
                        precision=precision, progress=False)
        assert r.frame.loc[r.frame.tensor == "loss", "value"].notna().all()


def test_transfer_on_cuda():
    import coordcheck
    from coordcheck.setup import models

    r = coordcheck.transfer(models.gpt, [32, 64], [1e-3, 4e-3, 1.6e-2], steps=3, eval_batches=1, base_width=32,
                            device="cuda", progress=False)
    assert {f["device"] for f in r.facts} == {"cuda"}
