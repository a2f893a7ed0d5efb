"""Benchmark: what the probes cost, measured against bare training and the mup package.

Runs the *same work* in one process, alternating the variants (the order rotates every
repeat), with torch threads pinned, and prints one ``name: value`` line per figure — medians
over repeats and their ratios. One unit of work = every seed of one model at one width:
build (seed, then ``build(width)``, muP base shapes, ``reset_parameters``), MuAdam, the fixed
default batch, ``steps`` updates.

Variants:
  a  bare training, no probes: forward at steps 0..steps, backward + update after each but
     the last (the same forwards and updates as b and c)
  b  coordcheck with its default probes (out + delta; std, l1, rms, mean, absmax)
  c  coordcheck recording only out / l1
  d  ``mup.coord_check.get_coord_data`` on the same models and batch (l1; ``nsteps=steps``:
     it records ``steps`` forwards — mup's t=1..steps — and also runs a last update whose
     result it never measures)
  e  c with ``steps - 1`` updates: the same record as d (forwards before updates 1..steps),
     so ``e / d`` is "never slower than mup for the same record"
  f  b plus each parameter owner's ``in`` and ``own`` (``tensors=CAUSE_TENSORS``: shown beside the verdict)
  g  a plus the facts every sweep measures from the weights alone (coordcheck.record.weights: each parameter's update
     around the optimizer's step at steps 1, 2, 3, 5, 10, the gains of the matrix modules at those forwards), no
     activation probes: ``g / a`` is what the facts cost, inside ``b / a``

Also: peak memory of b vs a (fresh subprocesses), the muP step vs the SP step on the same
model, the per-job start-up cost, and the time to aggregate + fit + plot + report a sweep of
~30k rows. Keep the machine otherwise idle. About 10 minutes on 2 cores with the defaults:

    python experiments/bench_probes.py                 # everything
    python experiments/bench_probes.py --quick         # 2 repeats, widths 256 1024
    python experiments/bench_probes.py --ops           # no timing: aten ops and fresh MiB per forward (seconds)
    python experiments/bench_probes.py --models gpt --widths 256 --depths 2 16 --ratios-only
                                                       # the GPT at 2 and 16 blocks (model names gpt_L2, gpt_L16):
                                                       # the probes' cost ratio must not grow with depth

``--ops`` counts what does not depend on the machine: the aten ops (a ``TorchDispatchMode``) and the
MiB of freshly allocated tensors in one probed forward and ``end_step`` at step 2 (after two
updates: ``delta`` on, the function probe in its steady state), for a, b, c and f.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

T0 = time.perf_counter()
VARIANTS = "abcdefg"


def _rss_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return -1


def startup() -> dict[str, float]:
    """Phases of a job before its first training step, in a fresh process (seconds)."""
    marks = {}
    t = time.perf_counter()

    def mark(name: str) -> None:
        nonlocal t
        now = time.perf_counter()
        marks[name] = now - t
        t = now

    import torch

    mark("import torch")
    import mup  # noqa: F401

    mark("import mup")
    from hydra import compose, initialize_config_dir
    from hydra.utils import instantiate

    from coordcheck.app.config import CONF_DIR

    mark("import hydra + coordcheck")
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        cfg = compose("config", overrides=["width=1024"])
    build, par = instantiate(cfg.model), instantiate(cfg.parametrization)
    opt_factory, batch = instantiate(cfg.optimizer), instantiate(cfg.data)
    mark("compose + instantiate config")
    from coordcheck.setup.parametrization import build_model

    par.prepare(build, cfg.base_width)
    mark("base shapes (meta device)")
    model = build_model(build, 1024, 0, par)
    mark("build + set_base_shapes + reset_parameters (width 1024)")
    opt = opt_factory(model, cfg.lr)
    mark("optimizer construction")
    loss = torch.nn.functional.cross_entropy(model(batch.inputs).flatten(0, 1), batch.targets.flatten())
    loss.backward()
    opt.step()
    mark("first training step (not start-up; first optimizer.step)")
    return marks


def memory_child(variant: str, width: int, steps: int) -> dict[str, float]:
    """Peak RSS of one unit of work in this (fresh) process."""
    import torch

    torch.set_num_threads(1)
    units = Units(steps=steps, seeds=1)
    units.run("gpt", width, "a" if variant == "a" else variant, warm=True)  # warm allocator, imports
    gc.collect()
    before = _rss_kib("VmRSS")
    units.run("gpt", width, variant)
    return {"rss_before_mib": before / 1024, "peak_mib": _rss_kib("VmHWM") / 1024}


class Units:
    """The four variants of one unit of work (one model, one width, every seed)."""

    def __init__(self, steps: int, seeds: int, depths: list[int] | None = None):
        import functools

        import torch

        from coordcheck.setup.data import gaussian, tokens
        from coordcheck.setup.models import gpt, mlp

        self.torch = torch
        self.steps, self.seeds = steps, list(range(seeds))
        self.builders = {"gpt": gpt, "mlp": mlp}
        self.batches = {"gpt": tokens(), "mlp": gaussian()}
        for depth in depths or []:  # the GPT at other depths: gpt_L<depth>
            self.builders[f"gpt_L{depth}"] = functools.partial(gpt, n_layer=depth)
            self.batches[f"gpt_L{depth}"] = self.batches["gpt"]
        self.frames = {}

    def _model(self, name: str, width: int, seed: int, par):
        from coordcheck.setup.parametrization import build_model

        return build_model(self.builders[name], width, seed, par)

    def run(self, name: str, width: int, variant: str, warm: bool = False) -> float:
        import mup
        from mup.coord_check import get_coord_data

        from coordcheck.setup.optim import adam
        from coordcheck.core.frame import CAUSE_TENSORS
        from coordcheck.setup.parametrization import Mup
        from coordcheck.run.train import RunIdentity, cross_entropy, run_width

        batch = self.batches[name]
        gc.collect()
        t = time.perf_counter()
        par = Mup()
        if variant in ("a", "g"):
            from coordcheck.record.weights import WeightFacts, measured_steps

            par.prepare(self.builders[name], 128)
            for seed in self.seeds:
                model = self._model(name, width, seed, par)
                opt = mup.MuAdam(model.parameters(), lr=1e-2)
                facts = WeightFacts(model, [opt], measured_steps(range(self.steps + 1))) if variant == "g" else None
                if facts is not None:
                    facts.start()
                for step in range(self.steps + 1):
                    if facts is not None:
                        facts.gains.begin(step, facts.measuring_forward(step))
                    loss = cross_entropy(model(batch.inputs), batch.targets)
                    if facts is not None:
                        facts.gains.end()
                        facts.expect(step + 1)
                    if step == self.steps:
                        break
                    opt.zero_grad(set_to_none=True)
                    loss.backward()
                    opt.step()
                loss.item()
                if facts is not None:
                    ident = RunIdentity("bench", name, "mup", "adam", 1e-2, batch.name)
                    facts.frame({}, ident.columns(width=width, seed=seed))  # the one transfer to the host, the rows
                    facts.remove()
        elif variant in ("b", "c", "e", "f"):
            kw = {"b": {}, "f": {"tensors": CAUSE_TENSORS}}.get(variant, {"tensors": ("out",), "stats": ("l1",)})
            ident = RunIdentity("bench", name, "mup", "adam", 1e-2, batch.name)
            frame, _ = run_width(
                self.builders[name], width, seeds=self.seeds, parametrization=par,
                optimizer=lambda m, lr: adam(m, lr, mu=True), lr=1e-2, batch=batch,
                steps=self.steps - (variant == "e"),
                identity=ident, base_width=128, progress=False, **kw,
            )
            if variant == "b" and not warm:
                self.frames[(name, width)] = frame
        else:  # the mup package's own coord check on the same models and batch
            par.prepare(self.builders[name], 128)
            flat = name.startswith("gpt")
            targets = batch.targets.reshape(-1) if flat else batch.targets

            def lazy():
                # get_coord_data seeds before calling this, like coordcheck's contract
                model = self.builders[name](width=width)
                return par.apply(model)

            get_coord_data({width: lazy}, [(batch.inputs, targets)], optimizer="adam", lr=1e-2, mup=True,
                           nsteps=self.steps, nseeds=len(self.seeds), cuda=False, flatten_output=flat,
                           show_progress=False)
        return time.perf_counter() - t


def op_counts(name: str, width: int) -> dict[str, tuple[int, float]]:
    """Per variant (a, b, c, f): aten ops and MiB of fresh tensors in the step-2 forward (and ``end_step``)."""
    import mup
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    from coordcheck.setup.data import gaussian, tokens
    from coordcheck.core.frame import CAUSE_TENSORS
    from coordcheck.setup.models import gpt, mlp
    from coordcheck.setup.parametrization import Mup, build_model
    from coordcheck.record.probes import Probes
    from coordcheck.run.train import cross_entropy

    class Count(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops, self.bytes = 0, 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            self.ops += 1
            held = {t.untyped_storage().data_ptr() for t in (*args, *kwargs.values()) if isinstance(t, torch.Tensor)}
            for t in out if isinstance(out, (tuple, list)) else (out,):
                if isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() not in held:
                    self.bytes += t.untyped_storage().nbytes()  # a new storage: neither a view nor out=
            return out

    if name.startswith("gpt_L"):  # the GPT at another depth (--depths)
        build, batch = functools.partial(gpt, n_layer=int(name[len("gpt_L"):])), tokens()
    else:
        build, batch = {"gpt": (gpt, tokens()), "mlp": (mlp, gaussian())}[name]
    par = Mup()
    par.prepare(build, 128)
    kws = {"a": None, "b": {}, "c": {"tensors": ("out",), "stats": ("l1",)}, "f": {"tensors": CAUSE_TENSORS}}
    counts = {}
    for v, kw in kws.items():
        model = build_model(build, width, 0, par)
        opt = mup.MuAdam(model.parameters(), lr=1e-2)
        probes = None if kw is None else Probes(model, **kw)
        for step in range(3):
            count = Count()
            if probes is not None:
                probes.begin_step(step)
            with count if step == 2 else contextlib.nullcontext():
                loss = cross_entropy(model(batch.inputs), batch.targets)
                if probes is not None:
                    probes.end_step(loss)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        counts[v] = (count.ops, count.bytes / 2**20)
    return counts


def step_time(width: int, repeats: int) -> dict[str, float]:
    """Median time of one training step (forward, backward, update): MuAdam vs torch Adam."""
    import mup
    import torch

    from coordcheck.setup.data import tokens
    from coordcheck.setup.models import gpt
    from coordcheck.setup.parametrization import Mup, Standard, build_model
    from coordcheck.run.train import cross_entropy

    batch = tokens()
    setups = {}
    for name, par, opt_cls in (("mup", Mup(), mup.MuAdam), ("sp", Standard(), torch.optim.Adam)):
        par.prepare(gpt, 128)
        model = build_model(gpt, width, 0, par)
        setups[name] = (model, opt_cls(model.parameters(), lr=1e-3))  # small lr: stays stable
    times = {k: [] for k in setups}
    for r in range(repeats):
        for name in (list(setups) if r % 2 == 0 else list(setups)[::-1]):
            model, opt = setups[name]
            t = time.perf_counter()
            for _ in range(3):
                loss = cross_entropy(model(batch.inputs), batch.targets)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
            loss.item()
            times[name].append((time.perf_counter() - t) / 3)
    return {k: statistics.median(v[1:] if len(v) > 2 else v) for k, v in times.items()}


def report_time(frames: dict, tmp: Path) -> dict[str, float]:
    """Aggregate + slopes + figures + report for a sweep directory, in process and as a command."""
    import pandas as pd

    from coordcheck.core.frame import write_frame
    from coordcheck.report import report_sweep

    rows = 0
    for (name, width), frame in frames.items():
        if name != "gpt":
            continue
        write_frame(frame, tmp / f"width={width}" / "frame.parquet")
        rows += len(frame)
    t = time.perf_counter()
    report_sweep(tmp)
    inproc = time.perf_counter() - t
    t = time.perf_counter()
    subprocess.run([sys.executable, "-m", "coordcheck.report", str(tmp)], check=True, capture_output=True)
    return {"rows": rows, "in_process_s": inproc, "command_s": time.perf_counter() - t,
            "combined_rows": len(pd.read_parquet(tmp / "report" / "combined.parquet"))}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--widths", type=int, nargs="+", default=[256, 512, 1024])
    p.add_argument("--models", nargs="+", default=["gpt", "mlp"])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--depths", type=int, nargs="+", default=None,
                   help="also time the GPT at these numbers of blocks (models gpt_L<depth>; --models gpt alone then "
                        "means just those)")
    p.add_argument("--ratios-only", action="store_true",
                   help="only the variants' times and ratios (no step, memory, start-up or report figures)")
    p.add_argument("--ops", action="store_true", help="count aten ops and fresh MiB per probed forward; no timing")
    p.add_argument("--_startup", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--_memory", default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args._startup:
        print(json.dumps(startup()))
        return
    if args._memory:
        print(json.dumps(memory_child(args._memory, 1024, args.steps)))
        return
    if args.quick:
        args.repeats, args.widths = 2, [256, 1024]

    import torch

    torch.set_num_threads(args.threads)
    print(f"threads: {args.threads}")
    print(f"torch: {torch.__version__}")
    if args.depths:
        args.models = [m for m in args.models if m != "gpt"] + [f"gpt_L{d}" for d in args.depths]
    if args.ops:
        for name in args.models:
            for width in args.widths:
                counts = op_counts(name, width)
                for v, label in (("a", "bare"), ("b", "default_probes"), ("c", "out_l1"), ("f", "causes_probes")):
                    print(f"{name}_w{width}_{v}_{label}_aten_ops: {counts[v][0]}")
                    print(f"{name}_w{width}_{v}_{label}_fresh_mib: {counts[v][1]:.2f}")
        return
    units = Units(args.steps, args.seeds, args.depths)
    for name in args.models:  # warm-up: imports, allocator, first optimizer (torch._dynamo)
        for v in VARIANTS:
            units.run(name, min(args.widths), v, warm=True)
    times: dict[tuple, list[float]] = {}
    for r in range(args.repeats):
        order = VARIANTS[r % len(VARIANTS):] + VARIANTS[: r % len(VARIANTS)]
        for name in args.models:
            for width in args.widths:
                for v in order:
                    times.setdefault((name, width, v), []).append(units.run(name, width, v))
    med = {k: statistics.median(v) for k, v in times.items()}
    for name in args.models:
        for width in args.widths:
            a, b, c, d, e, f, g = (med[(name, width, v)] for v in VARIANTS)
            print(f"{name}_w{width}_a_bare_s: {a:.3f}")
            print(f"{name}_w{width}_b_default_probes_s: {b:.3f}")
            print(f"{name}_w{width}_c_out_l1_s: {c:.3f}")
            print(f"{name}_w{width}_d_mup_get_coord_data_s: {d:.3f}")
            print(f"{name}_w{width}_ratio_b_over_a: {b / a:.3f}")
            print(f"{name}_w{width}_ratio_c_over_a: {c / a:.3f}")
            print(f"{name}_w{width}_e_out_l1_same_record_as_mup_s: {e:.3f}")
            print(f"{name}_w{width}_ratio_c_over_d: {c / d:.3f}")
            print(f"{name}_w{width}_ratio_e_over_d_same_record: {e / d:.3f}")
            print(f"{name}_w{width}_f_causes_probes_s: {f:.3f}")
            print(f"{name}_w{width}_ratio_f_over_a: {f / a:.3f}")
            print(f"{name}_w{width}_g_bare_plus_facts_s: {g:.3f}")
            print(f"{name}_w{width}_ratio_g_over_a_facts_cost: {g / a:.3f}")
    if args.ratios_only:
        print(f"bench_wall_s: {time.perf_counter() - T0:.0f}")
        return

    st = step_time(1024, args.repeats * 2)
    print(f"gpt_w1024_step_mup_s: {st['mup']:.4f}")
    print(f"gpt_w1024_step_sp_s: {st['sp']:.4f}")
    print(f"gpt_w1024_ratio_mup_step_over_sp_step: {st['mup'] / st['sp']:.3f}")

    mem = {}
    for v in ("a", "b"):
        out = subprocess.run([sys.executable, __file__, "--_memory", v, "--steps", str(args.steps)],
                             check=True, capture_output=True, text=True).stdout
        mem[v] = json.loads(out.strip().splitlines()[-1])
    print(f"gpt_w1024_peak_rss_a_mib: {mem['a']['peak_mib']:.0f}")
    print(f"gpt_w1024_peak_rss_b_mib: {mem['b']['peak_mib']:.0f}")
    print(f"gpt_w1024_ratio_peak_rss_b_over_a: {mem['b']['peak_mib'] / mem['a']['peak_mib']:.3f}")
    grow = {v: mem[v]["peak_mib"] - mem[v]["rss_before_mib"] for v in "ab"}
    print(f"gpt_w1024_peak_growth_during_training_a_mib: {grow['a']:.0f}")
    print(f"gpt_w1024_peak_growth_during_training_b_mib: {grow['b']:.0f}")

    out = subprocess.run([sys.executable, __file__, "--_startup"], check=True, capture_output=True, text=True)
    marks = json.loads(out.stdout.strip().splitlines()[-1])
    total = 0.0
    for k, v in marks.items():
        print(f"startup_{k.split(' (')[0].replace(' ', '_').replace('+', 'and')}_s: {v:.3f}")
        if not k.startswith("first training step"):
            total += v
    print(f"startup_total_before_first_step_s: {total:.3f}")

    if ("gpt", 128) not in units.frames:
        units.run("gpt", 128, "b")
    with tempfile.TemporaryDirectory() as tmp:
        rt = report_time(units.frames, Path(tmp))
    print(f"report_rows: {rt['rows']}")
    print(f"report_in_process_s: {rt['in_process_s']:.2f}")
    print(f"report_command_s: {rt['command_s']:.2f}")
    print(f"bench_wall_s: {time.perf_counter() - T0:.0f}")


if __name__ == "__main__":
    os.environ.setdefault("MPLBACKEND", "Agg")
    main()
