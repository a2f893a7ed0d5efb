"""Run under torchrun by tests/test_recorder.py: the hand-written loop of test_recorder, its model sharded by FSDP2
(``fully_shard`` on each layer and the model), each process training on its share of the probe batch;
``coordcheck.record`` on every process, rank 0 writing the run. Each argument ``OUT:WIDTH[:meta]`` is a run (one
launch for all: torchrun's start is most of the time); ``meta``: the model built on the meta device, sharded, then
given its storage and ``init_weights()``, as torchtitan's trainer does."""

import sys
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.fsdp import fully_shard

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import coordcheck  # noqa: E402
from test_recorder import STEPS, MLP, groups, probe_batch  # noqa: E402

def train(out: str, width: int, meta: bool) -> None:
    """One run: the model at ``width`` (built on the meta device, sharded, then initialised when ``meta``: as
    torchtitan's trainer does), each process training on its share of the probe batch, recorded into ``out``."""
    rank, n = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    with torch.device("meta" if meta else "cpu"):
        model = MLP(width)
    for layer in (model.inp, model.hidden, model.head):
        fully_shard(layer)
    fully_shard(model)
    if meta:
        model.to_empty(device="cpu")
        for layer in (model.inp, model.hidden, model.head):
            layer.reset_parameters()
        model.init_weights()
    opt = torch.optim.AdamW(groups(model, 1e-2, width), weight_decay=0.01)
    x, y = probe_batch()
    b = len(x) // n
    xs, ys = x[rank * b:(rank + 1) * b], y[rank * b:(rank + 1) * b]
    with coordcheck.record(model, width=width, out=out, optimizer=opt, batch=(x, y), steps=STEPS) as rec:
        for _ in range(STEPS):
            opt.zero_grad(set_to_none=True)
            F.cross_entropy(model(xs), ys).backward()  # FSDP2 averages the gradients: the whole batch's mean
            opt.step()
            rec.step()


if __name__ == "__main__":
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    for spec in sys.argv[1:]:  # OUT:WIDTH[:meta], one run each, in one launch
        out, width, *mode = spec.split(":")
        train(out, int(width), mode == ["meta"])
    dist.destroy_process_group()
