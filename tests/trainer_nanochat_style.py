"""A trainer we did not write, in the shape of nanochat's ``scripts/base_train.py``, recording a coordinate check.

Stage: train (a user's own loop, issue 38). Input: a width and a job directory. Output: that directory, written by
``coordcheck.record`` (``frame.parquet``, ``job.json``); ``python -m coordcheck.report runs/`` judges the widths.

What it keeps of base_train.py (facts, written here in our words): the model at its own init, its own fused Muon +
AdamW optimizer from ``model.setup_optimizer()`` with each group's lr scaled by the model dim as nanochat scales it;
a token stream cut into (B, T + 1) windows, inputs and targets one token apart; gradient accumulation over
:data:`MICRO_BATCHES` micro-batches (each loss divided by their count); a multiplier on each group's ``initial_lr``:
linear warmup, constant, then a linear warmdown to :data:`FINAL_LR_FRAC`; Muon's momentum warmed from 0.85 to 0.95
over 300 updates; the gradients' global norm clipped at :data:`GRAD_CLIP`; ``zero_grad(set_to_none=True)`` after
each update. Left out: distributed processes, autocast, torch.compile, evaluation, checkpoints, logging.

The recorder's part is two lines: the ``with coordcheck.record(...)`` around the loop and ``rec.step()`` after each
``opt.step()``. The model returns its mean cross-entropy when given targets, so the probe forward is
``model(inputs, targets)`` (``forward_targets=True``) and its loss the model's own (``loss="model"``). The base
learning rate is left out on purpose: every group's (nanochat scales them by ``(width / 768)^-0.5``) changes with
width, and the recorder names no run by one of them.
"""

from __future__ import annotations

from pathlib import Path

import torch

import coordcheck
from coordcheck.testing.nanochat_style import build

__all__ = ["train", "FAULTS", "lr_multiplier", "muon_momentum", "token_stream"]

N_LAYER = 2
VOCAB = 256  # the model's default vocabulary: bytes
BATCH, SEQ_LEN = 4, 32  # one micro-batch: (B, T) tokens
MICRO_BATCHES = 2  # gradient accumulation: updates see B * T * 2 tokens
WARMUP_RATIO, WARMDOWN_RATIO, FINAL_LR_FRAC = 0.2, 0.3, 0.0  # of the updates; the lr multiplier's end value
GRAD_CLIP = 1.0
MATRIX_LR = 0.02  # setup_optimizer's (base_train.py's) Muon lr: the one lr the same at every width
SEED = 0
# the model's builder keywords of each variant; None: nanochat's own choices (the model as it is written)
FAULTS: dict[str | None, dict] = {
    None: {"as_written": True},
    # a public pull request's fix: logits times base_width / width, nanochat's lrs (∝ d^-1/2 for AdamW) kept
    "logit_mult": {"as_written": True, "output_mult": True},
    # every muP knob of the model file: the multiplier, lrs constant in width, value embeddings' init constant
    "mup": {},
}


def lr_multiplier(step: int, updates: int) -> float:
    """The factor on each group's ``initial_lr`` at update ``step`` of ``updates``: linear warmup from 1/warmup to
    1, constant, then linear down to :data:`FINAL_LR_FRAC` over the last ``WARMDOWN_RATIO`` of the updates."""
    warmup, warmdown = round(WARMUP_RATIO * updates), round(WARMDOWN_RATIO * updates)
    if step < warmup:
        return (step + 1) / warmup
    if step <= updates - warmdown:
        return 1.0
    left = (updates - step) / warmdown  # 1 at the warmdown's start, toward 0 at its end
    return left + (1 - left) * FINAL_LR_FRAC


def muon_momentum(step: int) -> float:
    """Muon's momentum: 0.85 at the first update, 0.95 from update 300 on."""
    frac = min(step / 300, 1.0)
    return (1 - frac) * 0.85 + frac * 0.95


def token_stream(n: int, seed: int = SEED) -> torch.Tensor:
    """``n`` token ids (int64) from a fixed Markov chain: each token is followed by one of four of its own, so the
    loss can fall below ln(256). The same stream at every width."""
    g = torch.Generator().manual_seed(seed)
    successors = torch.randint(0, VOCAB, (VOCAB, 4), generator=g)  # (vocab, 4)
    choice = torch.randint(0, 4, (n,), generator=g)
    out = torch.empty(n, dtype=torch.long)
    out[0] = 0
    for i in range(1, n):
        out[i] = successors[out[i - 1], choice[i]]
    return out


def windows(stream: torch.Tensor, start: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The micro-batch whose B * T tokens begin at ``start``: inputs (B, T) and targets (B, T), one token on."""
    buf = stream[start:start + BATCH * SEQ_LEN + 1]
    return buf[:-1].view(BATCH, SEQ_LEN), buf[1:].view(BATCH, SEQ_LEN)


def train(width: int, out: Path, *, steps: int = 10, fault: str | None = None) -> None:
    """Train the nanochat-style GPT at ``width`` for ``steps`` updates, recording each into ``out``.

    ``fault``: a key of :data:`FAULTS` (None: the model as nanochat writes it)."""
    if fault not in FAULTS:
        raise ValueError(f"fault must be one of {sorted(map(str, FAULTS))}, got {fault!r}")
    torch.manual_seed(SEED)
    model = build(width, n_layer=N_LAYER, sequence_len=SEQ_LEN, **FAULTS[fault])
    model.train()
    opt = model.setup_optimizer(matrix_lr=MATRIX_LR)  # base_train.py's default lrs; sets each group's initial_lr
    chunk = BATCH * SEQ_LEN
    stream = token_stream(chunk * (steps * MICRO_BATCHES + 1) + 1)
    probe = windows(stream, chunk * steps * MICRO_BATCHES)  # the stream's last window: never trained on
    with coordcheck.record(model, width=width, out=out, optimizer=opt, batch=probe, steps=steps, loss="model",
                           forward_targets=True, model="nanochat-style", seed=SEED) as rec:
        for step in range(steps):
            for micro in range(MICRO_BATCHES):
                x, y = windows(stream, chunk * (step * MICRO_BATCHES + micro))
                loss = model(x, y)  # the mean cross-entropy: a scalar
                (loss / MICRO_BATCHES).backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), GRAD_CLIP)
            lrm = lr_multiplier(step, steps)
            for group in opt.param_groups:
                group["lr"] = group["initial_lr"] * lrm
                if group["kind"] == "muon":
                    group["momentum"] = muon_momentum(step)
            opt.step()
            model.zero_grad(set_to_none=True)
            rec.step()
