"""What ``assert_mup``'s defaults decide, and how long each takes: ``python experiments/gate_defaults.py``.

The built-in models (mup and the SP control), the hand-written muP MLP and its two planted bugs, the nanoGPT-mup
GPT of ``coordcheck.testing.planted`` correct and with each planted fault; widths 128-512, 5 steps, 3 seeds, the
causes' tensors (``coordcheck.testing.gate``). One line per case: ``name: status, wall and CPU seconds, the
message's first cause`` (pass: none). ``--threads N`` (default 1).
"""

from __future__ import annotations

import argparse
import time

import torch

from coordcheck.setup.models import gpt, mlp
from coordcheck.testing import assert_mup
from coordcheck.testing import known_models as km
from coordcheck.testing import planted as pl

HAND = dict(parametrization="none", optimizer=km.make_optimizer, data="gaussian", base_width=64)
CASES = {
    "gpt mup": (gpt, {}),
    "gpt sp": (gpt, {"parametrization": "sp"}),
    "mlp mup": (mlp, {}),
    "mlp sp": (mlp, {"parametrization": "sp"}),
    "hand-written muP mlp": (km.build, HAND),
    "hand-written, no output multiplier": (km.build_no_multiplier, HAND),
    "hand-written, hidden lr not scaled": (km.build_unscaled_hidden_lr, HAND),
    **{f"planted gpt {fault}": (pl.planted_builder, {**pl.RUN, "data": "tokens", **kw})
       for fault, kw in pl.FAULTS.items()},
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    for name, (build, kw) in CASES.items():
        t, cpu = time.perf_counter(), time.process_time()
        try:
            assert_mup(build, **kw)
            status, first = "pass", ""
        except AssertionError as e:
            lines = str(e).splitlines()
            status, first = "raised", lines[1] if len(lines) > 2 else lines[0]
        print(f"{name}: {status} {time.perf_counter() - t:.1f} s wall {time.process_time() - cpu:.1f} s cpu "
              f"{first[:120]}", flush=True)


if __name__ == "__main__":
    main()
