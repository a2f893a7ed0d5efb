"""Run under torchrun by tests/parallel/test_ddp.py: coordcheck.record.ranks.StepGather over steps whose buffers
agree, differ in layout, differ in length and outgrow the capacity; every process checks what it got."""

import torch
import torch.distributed as dist

from coordcheck.record.ranks import StepGather

if __name__ == "__main__":
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    gather = StepGather()
    same = gather(torch.arange(5, dtype=torch.float32) + rank, layout=7)  # step 0: headers first, then the buffer
    assert same.shape == (2, 5) and same[1, 0] == 1 and gather.capacity == 21, (same, gather.capacity)
    again = gather(torch.full((9,), float(rank)), layout=123456789)  # one padded gather
    assert again.shape == (2, 9) and (again[1] == 1).all() and (again[0] == 0).all()
    assert gather(torch.ones(4), layout=rank) is None  # another layout on each process: by key
    assert gather(torch.ones(3 + rank), layout=1) is None  # another length
    assert gather(torch.ones(40), layout=1) is None and gather.capacity == 61  # outgrew the capacity: it grows
    grown = gather(torch.ones(40) * rank, layout=1)
    assert grown.shape == (2, 40) and (grown[1] == 1).all()
    if rank == 0:
        print("gather: ok")
    dist.destroy_process_group()
