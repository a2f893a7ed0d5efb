"""GPU readiness: the probes never synchronise inside hooks; one device-to-host transfer per step.

Skips cleanly without CUDA.
"""

import pytest
import torch

from coordcheck.data import tokens
from coordcheck.models import gpt
from coordcheck.parametrization import Mup, build_model
from coordcheck.probes import Probes
from coordcheck.train import cross_entropy

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
    monkeypatch.setattr(torch.Tensor, "cpu", lambda self, *a, **k: transfers.append(self.shape) or real_cpu(self, *a, **k))
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
