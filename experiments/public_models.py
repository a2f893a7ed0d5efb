"""The verdict on muP models written the way public repositories write them, correct and buggy.

Models from ``coordcheck.testing.public_models`` (nanoGPT-mup style GPT with a config object,
``(logits, loss)`` output and fused SDPA; a sequence-first encoder ending in ``log_softmax``
with functional attention; a CIFAR ResNet with stages; a LLaMA-style model with blocks in an
``nn.ModuleDict``), each run as a user would run it — the model as written, only harness
options — at the issue's settings (3 seeds, 10 steps, Adam/AdamW lr 1e-2). Prints one line
per case: expected and actual verdict, and the worst judged series (or the module closest to
its band when it passes). About 10 minutes on 2 cores:

    python experiments/public_models.py            # every case
    python experiments/public_models.py gpt        # cases whose name contains "gpt"
    python experiments/public_models.py gpt DIR    # ... and keep each case's frame in DIR/<case>.parquet
"""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

import torch

from coordcheck import CAUSE_TENSORS, coord_check
from coordcheck.setup.data import tokens
from coordcheck.testing import public_models as pm

W_SMALL, W_LARGE = [64, 128, 256, 512], [128, 256, 512, 1024]
RUN = dict(steps=10, seeds=3, lr=1e-2, progress=False, tensors=CAUSE_TENSORS)  # with the causes
GPT = dict(parametrization="none", optimizer=pm.configure_optimizers, forward_targets=True, loss="model", output=0,
           data=tokens(batch_size=4, seq_len=32), **RUN)
ENCODER = dict(parametrization="mup", data=pm.seq_first_tokens(), base_width=64, **RUN)
RESNET = dict(data=pm.images(), base_width=16, **RUN)
LLAMA = dict(parametrization="mup", data=tokens(batch_size=4, seq_len=32), base_width=64, **RUN)


def torch_adam(model, lr):
    return torch.optim.Adam(model.parameters(), lr=lr)


CASES = {
    "gpt (fused SDPA, config, (logits, loss)) 128-1024": ("pass", lambda: coord_check(pm.gpt_builder, W_LARGE, **GPT)),
    "gpt 64-512": ("pass", lambda: coord_check(pm.gpt_builder, W_SMALL, **GPT)),
    "gpt lr 3e-3 128-1024": ("pass", lambda: coord_check(pm.gpt_builder, W_LARGE, **{**GPT, "lr": 3e-3})),
    "gpt attention 1/sqrt(d) lr 3e-3 128-1024": ("fail", lambda: coord_check(pm.gpt_builder, W_LARGE, attn_scale="sqrt",
                                                                             **{**GPT, "lr": 3e-3})),
    "gpt attention 1/sqrt(d) 128-1024": ("fail", lambda: coord_check(pm.gpt_builder, W_LARGE, attn_scale="sqrt",
                                                                     **GPT)),
    "gpt no output multiplier": ("fail", lambda: coord_check(pm.gpt_builder, W_SMALL, output_mult=False, **GPT)),
    "gpt hidden lr unscaled": ("fail", lambda: coord_check(pm.gpt_builder, W_SMALL, scale_hidden_lr=False, **GPT)),
    "encoder (seq-first, log_softmax)": ("pass", lambda: coord_check(pm.encoder_builder, W_SMALL, **ENCODER)),
    "encoder attention 1/sqrt(d)": ("fail", lambda: coord_check(pm.encoder_builder, W_SMALL, attn_scale="sqrt",
                                                                 **ENCODER)),
    "encoder plain Adam (hidden lr unscaled)": ("fail", lambda: coord_check(pm.encoder_builder, W_SMALL,
                                                                             optimizer=torch_adam, **ENCODER)),
    "resnet (stages) muP": ("pass", lambda: coord_check(pm.resnet_builder, [8, 16, 32, 64], parametrization="mup",
                                                         **RESNET)),
    "resnet SP": ("fail", lambda: coord_check(pm.resnet_builder, [8, 16, 32, 64], parametrization="sp", **RESNET)),
    "llama (ModuleDict, SDPA)": ("pass", lambda: coord_check(pm.llama_builder, W_SMALL, **LLAMA)),
    "llama attention 1/sqrt(d)": ("fail", lambda: coord_check(pm.llama_builder, W_SMALL, attn_scale="sqrt", **LLAMA)),
    "llama attention 1/sqrt(d), 30 steps": ("fail", lambda: coord_check(pm.llama_builder, W_SMALL, attn_scale="sqrt",
                                                                        **{**LLAMA, "steps": 30})),
}


def describe(result) -> str:
    """The first cause when there is one (the causes' tensors are recorded), else the worst or closest series."""
    v = result.verdict
    if v.first_cause:
        return f"cause: {v.first_cause}"
    worst = v.worst(1)
    if len(worst):
        w = worst.iloc[0]
        return (f"{w['module']} {w['tensor']} step {w['step']} slope {w['slope']:+.2f} "
                f"[{w['ci_low']:+.2f}, {w['ci_high']:+.2f}]")
    m = v.modules.dropna(subset=["margin"]).sort_values("margin")
    if not len(m):
        return "—"
    w = m.iloc[0]
    return f"closest: {w['module']} {w['tensor']} step {w['step']} slope {w['slope']:+.2f} (margin {w['margin']:+.2f})"


def main(pattern: str = "", save: str | None = None) -> int:
    torch.set_num_threads(2)
    wrong = 0
    for name, (expect, run) in CASES.items():
        if pattern not in name:
            continue
        t0 = time.perf_counter()
        r = run()
        if save:
            Path(save).mkdir(parents=True, exist_ok=True)
            r.frame.to_parquet(Path(save) / (re.sub(r"[^A-Za-z0-9]+", "_", name).strip("_") + ".parquet"))
        ok = r.verdict.status == expect
        wrong += not ok
        transients = int((r.verdict.series["status"] == "transient").sum())
        print(f"{'ok ' if ok else 'BAD'} {name}: expected {expect}, got {r.verdict.status} — {describe(r)}"
              f"{f' ({transients} transient series)' if transients else ''} [{time.perf_counter() - t0:.0f} s]",
              flush=True)
    print(f"public_models_wrong: {wrong}")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
