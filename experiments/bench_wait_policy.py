"""OpenMP's wait policy on a shared machine: why tests/conftest.py sets OMP_WAIT_POLICY=PASSIVE.

A tiny GPT coordinate check (widths 64-256, 4 steps, 2 seeds, 2 torch threads) in fresh processes: alone, and as two
copies at once (a second test run on the same 2 cores), with OpenMP's default policy (workers spin while they wait)
and with PASSIVE (they sleep). Prints each wall time (median of the repeats) and the ratio default / passive, and
checks that both policies give the same frame (hash). About a minute on 2 cores.

    python experiments/bench_wait_policy.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

CASE = """
import hashlib, torch
from coordcheck import coord_check
from coordcheck.setup import models
from coordcheck.setup.data import tokens
torch.set_num_threads(2)
r = coord_check(models.gpt, [64, 128, 256], data=tokens(batch_size=2, seq_len=16), steps=4, seeds=2, progress=False)
print(hashlib.sha256(r.frame["value"].to_numpy().tobytes()).hexdigest()[:16])
"""


def run(copies: int, policy: str | None) -> tuple[float, set[str]]:
    """Start ``copies`` processes at once; the wall time until the last ends, and their frame hashes."""
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    if policy:
        env["OMP_WAIT_POLICY"] = policy
    t = time.perf_counter()
    procs = [subprocess.Popen([sys.executable, "-c", CASE], env=env, stdout=subprocess.PIPE, text=True)
             for _ in range(copies)]
    hashes = {p.communicate()[0].strip() for p in procs}
    return time.perf_counter() - t, hashes


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    hashes: set[str] = set()
    for copies in (1, 2):
        runs: dict[str, list[float]] = {"default": [], "PASSIVE": []}
        for _ in range(args.repeats):
            for policy in runs:  # alternated, so drift in the machine's load hits both alike
                seconds, h = run(copies, None if policy == "default" else policy)
                runs[policy].append(seconds)
                hashes |= h
        times = {policy: statistics.median(r) for policy, r in runs.items()}
        print(f"copies={copies}: default {times['default']:.2f} s, passive {times['PASSIVE']:.2f} s, "
              f"default/passive {times['default'] / times['PASSIVE']:.2f}")
    print(f"frames: {'identical' if len(hashes) == 1 else 'DIFFER'} ({', '.join(sorted(hashes))})")


if __name__ == "__main__":
    main()
