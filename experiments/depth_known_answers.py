"""The depth known answers measured on the built-in GPT: the issue 18 table on our model.

For each setting (depth scaling, init, learning rate) it runs ``coord_check`` over depths at one width (3 seeds, 10
Adam steps on the default batch) and prints, per setting, the slope against log2(depth) (mean [95% interval] over
seeds) of the residual stream's change since step 0 (``delta`` of the last block's output) at steps 1 / 5 / 10, of its
value at initialisation (``out`` at step 0), and the loss at the last step (mean over seeds) at each depth. Then the
depth verdict of each setting (:func:`coordcheck.judge.depth.judge_depth`).

    PYTHONPATH=. OMP_NUM_THREADS=1 python experiments/depth_known_answers.py --width 128 --depths 2,4,8,16

``--cache DIR`` keeps each setting's frame and facts (pickled) so that a second run only re-judges.
"""

from __future__ import annotations

import argparse
import pickle
import time
from pathlib import Path

import torch

from coordcheck import coord_check
from coordcheck.judge.depth import judge_depth
from coordcheck.setup.models import gpt
from coordcheck.judge.places import RESIDUAL, match_places
from coordcheck.judge.slopes import fit_slopes


def gpt_half(width: int, n_layer: int = 2, base_depth: int | None = None, **kwargs):
    """depth-μP branches (x (L/base_depth)^-1/2) in the model, the learning rate left alone (depth_scaling=none)."""
    return gpt(width, n_layer=n_layer, depth_alpha=0.5, base_depth=base_depth, **kwargs)


def gpt_full(width: int, n_layer: int = 2, base_depth: int | None = None, **kwargs):
    """CompleteP's 1/L branches in the model; under depth_scaling=depth_mup the harness gives the blocks depth-μP's
    lr x (L/base_depth)^-1/2: updates too small for these branches (they vanish with depth)."""
    return gpt(width, n_layer=n_layer, depth_alpha=1.0, base_depth=base_depth, **kwargs)


# name -> (builder, depth_scaling, lr, builder keywords)
SETTINGS = {
    "no depth scaling (fan_in init), lr 1e-2": (gpt, "none", 1e-2, {"residual_init": "fan_in"}),
    "no depth scaling (fan_in init), lr 1e-3": (gpt, "none", 1e-3, {"residual_init": "fan_in"}),
    "depth-μP (depth_scaling=depth_mup), lr 1e-2": (gpt, "depth_mup", 1e-2, {}),
    "CompleteP (depth_scaling=completep), lr 1e-2": (gpt, "completep", 1e-2, {}),
    "CompleteP (depth_scaling=completep), lr 1e-3": (gpt, "completep", 1e-3, {}),
    "GPT-2 init 1/sqrt(2L), no multiplier, lr 1e-2": (gpt, "none", 1e-2, {}),
    "GPT-2 init 1/sqrt(2L), no multiplier, lr 1e-3": (gpt, "none", 1e-3, {}),
    "depth-μP branches, lr not depth-scaled, lr 1e-2": (gpt_half, "none", 1e-2, {}),
    "CompleteP branches with depth-μP's lr (too small), lr 1e-2": (gpt_full, "depth_mup", 1e-2, {}),
}


def run(name: str, width: int, depths: list[int], seeds: int, steps: int, cache: Path | None):
    path = cache / (name.split(",")[0].replace(" ", "_").replace("/", "") + f"_{name[-4:]}_w{width}.pkl") \
        if cache else None
    if path is not None and path.exists():
        return pickle.loads(path.read_bytes())
    build, scaling, lr, kwargs = SETTINGS[name]
    t0 = time.perf_counter()
    r = coord_check(build, width=width, depths=depths, depth_scaling=scaling, lr=lr, seeds=seeds, steps=steps,
                    progress=False, data="tokens", **kwargs)
    out = (r.frame, r.facts, time.perf_counter() - t0)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(pickle.dumps(out))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--width", type=int, default=128)
    ap.add_argument("--depths", default="2,4,8,16")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--only", default="", help="run the settings whose name contains this")
    ap.add_argument("--cache", type=Path, default=None)
    args = ap.parse_args()
    torch.set_num_threads(1)
    depths = [int(d) for d in args.depths.split(",")]
    shown = [s for s in (1, 2, 5, args.steps) if s <= args.steps]
    print(f"width {args.width}, depths {args.depths}, {args.seeds} seeds, {args.steps} Adam steps; slope of log2 std "
          f"vs log2 depth [95% CI]")
    print(f"| setting | residual delta, steps {' / '.join(map(str, shown))} | residual out at init | "
          f"loss at step {args.steps} vs depth | verdict | s |")
    print("|---|---|---|---|---|---|")
    reasons = []
    for name in SETTINGS:
        if args.only and args.only not in name:
            continue
        frame, facts, seconds = run(name, args.width, depths, args.seeds, args.steps, args.cache)
        places = match_places(frame)
        keys = ["family_id", "width", "place", "tensor", "stat", "step"]
        s = fit_slopes(places, axis="depth", keys=keys)
        s = s[(s["place"] == RESIDUAL) & (s["stat"] == "std")].set_index(["tensor", "step"])

        def cell(t: str, st: int) -> str:
            r = s.loc[(t, st)]
            if r["all_zero"]:  # the zero-initialised readout: the first update moves nothing inside the blocks
                return "0 (zero readout)"
            return f"{r['slope']:+.2f} [{r['ci_low']:+.2f}, {r['ci_high']:+.2f}]"

        loss = frame[(frame["tensor"] == "loss") & (frame["step"] == args.steps)].groupby("depth")["value"].mean()
        verdict = judge_depth(frame, facts=facts)
        causes = ", ".join(verdict.causes["kind"]) or "none named"
        print(f"| {name} | {' / '.join(cell('delta', st) for st in shown)} | {cell('out', 0)} | "
              f"{' → '.join(f'{v:.2f}' for v in loss.to_numpy())} | {verdict.status} (cause: {causes}) | "
              f"{seconds:.0f} |", flush=True)
        reasons.append(f"{name}: {verdict.reason}")
    print("\nreasons:", *reasons, sep="\n")


if __name__ == "__main__":
    main()
