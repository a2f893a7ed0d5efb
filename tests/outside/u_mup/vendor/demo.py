# [examples/demo.ipynb, cell 3]
import re
from typing import *

# import datasets  # coordcheck
import einops
import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns
from tqdm import tqdm

import torch
from torch import nn, Tensor, tensor
import torch.nn.functional as F

import unit_scaling as uu
import unit_scaling.functional as U

# Config & helpers
torch.backends.cuda.matmul.allow_tf32 = True
torch.backends.cudnn.allow_tf32 = True


# [examples/demo.ipynb, cell 5]
# Model
vocab_size = 256
depth = 4
head_size = 64
mlp_expansion = 2

# Training
n_steps = int(5e3)
warmup_steps = int(1e3)
batch_size = 16
sequence_length = 256
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
compile = True


# [examples/demo.ipynb, cell 7]
# dataset = datasets.load_dataset("Salesforce/wikitext", "wikitext-103-raw-v1", split="train", download_config=datasets.DownloadConfig(disable_tqdm=True))  # coordcheck
# data = torch.frombuffer(bytearray("".join(dataset["text"]), encoding="utf8"), dtype=torch.uint8)  # coordcheck
def batches() -> Iterable[Tensor]:
    for _ in range(n_steps):
        yield torch.stack([
            data[i:i + sequence_length].to(device=device, dtype=torch.long)
            for i in torch.randint(0, len(data) - sequence_length, size=(batch_size,), generator=data_rng)  # coordcheck
        ])


# [examples/demo.ipynb, cell 9]
class SpTransformerLayer(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.attn_norm = nn.LayerNorm(width, elementwise_affine=False)
        self.attn_qkv = nn.Linear(width, 3 * width, bias=False)
        self.attn_out = nn.Linear(width, width, bias=False)

        self.mlp_norm = nn.LayerNorm(width, elementwise_affine=False)
        self.mlp_up = nn.Linear(width, mlp_expansion * width, bias=False)
        self.mlp_gate = nn.Linear(width, mlp_expansion * width, bias=False)
        self.mlp_down = nn.Linear(mlp_expansion * width, width, bias=False)

    def forward(self, input: Tensor) -> Tensor:
        residual = self.attn_norm(input)
        q, k, v = einops.rearrange(self.attn_qkv(residual), "b s (z h d) -> z b h s d", d=head_size, z=3)
        qkv = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        residual = self.attn_out(einops.rearrange(qkv, "b h s d -> b s (h d)"))
        input = input + residual

        residual = self.mlp_norm(input)
        residual = self.mlp_down(self.mlp_up(residual) * F.silu(self.mlp_gate(residual)))
        return input + residual


class SpTransformerDecoder(nn.Sequential):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, width)
        self.layers = nn.Sequential(*(SpTransformerLayer(width) for _ in range(depth)))
        self.final_norm = nn.LayerNorm(width, elementwise_affine=False)
        self.projection = nn.Linear(width, vocab_size, bias=False)

    def loss(self, input_ids: Tensor) -> Tensor:
        logits = self(input_ids).float()
        return F.cross_entropy(
            logits[..., :-1, :].flatten(end_dim=-2), input_ids[..., 1:].flatten()
        )


# [examples/demo.ipynb, cell 13]
class UmupTransformerLayer(nn.Module):
    def __init__(self, width: int, layer_idx: int) -> None:
        super().__init__()
        self.attn_norm = uu.LayerNorm(width)
        self.attn_qkv = uu.Linear(width, 3 * width)
        self.attn_out = uu.Linear(width, width)

        self.mlp_norm = uu.LayerNorm(width)
        self.mlp_up = uu.Linear(width, mlp_expansion * width)
        self.mlp_gate = uu.Linear(width, mlp_expansion * width)
        self.mlp_down = uu.Linear(mlp_expansion * width, width)

        tau_rule = uu.transformer_residual_scaling_rule()
        self.attn_tau = tau_rule(2 * layer_idx, 2 * depth)
        self.mlp_tau = tau_rule(2 * layer_idx + 1, 2 * depth)

    def forward(self, input: Tensor) -> Tensor:
        residual, skip = U.residual_split(input, self.attn_tau)
        residual = self.attn_norm(residual)
        q, k, v = einops.rearrange(self.attn_qkv(residual), "b s (z h d) -> z b h s d", d=head_size, z=3)
        qkv = U.scaled_dot_product_attention(q, k, v, is_causal=True)
        residual = self.attn_out(einops.rearrange(qkv, "b h s d -> b s (h d)"))
        input = U.residual_add(residual, skip, self.attn_tau)

        residual, skip = U.residual_split(input, self.mlp_tau)
        residual = self.mlp_norm(residual)
        residual = self.mlp_down(U.silu_glu(self.mlp_up(residual), self.mlp_gate(residual)))
        return U.residual_add(residual, skip, self.mlp_tau)


class UmupTransformerDecoder(nn.Sequential):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.embedding = uu.Embedding(vocab_size, width)
        self.layers = uu.DepthSequential(*(UmupTransformerLayer(width, i) for i in range(depth)))
        self.final_norm = uu.LayerNorm(width)
        self.projection = uu.LinearReadout(width, vocab_size)

    def loss(self, input_ids: Tensor) -> Tensor:
        logits = self(input_ids).float()
        return U.cross_entropy(
            logits[..., :-1, :].flatten(end_dim=-2), input_ids[..., 1:].flatten()
        )


# [examples/demo.ipynb, cell 19]
def lr_schedule(step: int) -> float:
    if step < warmup_steps:
        return step / warmup_steps
    a = (step - warmup_steps) * torch.pi / (n_steps - warmup_steps)
    return tensor(a).cos().mul(.5).add(.5)


def run_experiment(type_: Literal["SP", "u-μP"], width: int, lr: float) -> List[Dict[str, Any]]:
    if type_ == "u-μP":
        model = UmupTransformerDecoder(width).to(device)
        model = plant_model(model)  # coordcheck
        opt = uu.optim.AdamW(model.parameters(), lr=tensor(lr, dtype=torch.float, device=device))
        plant_optimizer(model, opt)  # coordcheck

    if type_ == "SP":
        model = SpTransformerDecoder(width).to(device)
        opt = torch.optim.AdamW(model.parameters(), lr=tensor(lr, dtype=torch.float, device=device))

    schedule = torch.optim.lr_scheduler.LambdaLR(opt, lr_schedule)
    def run_step(batch: Tensor) -> Tensor:
        opt.zero_grad()
        loss = model.loss(batch)
        loss.backward()
        opt.step()
        schedule.step()
        return loss

    if compile:
        torch.compiler.reset()
        run_step = torch.compile(mode="reduce-overhead")(run_step)

    log = []
    log2lr = torch.tensor(lr).log2().item()
    progress = tqdm(enumerate(batches()), desc=f"{type_:>4}, width={width}, lr=2^{log2lr:<5.0f}")
    rec = recorder(model, opt)  # coordcheck
    for step, batch in progress:
        loss = run_step(batch)
        rec.step()  # coordcheck
        log.append(dict(step=step, loss=loss.item()))
        if (step + 1) % 100 == 0:
            progress.set_postfix_str(f"loss = {loss.item():.2f}")
    rec.close()  # coordcheck
    return pd.DataFrame.from_dict(log).assign(type=type_, width=width, lr=lr)


type_to_lr_range = {
    "SP": [2**n for n in range(-13, -6 + 1)],
    "u-μP": [2**n for n in range(-3, 4 + 1)],
}
# df = pd.concat([  # coordcheck
#     run_experiment(type_=type_, width=width, lr=lr)  # coordcheck
#     for type_, lrs in type_to_lr_range.items()  # coordcheck
#     for width in [128, 512]  # coordcheck
#     for lr in lrs  # coordcheck
# ]).reset_index()  # coordcheck
# df.to_json("demo.results.json")  # coordcheck
