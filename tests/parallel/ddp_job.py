"""Run under torchrun by tests/parallel/test_ddp.py: the coordinate check of a small model with parallel=ddp; rank 0
writes the frame to argv[1] (every rank checks it got the same one)."""

import sys

import torch

from coordcheck import coord_check
from parallel_models import BATCH, SETTINGS, build

if __name__ == "__main__":
    torch.set_num_threads(1)
    result = coord_check(build, data=BATCH(), parallel="ddp", **SETTINGS)
    import torch.distributed as dist

    frames = [None] * dist.get_world_size()
    dist.all_gather_object(frames, result.frame)
    assert all(f.equals(frames[0]) for f in frames), "every process reduces to the same frame"
    if dist.get_rank() == 0:
        result.frame.to_parquet(sys.argv[1])
        print(f"verdict: {result.verdict.status}")
    dist.destroy_process_group()
