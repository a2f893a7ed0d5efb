"""Benchmark (issue 30): what the probes' cross-process reduction costs a DDP training step, at 2 processes on the CPU.

Run under torchrun; every process runs the same work, alternating the variants over repeats, one torch thread each:

    torchrun --standalone --nproc-per-node 2 experiments/bench_parallel.py            # about a minute on 2 cores
    torchrun --standalone --nproc-per-node 2 experiments/bench_parallel.py --width 512 --steps 20

Variants, on the built-in GPT wrapped in DistributedDataParallel (each process on half of the fixed batch), MuAdam:

  a  bare DDP training: forward, backward (DDP's gradient all-reduce), update — no probes
  b  the same with coordcheck's probes (out, delta; the default statistics) and their one gather per step
  g  the gather alone: one ``all_gather`` of a buffer as b's (a 3-value header, b's packed buffer, padding to
     its length and an eighth: coordcheck.record.ranks.StepGather), per step

Prints, from rank 0: the median seconds per step of each, b / a, and what the gather adds per step (g) against b - a,
with the packed buffer's length and bytes.

What it showed (2026-12-05, 2 cores, an evening when the machine was slower than the morning's runs): width 256 (9
repeats) — bare 32.7 ms, with probes 39.8 ms, b / a 1.26 (1.16-1.44), the gather 1.25 ms; width 1024 — 423 ms,
429 ms, 1.03 (0.95-1.28), 0.88 ms. 52 series, 313 values a process, 1,484 bytes with the header and padding.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.distributed as dist


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, size = dist.get_rank(), dist.get_world_size()

    from mup import MuAdam
    from torch.nn.parallel import DistributedDataParallel

    from coordcheck.record.probes import Probes
    from coordcheck.run.train import cross_entropy
    from coordcheck.setup.data import tokens
    from coordcheck.setup.models import gpt
    from coordcheck.setup.parametrization import Mup, build_model

    batch = tokens()
    b = batch.inputs.shape[0] // size
    inputs, targets = batch.inputs[rank * b:(rank + 1) * b], batch.targets[rank * b:(rank + 1) * b]
    par = Mup()
    par.prepare(gpt, 128)
    length = {}

    def run(probed: bool) -> float:
        model = build_model(gpt, args.width, 0, par, 128)
        ddp = DistributedDataParallel(model)
        opt = MuAdam(model.parameters(), lr=1e-2)
        probes = Probes(model) if probed else None
        dist.barrier()
        t = time.perf_counter()
        for step in range(args.steps + 1):
            if probes is not None:
                probes.begin_step(step)
            loss = cross_entropy(ddp(inputs), targets)
            if probes is not None:
                rec = probes.end_step(loss)
                length["rows"] = len(rec.keys)
            if step < args.steps:
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
        dist.barrier()
        if probes is not None:
            probes.remove()
        return (time.perf_counter() - t) / (args.steps + 1)

    def gather_only(n: int) -> float:
        flat = torch.zeros(3 + n + n // 8 + 16)  # the header, the buffer, its padding to the capacity (StepGather)
        dist.barrier()
        t = time.perf_counter()
        for _ in range(args.steps + 1):
            out = [torch.empty_like(flat) for _ in range(size)]
            dist.all_gather(out, flat)
            torch.stack(out).double().numpy()
        dist.barrier()
        return (time.perf_counter() - t) / (args.steps + 1)

    run(False), run(True)  # warm-up
    n = length["rows"] * 6 + 1  # 5 device moments and a count per series (the default statistics), the loss
    times = {"a": [], "b": [], "g": []}
    for r in range(args.repeats):
        for v in ("ab" if r % 2 == 0 else "ba") + "g":
            times[v].append(gather_only(n) if v == "g" else run(v == "b"))
    if rank == 0:
        med = {v: statistics.median(x) for v, x in times.items()}
        ratios = [b_ / a_ for a_, b_ in zip(times["a"], times["b"])]
        print(f"processes: {size}, GPT width {args.width}, {args.steps} steps, {args.repeats} repeats, 1 thread each")
        padded = 3 + n + n // 8 + 16
        print(f"series per step: {length['rows']}, packed buffer: {n} float32 = {4 * n} bytes per process "
              f"(padded: {4 * padded}), {4 * padded * size} bytes gathered")
        print(f"a bare DDP step: {1e3 * med['a']:.2f} ms")
        print(f"b with probes: {1e3 * med['b']:.2f} ms, b / a = {statistics.median(ratios):.3f} "
              f"({min(ratios):.3f}-{max(ratios):.3f})")
        print(f"g the gather alone: {1e3 * med['g']:.3f} ms per step = {med['g'] / (med['b'] - med['a']):.1%} of "
              f"b - a")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
