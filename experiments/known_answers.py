"""The verdict table for the known-answer models (the cases of tests/test_known_answers.py).

Prints one line per case: expected verdict, actual verdict, and the worst judged series
(module, tensor, step, slope). About 2 minutes on 2 cores:

    python experiments/known_answers.py
"""

from __future__ import annotations

import torch

from coordcheck import coord_check
from coordcheck.setup.data import tokens
from coordcheck.setup.models import gpt, mlp
from coordcheck.testing import known_models as km

MLP_W, GPT_W = [64, 128, 256, 512], [64, 128, 256]
RUN = dict(steps=4, seeds=2, progress=False)
GPT_DATA = tokens(batch_size=2, seq_len=16)
HAND = dict(parametrization="none", optimizer=km.make_optimizer, data="gaussian", lr=1e-3, **RUN)


def torch_adam(model, lr):
    return torch.optim.Adam(model.parameters(), lr=lr)


def sqrt_d_attention(width, **kwargs):  # planted bug: q.k / sqrt(d_head)
    return gpt(width, attn_mult=(width // 4) ** 0.5, **kwargs)


CASES = {
    "muP MLP": ("pass", lambda: coord_check(mlp, MLP_W, **RUN)),
    "muP GPT": ("pass", lambda: coord_check(gpt, GPT_W, data=GPT_DATA, **{**RUN, "seeds": 3})),
    "SP MLP (Adam)": ("fail", lambda: coord_check(mlp, MLP_W, parametrization="sp", **RUN)),
    "SP GPT (Adam)": ("fail", lambda: coord_check(gpt, GPT_W, data=GPT_DATA, parametrization="sp", **RUN)),
    "muP MLP shapes + torch Adam": ("fail", lambda: coord_check(mlp, MLP_W, optimizer=torch_adam, lr=1e-3, **RUN)),
    "muP GPT shapes + torch Adam": ("fail", lambda: coord_check(gpt, GPT_W, data=GPT_DATA, optimizer=torch_adam,
                                                                **RUN)),
    "hand-written muP": ("pass", lambda: coord_check(km.build, MLP_W, **HAND)),
    "hand-written, no output multiplier": ("fail", lambda: coord_check(km.build_no_multiplier, MLP_W, **HAND)),
    "hand-written, hidden LR not scaled": ("fail", lambda: coord_check(km.build_unscaled_hidden_lr, MLP_W, **HAND)),
    "SP MLP, SGD lr 1e-3": ("fail", lambda: coord_check(mlp, MLP_W, parametrization="sp", optimizer="sgd", lr=1e-3,
                                                        readout_zero_init=False, **RUN)),
    "GPT, attention 1/sqrt(d) (10 steps, widths 64-512)": ("fail", lambda: coord_check(
        sqrt_d_attention, [64, 128, 256, 512], data=GPT_DATA, steps=10, seeds=3, progress=False)),
    "GPT, attention 1/sqrt(d) (4 steps, widths 128-1024)": ("fail (missed)", lambda: coord_check(
        sqrt_d_attention, [128, 256, 512, 1024], data="tokens", steps=4, seeds=2, progress=False)),
    "muP GPT at lr 5e-2 (unstable)": ("inconclusive", lambda: coord_check(gpt, GPT_W, data=GPT_DATA, lr=5e-2,
                                                                          steps=10, seeds=2, progress=False)),
}


def main() -> None:
    torch.set_num_threads(2)
    print("| case | expected | verdict | worst module | tensor | step | slope |")
    print("|---|---|---|---|---|---|---|")
    for name, (expected, run) in CASES.items():
        v = run().verdict
        s = v.series[v.series["in_window"] & v.series["status"].isin(["pass", "fail", "inconclusive"])]
        s = s[s["status"] == "fail"] if v.status == "fail" else s
        w = s.loc[s["slope"].abs().idxmax()] if s["slope"].notna().any() else None
        cells = [w["module"], w["tensor"], int(w["step"]), f"{w['slope']:+.2f}"] if w is not None else ["-"] * 4
        print(f"| {name} | {expected} | {v.status} | " + " | ".join(str(c) for c in cells) + " |")


if __name__ == "__main__":
    main()
