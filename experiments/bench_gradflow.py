"""Benchmark: what one gradient-flow probe step costs on the built-in GPT (width 1024, CPU).

The same model and batch in one process, variants alternating (the order rotates every
repeat), torch threads pinned; prints one ``name: value`` line per figure (medians over
repeats, seconds) and the ratios. One unit of work = zero_grad + forward + backward on the
default fixed batch (4 x 32 tokens) of the muP GPT (MuAdam built, never stepped, so every
repeat measures the same model).

Variants:
  a  forward + backward, no probe
  b  forward + backward + ``probe.step()`` with a GradFlowProbe attached (a probe step: activation
     hooks recording, gradient-order hooks, per-parameter norms, one transfer, tidy rows)
  c  forward + backward + ``probe.step()`` on a watchdog's off step (``every=2``, not a probe
     step: the hooks are attached but idle)

Keep the machine otherwise idle. About a minute on 2 cores:

    python experiments/bench_gradflow.py                 # width 1024, 2 threads, 7 repeats
    python experiments/bench_gradflow.py --width 256 --repeats 5 --threads 1
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

from coordcheck.setup.data import tokens
from coordcheck.gradflow import GradFlowProbe
from coordcheck.setup.models import gpt
from coordcheck.setup.optim import adam
from coordcheck.setup.parametrization import Mup, build_model


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--width", type=int, default=1024)
    p.add_argument("--repeats", type=int, default=7, help="timed repeats per variant (>= 5)")
    p.add_argument("--threads", type=int, default=2, help="torch threads (pinned on purpose)")
    args = p.parse_args()
    torch.set_num_threads(args.threads)

    parametrization = Mup()
    parametrization.prepare(gpt, 128)
    model = build_model(gpt, args.width, 0, parametrization)
    optimizer = adam(model, 0.01, mu=True)
    batch = tokens()
    x, y = batch.inputs, batch.targets

    def fwd_bwd() -> torch.Tensor:
        optimizer.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x).reshape(-1, 256), y.reshape(-1))
        loss.backward()
        return loss

    def bare() -> float:
        t = time.perf_counter()
        fwd_bwd()
        return time.perf_counter() - t

    probe_step_times: list[float] = []
    rows: list[int] = []

    def probed() -> float:
        probe = GradFlowProbe(model, optimizer)  # attach outside the timing, as a loop would once
        t = time.perf_counter()
        loss = fwd_bwd()
        s = time.perf_counter()
        frame = probe.step(loss=loss)
        end = time.perf_counter()
        probe.remove()
        probe_step_times.append(end - s)
        rows.append(len(frame))
        return end - t

    def watchdog_off() -> float:
        probe = GradFlowProbe(model, optimizer, every=2)
        probe.step()  # call 0 was the probe step; the timed call 1 is an off step
        t = time.perf_counter()
        loss = fwd_bwd()
        assert probe.step(loss=loss) is None
        end = time.perf_counter()
        probe.remove()
        return end - t

    variants = {"a": bare, "b": probed, "c": watchdog_off}
    for fn in variants.values():  # warm-up: allocator, first-call costs
        fn()
    times = {k: [] for k in variants}
    order = list(variants)
    for r in range(max(args.repeats, 1)):
        for k in order[r % 3:] + order[:r % 3]:
            times[k].append(variants[k]())
    med = {k: statistics.median(v) for k, v in times.items()}

    print(f"threads: {args.threads}")
    print(f"width: {args.width}")
    print(f"parameters: {sum(p.numel() for p in model.parameters())}")
    print(f"repeats: {args.repeats}")
    print(f"rows_per_probe_step: {rows[-1]}")
    print(f"fwd_bwd_s: {med['a']:.4f}")
    print(f"fwd_bwd_probe_s: {med['b']:.4f}")
    print(f"probe_step_call_s: {statistics.median(probe_step_times[1:]):.4f}")
    print(f"fwd_bwd_watchdog_off_s: {med['c']:.4f}")
    print(f"probe_overhead_ratio: {med['b'] / med['a']:.3f}")
    print(f"watchdog_off_ratio: {med['c'] / med['a']:.3f}")


if __name__ == "__main__":
    main()
