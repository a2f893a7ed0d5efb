"""GPU benchmark: probe cost against bare training and the mup package, models built on the device.

One process, variants alternating (the order rotates every repeat), medians of ``--repeats``;
prints ``name: value`` lines. One unit of work = one seed of the built-in muP GPT (2 blocks) at one
width: build on the device, MuAdam, the default batch (4x32 tokens), ``--steps`` updates.

  bare      no probes
  default   coordcheck's default probes (out + delta; std, l1, rms, mean, absmax)
  outl1     coordcheck recording out / l1 only
  mup_l1    mup.coord_check.get_coord_data (l1), the model built on the device
  mup_4     get_coord_data with l1, l2, mean, std

Ratios printed: default/bare, outl1/mup_l1, default/mup_4 (the targets of issue 10), peak memory
default/bare at the widest width, building on the CPU and moving vs building on the device, and
the wall time of the default CLI sweep with ``device=cuda`` (its per-width seconds from job.json).

    python experiments/bench_gpu.py                                   # CUDA: widths 1024 4096 8192
    python experiments/bench_gpu.py --device cpu --widths 64 128 --repeats 1 --cli-widths 32 64   # smoke run
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

import torch

ROOT = Path(__file__).resolve().parent.parent
VARIANTS = ("bare", "default", "outl1", "mup_l1", "mup_4")


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class Bench:
    def __init__(self, device: torch.device, steps: int):
        import mup  # noqa: F401

        from coordcheck.setup.data import tokens
        from coordcheck.setup.models import gpt
        from coordcheck.setup.parametrization import Mup

        self.device, self.steps, self.gpt = device, steps, gpt
        self.batch = tokens()
        self.par = Mup()
        self.par.prepare(gpt, 128)

    def build(self, width: int, on_device: bool = True):
        from coordcheck.setup.parametrization import build_model

        if on_device:
            with torch.device(self.device):
                return build_model(self.gpt, width, 0, self.par)
        return build_model(self.gpt, width, 0, self.par).to(self.device)

    def run(self, variant: str, width: int) -> float:
        import mup
        from mup.coord_check import get_coord_data

        from coordcheck.setup.optim import adam
        from coordcheck.run.train import RunIdentity, cross_entropy, run_width

        sync(self.device)
        t = time.perf_counter()
        if variant == "bare":
            model = self.build(width)
            opt = mup.MuAdam(model.parameters(), lr=1e-2)
            x, y = self.batch.inputs.to(self.device), self.batch.targets.to(self.device)
            for step in range(self.steps + 1):
                loss = cross_entropy(model(x), y)
                if step == self.steps:
                    break
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
            loss.item()
        elif variant in ("default", "outl1"):
            kw = {} if variant == "default" else {"tensors": ("out",), "stats": ("l1",)}
            run_width(self.gpt, width, seeds=[0], parametrization=self.par,
                      optimizer=lambda m, lr: adam(m, lr, mu=True),
                      lr=1e-2, batch=self.batch, steps=self.steps, identity=RunIdentity("bench", "gpt", "mup", "adam",
                                                                                         1e-2, "tokens"),
                      base_width=128, progress=False, device=self.device, **kw)
        else:
            fdict = None if variant == "mup_l1" else {
                "l2": lambda x: x.pow(2).mean().sqrt(), "mean": lambda x: x.mean(), "std": lambda x: x.std()}

            def lazy():
                with torch.device(self.device):
                    return self.par.apply(self.gpt(width=width))

            get_coord_data({width: lazy}, [(self.batch.inputs, self.batch.targets.reshape(-1))], optimizer="adam",
                           lr=1e-2, mup=True, nsteps=self.steps, nseeds=1, cuda=self.device.type == "cuda",
                           flatten_output=True, show_progress=False, output_fdict=fdict)
        sync(self.device)
        return time.perf_counter() - t

    def peak_memory(self, variant: str, width: int) -> float:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(self.device)
        self.run(variant, width)
        return torch.cuda.max_memory_allocated(self.device) / 2**20

    def build_time(self, width: int, on_device: bool) -> float:
        sync(self.device)
        t = time.perf_counter()
        model = self.build(width, on_device)
        sync(self.device)
        del model
        return time.perf_counter() - t


def cli_sweep(widths: list[int], device: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        t = time.perf_counter()
        r = subprocess.run([sys.executable, "-m", "coordcheck", f"width={','.join(map(str, widths))}",
                            f"device={device}", "progress=false", f"hydra.sweep.dir={tmp}/s", "--multirun"],
                           cwd=tmp, capture_output=True, text=True,
                           env={**__import__("os").environ, "PYTHONPATH": f"{ROOT}:" + __import__("os").environ.get(
                               "PYTHONPATH", "")})
        print(f"cli_sweep_{device}_wall_s: {time.perf_counter() - t:.1f}")
        print(f"cli_sweep_{device}_exit: {r.returncode}")
        for job in sorted(Path(tmp, "s").glob("*/job.json")):
            meta = json.loads(job.read_text())
            print(f"cli_sweep_{device}_w{meta.get('width')}_job_s: {meta.get('seconds')}")
        if r.returncode:
            print(r.stderr[-1000:], file=sys.stderr)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--widths", type=int, nargs="+", default=[1024, 4096, 8192])
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--no-cli", action="store_true", help="skip the CLI sweep")
    p.add_argument("--cli-widths", type=int, nargs="+", default=[1024, 2048, 4096, 8192])
    args = p.parse_args()
    from coordcheck.setup.device import environment, resolve_device

    device = resolve_device(args.device)
    t0 = time.perf_counter()
    for k, v in environment(device, "fp32").items():
        print(f"env_{k}: {v}")
    bench = Bench(device, args.steps)
    for width in args.widths:
        for v in VARIANTS:  # warm-up: kernels, allocator, mup's lazy imports
            bench.run(v, width)
        times: dict[str, list[float]] = {v: [] for v in VARIANTS}
        for r in range(args.repeats):
            order = VARIANTS[r % len(VARIANTS):] + VARIANTS[:r % len(VARIANTS)]
            for v in order:
                times[v].append(bench.run(v, width))
        med = {v: statistics.median(ts) for v, ts in times.items()}
        for v in VARIANTS:
            print(f"w{width}_{v}_s: {med[v]:.4f}")
        print(f"w{width}_default_over_bare: {med['default'] / med['bare']:.3f}")
        print(f"w{width}_outl1_over_mup_l1: {med['outl1'] / med['mup_l1']:.3f}")
        print(f"w{width}_default_over_mup_4: {med['default'] / med['mup_4']:.3f}")
        print(f"w{width}_mup_4_over_bare: {med['mup_4'] / med['bare']:.3f}")
        if device.type == "cuda":
            print(f"w{width}_build_cpu_then_move_s: {bench.build_time(width, on_device=False):.3f}")
            print(f"w{width}_build_on_device_s: {bench.build_time(width, on_device=True):.3f}")
    if device.type == "cuda":
        widest = max(args.widths)
        bare, default = bench.peak_memory("bare", widest), bench.peak_memory("default", widest)
        print(f"w{widest}_peak_mib_bare: {bare:.0f}")
        print(f"w{widest}_peak_mib_default: {default:.0f}")
        print(f"w{widest}_peak_default_over_bare: {default / bare:.3f}")
    if not args.no_cli:
        cli_sweep(args.cli_widths, str(device))
    print(f"total_s: {time.perf_counter() - t0:.1f}")


if __name__ == "__main__":
    main()
