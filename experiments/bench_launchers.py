"""Benchmark: a 3-width sweep with Hydra's basic launcher vs the joblib launcher, same machine.

Runs two sweeps as a user would, in subprocesses, alternating the launchers, and prints
``name: value`` lines: median wall time of each and the speed-up. ``default``: the default
sweep (built-in muP GPT, widths 256, 512, 1024, 3 seeds, 10 steps — one big job dominates);
``many_small``: 12 small MLP jobs (4 widths x 3 learning rates). Basic: one job at a time with all cores (threads=auto);
joblib (``hydra/launcher=parallel``): 2 jobs at once with cores // 2 threads each. It also
checks that both sweeps give the same verdict. Keep the machine otherwise idle:

    python experiments/bench_launchers.py [--repeats 2]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SWEEPS = {
    "default": ["width=256,512,1024", "progress=false", "report.figures=false"],
    "many_small": ["model=mlp", "width=64,128,256,512", "lr=0.001,0.003,0.01", "progress=false",
                   "report.figures=false"],
}
LAUNCHERS = {"basic": [], "joblib": ["hydra/launcher=parallel"]}


def run(sweep: str, launcher: str, sweep_dir: Path) -> tuple[float, str]:
    t = time.perf_counter()
    subprocess.run([sys.executable, "-m", "coordcheck", *SWEEPS[sweep], *LAUNCHERS[launcher],
                    f"hydra.sweep.dir={sweep_dir}", "--multirun"], check=True, capture_output=True)
    wall = time.perf_counter() - t
    return wall, json.loads((sweep_dir / "report" / "report.json").read_text())["status"]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--repeats", type=int, default=2)
    args = p.parse_args()
    for sweep in SWEEPS:
        times: dict[str, list[float]] = {k: [] for k in LAUNCHERS}
        verdicts = set()
        with tempfile.TemporaryDirectory() as tmp:
            for r in range(args.repeats):
                for launcher in (list(LAUNCHERS) if r % 2 == 0 else list(LAUNCHERS)[::-1]):
                    wall, status = run(sweep, launcher, Path(tmp) / f"{launcher}-{r}")
                    times[launcher].append(wall)
                    verdicts.add(status)
        basic, joblib = (statistics.median(times[k]) for k in ("basic", "joblib"))
        print(f"{sweep}_sweep: {' '.join(SWEEPS[sweep])}")
        print(f"{sweep}_basic_launcher_wall_s: {basic:.1f}")
        print(f"{sweep}_joblib_launcher_2_jobs_wall_s: {joblib:.1f}")
        print(f"{sweep}_speedup_joblib_over_basic: {basic / joblib:.2f}")
        print(f"{sweep}_verdicts: {sorted(verdicts)}")


if __name__ == "__main__":
    main()
