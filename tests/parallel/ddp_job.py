"""Run under torchrun by tests/parallel/test_ddp.py: the coordinate check of a small model (argv[4] of
parallel_models.MODELS, default mlp; argv[5] of its VARIANTS, default mup) with parallel=argv[2] (ddp, fsdp,
ddp_unused) on argv[3] (cpu, cuda); rank 0 writes the frame to argv[1] and the parameter audit's learning rates and
stds beside it (every rank checks it got the same frame)."""

import json
import sys

import torch

from coordcheck import coord_check
from parallel_models import MODELS, SETTINGS, VARIANTS

if __name__ == "__main__":
    torch.set_num_threads(1)
    device = sys.argv[3] if len(sys.argv) > 3 else "cpu"  # cuda: NCCL, one GPU a process
    build, batch = MODELS[sys.argv[4] if len(sys.argv) > 4 else "mlp"]
    variant = VARIANTS[sys.argv[5] if len(sys.argv) > 5 else "mup"]
    parallel = sys.argv[2]
    if parallel == "ddp_unused":  # the user's own wrapping: DDP that lets a step leave parameters out (routed experts)
        from torch.nn.parallel import DistributedDataParallel

        parallel = lambda m: DistributedDataParallel(m, find_unused_parameters=True)  # noqa: E731
    result = coord_check(build, data=batch(), parallel=parallel, **{**SETTINGS, **variant, "device": device})
    import torch.distributed as dist

    frames = [None] * dist.get_world_size()
    dist.all_gather_object(frames, result.frame)
    assert all(f.equals(frames[0]) for f in frames), "every process reduces to the same frame"
    if dist.get_rank() == 0:
        result.frame.to_parquet(sys.argv[1])
        audit = {f"{f['width']}/{n}": [p["lr"], p["std"], p["dims"]] for f in result.facts
                 for n, p in f["audit"]["params"].items()}
        with open(sys.argv[1] + ".audit.json", "w") as out:
            json.dump(audit, out)
        with open(sys.argv[1] + ".modules.json", "w") as out:  # what each module computed (its op), by width
            json.dump({str(f["width"]): {n: m["op"] for n, m in f["modules"].items()} for f in result.facts}, out)
        print(f"verdict: {result.verdict.status}")
    dist.destroy_process_group()
