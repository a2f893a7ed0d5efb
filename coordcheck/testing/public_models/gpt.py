"""muP models written the way public repositories write them, each with planted muP bugs.

The built-in models (``coordcheck.setup.models``) are written for the harness. These are written
in the styles people actually use, with the quirks that come with them (tuple outputs,
sequence-first tensors, fused projections, functional attention, empty shortcut
``Sequential``\\s, blocks in a ``ModuleDict``), so that the harness is tested on what it
will meet. Every model is muP-correct by default; each bug is one keyword away.

* ``gpt_builder(width, base_width=64, **config)`` -> :class:`GPT` (nanoGPT-mup style).
  muP by hand: ``lm_head`` is a plain ``nn.Linear`` with the output multiplier
  ``mup_base_width / n_embd`` applied to the logits, hidden matrices get Adam lr
  ``lr * base / width`` through :func:`configure_optimizers`. ``forward(idx, targets=None)``
  returns ``(logits, loss)``; only the ``targets`` path applies the multiplier (without
  targets it returns the last position's logits, unscaled, as nanoGPT does), and the loss
  uses ``targets.view(-1)`` (contiguous targets needed).
  Bugs: ``attn_scale="sqrt"`` (1/sqrt(d_head) attention), ``output_mult=False`` (no output
  multiplier), ``scale_hidden_lr=False`` (hidden lr not scaled), ``lr_scaled_twice=True``
  (hidden lr scaled by ``(base / width)^2``: the learning rate's optimum moves up with width).
  Run with ``parametrization="none", optimizer=configure_optimizers, forward_targets=True,
  loss="model", output=0, data="tokens"``.
* ``encoder_builder(width, n_layer=2, n_head=4, ntoken=256, attn_scale="mup", **kw)`` ->
  :class:`TransformerModel` (mup examples/Transformer style): ``forward(src)`` with ``src``
  (T, B) returns ``log_softmax`` log-probabilities (T, B, ntoken); attention scores go
  through a functional softmax (no module to hook). Readout ``mup.MuReadout``.
  Bug: ``attn_scale="sqrt"``. Run with ``parametrization="mup", data=seq_first_tokens()``.
* ``resnet_builder(width, num_classes=10, blocks=(1, 1, 1, 1), readout="mu")`` ->
  :class:`ResNet` (kuangliu CIFAR / mup examples style): ``width`` is the stem's channel
  count, stages have ``width, 2w, 4w, 8w`` channels; shortcuts are an empty
  ``nn.Sequential()`` when shapes match. No ``reset_parameters``: PyTorch's default
  (fan-in) conv init plus mup's readout rescaling is the muP init.
  ``readout="linear"`` is a plain ``nn.Linear`` (fine under ``sp``, refused under ``mup``).
  Run with ``parametrization="mup"`` (the fix) or ``"sp"`` (the control that must fail),
  ``data=images()``, a small ``base_width`` (e.g. 16) and widths like 8..64.
* ``llama_builder(width, n_layer=2, n_head=4, vocab_size=256, attn_scale="mup", **kw)`` ->
  :class:`Transformer` (LLaMA style): blocks in ``nn.ModuleDict``, RMSNorm, SwiGLU, rotary
  q/k, ``F.scaled_dot_product_attention``; ``forward(tokens)`` returns logits (B, T, V).
  Bug: ``attn_scale="sqrt"``. Run with ``parametrization="mup", data="tokens"``.

* ``titan_llama_builder(width, head_dim=None, n_heads=None, base_width=128, **kw)`` ->
  :class:`TitanTransformer` (torchtitan / maester style): muP written by hand on a LLaMA —
  ``init_weights()`` with block init ``init_std / sqrt(m)`` (``m = width / base_width``), the
  final hidden state multiplied by ``1/m`` before a plain ``nn.Linear`` output, attention and
  feed-forward matrices at AdamW ``lr / m`` through :func:`titan_mup_optimizer`, and
  ``attn_scale = 1/head_dim`` passed to ``F.scaled_dot_product_attention``. The head dimension
  is **fixed** (``head_dim``, default 128; the number of heads grows with width, as torchtitan
  configs have it) unless ``n_heads`` is given (then the head dimension grows with width).
  ``attn_scale="sqrt"`` (1/sqrt(head_dim)) is a width bug only in the second case. Run with
  ``parametrization="none", optimizer=titan_mup_optimizer, data="tokens"``.

Data: :func:`seq_first_tokens` (T, B) token batches, :func:`images` gaussian images.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import mup
import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = [
    "GPTConfig", "GPT", "configure_optimizers", "gpt_builder",
    "TransformerModel", "encoder_builder", "seq_first_tokens",
    "BasicBlock", "ResNet", "resnet_builder", "images",
    "ModelArgs", "RMSNorm", "Transformer", "llama_builder",
    "TitanModelArgs", "TitanTransformer", "titan_mup_optimizer", "titan_llama_builder",
]


# ---------------------------------------------------------------------------------------
# 1. nanoGPT-mup style: config dataclass, muP by hand, (logits, loss) outputs
# ---------------------------------------------------------------------------------------


@dataclass
class GPTConfig:
    block_size: int = 64
    vocab_size: int = 256
    n_layer: int = 2
    n_head: int = 4
    n_embd: int = 128
    dropout: float = 0.0
    bias: bool = True
    init_std: float = 0.02  # at mup_base_width; hidden matrices get init_std * sqrt(base / width)
    mup_base_width: int = 64
    attn_scale: str = "mup"  # "mup": 1/d_head, "sqrt": 1/sqrt(d_head) (the planted bug)
    output_mult: bool = True  # False = planted bug: logits not multiplied by base / width
    scale_hidden_lr: bool = True  # False = planted bug: hidden matrices keep the full Adam lr
    lr_scaled_twice: bool = False  # True = planted bug: hidden matrices get lr * (base / width)^2

    @property
    def width_mult(self) -> float:
        return self.n_embd / self.mup_base_width


class LayerNorm(nn.Module):
    """LayerNorm with an optional bias (PyTorch's has no ``bias=False`` before 2.1)."""

    def __init__(self, ndim: int, bias: bool):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ndim))
        self.bias = nn.Parameter(torch.zeros(ndim)) if bias else None

    def forward(self, input: Tensor) -> Tensor:
        return F.layer_norm(input, self.weight.shape, self.weight, self.bias, 1e-5)


class CausalSelfAttention(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        assert config.n_embd % config.n_head == 0
        assert config.attn_scale in ("mup", "sqrt"), config.attn_scale
        # key, query, value projections for all heads, in one matrix
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.attn_dropout = nn.Dropout(config.dropout)
        self.resid_dropout = nn.Dropout(config.dropout)
        self.n_head = config.n_head
        self.n_embd = config.n_embd
        self.dropout = config.dropout
        self.attn_scale = config.attn_scale

    def forward(self, x: Tensor) -> Tensor:
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        hs = C // self.n_head
        k = k.view(B, T, self.n_head, hs).transpose(1, 2)  # (B, nh, T, hs)
        q = q.view(B, T, self.n_head, hs).transpose(1, 2)
        v = v.view(B, T, self.n_head, hs).transpose(1, 2)
        # muP: 1/d_head (q.k grows like d_head once q and k correlate); None is torch's 1/sqrt(d_head)
        scale = 1.0 / hs if self.attn_scale == "mup" else None
        y = F.scaled_dot_product_attention(
            q, k, v, attn_mask=None, dropout_p=self.dropout if self.training else 0.0, is_causal=True, scale=scale
        )
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y))


class MLP(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd, bias=config.bias)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd, bias=config.bias)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: Tensor) -> Tensor:
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class Block(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.ln_1 = LayerNorm(config.n_embd, bias=config.bias)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = LayerNorm(config.n_embd, bias=config.bias)
        self.mlp = MLP(config)

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.attn(self.ln_1(x))
        x = x + self.mlp(self.ln_2(x))
        return x


class GPT(nn.Module):
    """nanoGPT with hand-written muP: idx (B, T) [, targets (B, T)] -> (logits, loss)."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        assert config.vocab_size is not None
        assert config.block_size is not None
        self.config = config
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(config.vocab_size, config.n_embd),
            wpe=nn.Embedding(config.block_size, config.n_embd),
            drop=nn.Dropout(config.dropout),
            h=nn.ModuleList([Block(config) for _ in range(config.n_layer)]),
            ln_f=LayerNorm(config.n_embd, bias=config.bias),
        ))
        # not tied to wte, and not a MuReadout: the output multiplier is applied in forward
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.output_mult = 1.0 / config.width_mult if config.output_mult else 1.0
        self.apply(self._init_weights)
        # scaled init of the residual projections, per GPT-2
        for pn, p in self.named_parameters():
            if pn.endswith("c_proj.weight"):
                torch.nn.init.normal_(
                    p, mean=0.0, std=config.init_std / math.sqrt(config.width_mult) / math.sqrt(2 * config.n_layer)
                )

    def _init_weights(self, module: nn.Module) -> None:
        std = self.config.init_std
        if isinstance(module, nn.Linear):
            if module is not self.lm_head:  # hidden: var ~ 1/fan_in; lm_head: output_mult does the 1/width
                std = std / math.sqrt(self.config.width_mult)
            torch.nn.init.normal_(module.weight, mean=0.0, std=std)
            if module.bias is not None:
                torch.nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            torch.nn.init.normal_(module.weight, mean=0.0, std=std)  # input weights: constant std

    def forward(self, idx: Tensor, targets: Tensor | None = None) -> tuple[Tensor, Tensor | None]:
        device = idx.device
        b, t = idx.size()
        assert t <= self.config.block_size, \
            f"Cannot forward sequence of length {t}, block size is only {self.config.block_size}"
        pos = torch.arange(0, t, dtype=torch.long, device=device)  # (t,)

        tok_emb = self.transformer.wte(idx)  # (b, t, n_embd)
        pos_emb = self.transformer.wpe(pos)  # (t, n_embd)
        x = self.transformer.drop(tok_emb + pos_emb)
        for block in self.transformer.h:
            x = block(x)
        x = self.transformer.ln_f(x)

        if targets is not None:
            logits = self.lm_head(x) * self.output_mult  # muP: logits * base / width
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)
        else:
            # inference-time mini-optimization: only the last position (and, as in the wild, no multiplier)
            logits = self.lm_head(x[:, [-1], :])  # (b, 1, vocab)
            loss = None
        return logits, loss


def configure_optimizers(model: GPT, lr: float) -> torch.optim.AdamW:
    """AdamW, nanoGPT groups (decay on 2-D params), muP lr: hidden matrices get ``lr * base / width``.

    Hidden matrices are the 2-D weights inside ``transformer.h`` (c_attn, c_proj, c_fc);
    embeddings, norms, biases and lm_head keep ``lr`` (with Adam and the output multiplier
    in forward, that is muP).
    """
    cfg = model.config
    hidden_lr = lr / cfg.width_mult ** (2 if cfg.lr_scaled_twice else 1) if cfg.scale_hidden_lr else lr
    param_dict = {pn: p for pn, p in model.named_parameters() if p.requires_grad}
    hidden = [p for n, p in param_dict.items() if p.dim() >= 2 and n.startswith("transformer.h.")]
    decay = [p for n, p in param_dict.items() if p.dim() >= 2 and not n.startswith("transformer.h.")]
    nodecay = [p for n, p in param_dict.items() if p.dim() < 2]
    optim_groups = [
        {"params": hidden, "weight_decay": 0.1, "lr": hidden_lr},
        {"params": decay, "weight_decay": 0.1, "lr": lr},
        {"params": nodecay, "weight_decay": 0.0, "lr": lr},
    ]
    return torch.optim.AdamW(optim_groups, lr=lr, betas=(0.9, 0.95))


def gpt_builder(width: int, base_width: int = 64, **kwargs) -> GPT:
    """nanoGPT-mup GPT with ``n_embd=width``; kwargs are :class:`GPTConfig` fields (the bugs too)."""
    return GPT(GPTConfig(n_embd=width, mup_base_width=base_width, **kwargs))


# ---------------------------------------------------------------------------------------
# 2. mup examples/Transformer style: sequence-first, log_softmax output, MuReadout decoder
# ---------------------------------------------------------------------------------------


def _normal_(p: Tensor, std: float) -> Tensor:
    """``mup.init.normal_`` once base shapes are set (std is the base width's), plain normal before."""
    if hasattr(p, "infshape"):
        return mup.init.normal_(p, std=std)
    with torch.no_grad():
        return p.normal_(0.0, std)


class PositionalEncoding(nn.Module):
    """Sinusoidal positions, a buffer (max_len, 1, d_model): added to (T, B, d_model)."""

    def __init__(self, d_model: int, dropout: float = 0.0, max_len: int = 512):
        super().__init__()
        self.dropout = nn.Dropout(p=dropout)
        pe = torch.zeros(max_len, d_model)
        position = torch.arange(0, max_len, dtype=torch.float).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, d_model, 2).float() * (-math.log(10000.0) / d_model))
        pe[:, 0::2] = torch.sin(position * div_term)
        pe[:, 1::2] = torch.cos(position * div_term)
        self.register_buffer("pe", pe.unsqueeze(0).transpose(0, 1))

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.pe[: x.size(0), :]
        return self.dropout(x)


class MultiheadAttention(nn.Module):
    """Hand-written multi-head attention on (T, B, E); scores through a functional softmax."""

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0, attn_mult: float = 1.0,
                 attn_scale: str = "mup"):
        super().__init__()
        assert embed_dim % num_heads == 0, "embed_dim must be divisible by num_heads"
        assert attn_scale in ("mup", "sqrt"), attn_scale
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.head_dim = embed_dim // num_heads
        self.attn_mult = attn_mult
        self.attn_scale = attn_scale
        self.q_proj = nn.Linear(embed_dim, embed_dim)
        self.k_proj = nn.Linear(embed_dim, embed_dim)
        self.v_proj = nn.Linear(embed_dim, embed_dim)
        self.out_proj = nn.Linear(embed_dim, embed_dim)
        self.dropout = dropout

    def forward(self, x: Tensor, attn_mask: Tensor | None = None) -> Tensor:
        tgt_len, bsz, embed_dim = x.size()
        # (T, B, E) -> (B, H, T, D)
        q = self.q_proj(x).view(tgt_len, bsz, self.num_heads, self.head_dim).permute(1, 2, 0, 3)
        k = self.k_proj(x).view(tgt_len, bsz, self.num_heads, self.head_dim).permute(1, 2, 0, 3)
        v = self.v_proj(x).view(tgt_len, bsz, self.num_heads, self.head_dim).permute(1, 2, 0, 3)
        if self.attn_scale == "mup":
            scores = q @ k.transpose(-2, -1) * self.attn_mult / self.head_dim  # muP: 1/d
        else:
            scores = q @ k.transpose(-2, -1) * self.attn_mult / math.sqrt(self.head_dim)
        if attn_mask is not None:
            scores = scores + attn_mask
        attn = torch.softmax(scores, dim=-1)
        attn = F.dropout(attn, p=self.dropout, training=self.training)
        out = (attn @ v).permute(2, 0, 1, 3).reshape(tgt_len, bsz, embed_dim)
        return self.out_proj(out)


class TransformerEncoderLayer(nn.Module):
    """Post-LN encoder layer (PyTorch's default order): norm(x + attn(x)), norm(x + ff(x))."""

    def __init__(self, d_model: int, nhead: int, dim_feedforward: int, dropout: float = 0.0,
                 attn_mult: float = 1.0, attn_scale: str = "mup"):
        super().__init__()
        self.self_attn = MultiheadAttention(d_model, nhead, dropout=dropout, attn_mult=attn_mult, attn_scale=attn_scale)
        self.linear1 = nn.Linear(d_model, dim_feedforward)
        self.dropout = nn.Dropout(dropout)
        self.linear2 = nn.Linear(dim_feedforward, d_model)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)

    def forward(self, src: Tensor, src_mask: Tensor | None = None) -> Tensor:
        src2 = self.self_attn(src, attn_mask=src_mask)
        src = self.norm1(src + self.dropout1(src2))
        src2 = self.linear2(self.dropout(F.relu(self.linear1(src))))
        src = self.norm2(src + self.dropout2(src2))
        return src


class TransformerModel(nn.Module):
    """Word-language-model Transformer in muP: src (T, B) -> log-probabilities (T, B, ntoken)."""

    def __init__(self, ntoken: int, ninp: int, nhead: int, nhid: int, nlayers: int, dropout: float = 0.0,
                 attn_mult: float = 1.0, attn_scale: str = "mup", init_std: float = 0.1, emb_std: float = 0.1):
        super().__init__()
        self.model_type = "Transformer"
        self.src_mask: Tensor | None = None
        self.ninp = ninp
        self.init_std = init_std
        self.emb_std = emb_std
        self.pos_encoder = PositionalEncoding(ninp, dropout)
        self.layers = nn.ModuleList(
            [TransformerEncoderLayer(ninp, nhead, nhid, dropout, attn_mult, attn_scale) for _ in range(nlayers)]
        )
        self.encoder = nn.Embedding(ntoken, ninp)
        # muP: no `* math.sqrt(ninp)` on the embeddings, and a MuReadout decoder
        self.decoder = mup.MuReadout(ninp, ntoken, readout_zero_init=True)
        self.init_weights()

    @staticmethod
    def _generate_square_subsequent_mask(sz: int, device: torch.device | None = None) -> Tensor:
        return torch.triu(torch.full((sz, sz), float("-inf"), device=device), diagonal=1)

    def init_weights(self) -> None:
        """muP init: ``init_std`` is the base width's std; mup.init shrinks it as 1/sqrt(fan_in mult)."""
        _normal_(self.encoder.weight, std=self.emb_std)  # vector-like: constant
        for layer in self.layers:
            attn = layer.self_attn
            for lin in (attn.q_proj, attn.k_proj, attn.v_proj, attn.out_proj, layer.linear1, layer.linear2):
                _normal_(lin.weight, std=self.init_std)  # matrix-like: ~ 1/sqrt(fan_in)
                nn.init.zeros_(lin.bias)
            layer.norm1.reset_parameters()
            layer.norm2.reset_parameters()
        self.decoder.reset_parameters()  # zero readout

    def reset_parameters(self) -> None:
        """What the harness (and mup's examples) call after ``mup.set_base_shapes``."""
        self.init_weights()

    def forward(self, src: Tensor, has_mask: bool = True) -> Tensor:
        if has_mask:
            if self.src_mask is None or self.src_mask.size(0) != len(src) or self.src_mask.device != src.device:
                self.src_mask = self._generate_square_subsequent_mask(len(src), src.device)
        else:
            self.src_mask = None
        src = self.encoder(src)  # (T, B, ninp)
        src = self.pos_encoder(src)
        for layer in self.layers:
            src = layer(src, self.src_mask)
        output = self.decoder(src)
        return F.log_softmax(output, dim=-1)


def encoder_builder(width: int, n_layer: int = 2, n_head: int = 4, ntoken: int = 256, attn_scale: str = "mup",
                    **kw) -> TransformerModel:
    """Sequence-first muP encoder with ``ninp=width`` and ``nhid=4 * width``; kw go to :class:`TransformerModel`."""
    return TransformerModel(ntoken, width, n_head, 4 * width, n_layer, attn_scale=attn_scale, **kw)


def seq_first_tokens(seq_len: int = 16, batch_size: int = 2, vocab_size: int = 256,
                     seed: int = 0) -> tuple[Tensor, Tensor]:
    """Random tokens sequence-first: inputs and next-token targets, both (seq_len, batch_size) int64."""
    g = torch.Generator().manual_seed(seed)
    seq = torch.randint(0, vocab_size, (seq_len + 1, batch_size), generator=g)
    return seq[:-1], seq[1:]


# ---------------------------------------------------------------------------------------
# 3. kuangliu pytorch-cifar / mup examples ResNet: stages, BatchNorm, empty shortcuts
# ---------------------------------------------------------------------------------------


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, in_planes: int, planes: int, stride: int = 1):
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, kernel_size=3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, kernel_size=3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)

        self.shortcut = nn.Sequential()  # empty: the identity, the same tensor object comes back
        if stride != 1 or in_planes != self.expansion * planes:
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_planes, self.expansion * planes, kernel_size=1, stride=stride, bias=False),
                nn.BatchNorm2d(self.expansion * planes),
            )

    def forward(self, x: Tensor) -> Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        out += self.shortcut(x)
        out = F.relu(out)
        return out


class ResNet(nn.Module):
    """CIFAR ResNet with base channels ``width``: images (B, 3, H, W) -> logits (B, num_classes).

    muP: PyTorch's default conv init is already fan-in scaled (hidden convs: var ~ 1/fan_in,
    stem: fan-in 27, constant), so only the readout changes: a ``MuReadout``, whose weights
    ``mup.set_base_shapes`` rescales.
    """

    def __init__(self, block: type[BasicBlock], num_blocks: tuple[int, ...] | list[int], width: int = 64,
                 num_classes: int = 10, readout: str = "mu", readout_zero_init: bool = False):
        super().__init__()
        assert readout in ("mu", "linear"), readout
        self.in_planes = width

        self.conv1 = nn.Conv2d(3, width, kernel_size=3, stride=1, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.layer1 = self._make_layer(block, width, num_blocks[0], stride=1)
        self.layer2 = self._make_layer(block, 2 * width, num_blocks[1], stride=2)
        self.layer3 = self._make_layer(block, 4 * width, num_blocks[2], stride=2)
        self.layer4 = self._make_layer(block, 8 * width, num_blocks[3], stride=2)
        if readout == "mu":
            self.linear = mup.MuReadout(8 * width * block.expansion, num_classes, readout_zero_init=readout_zero_init)
        else:
            self.linear = nn.Linear(8 * width * block.expansion, num_classes)

    def _make_layer(self, block: type[BasicBlock], planes: int, num_blocks: int, stride: int) -> nn.Sequential:
        strides = [stride] + [1] * (num_blocks - 1)
        layers = []
        for stride in strides:
            layers.append(block(self.in_planes, planes, stride))
            self.in_planes = planes * block.expansion
        return nn.Sequential(*layers)

    def forward(self, x: Tensor) -> Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.layer1(out)
        out = self.layer2(out)
        out = self.layer3(out)
        out = self.layer4(out)
        out = F.adaptive_avg_pool2d(out, 1)
        out = out.view(out.size(0), -1)
        out = self.linear(out)
        return out


def resnet_builder(width: int, num_classes: int = 10, blocks: tuple[int, ...] | list[int] = (1, 1, 1, 1),
                   readout: str = "mu", **kw) -> ResNet:
    """ResNet with ``width`` stem channels and ``blocks`` BasicBlocks per stage (ResNet18: (2, 2, 2, 2))."""
    return ResNet(BasicBlock, tuple(blocks), width=width, num_classes=num_classes, readout=readout, **kw)


def images(batch_size: int = 8, size: int = 16, n_classes: int = 10, seed: int = 0) -> tuple[Tensor, Tensor]:
    """Gaussian images (batch_size, 3, size, size) float32 and labels (batch_size,) int64."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(batch_size, 3, size, size, generator=g)
    y = torch.randint(0, n_classes, (batch_size,), generator=g)
    return x, y


# ---------------------------------------------------------------------------------------
# 4. LLaMA style: ModelArgs, RMSNorm, rotary q/k, SwiGLU, blocks in an nn.ModuleDict
# ---------------------------------------------------------------------------------------


@dataclass
class ModelArgs:
    dim: int = 256
    n_layers: int = 2
    n_heads: int = 4
    vocab_size: int = 256
    multiple_of: int = 32  # SwiGLU hidden size rounded up to a multiple of this
    norm_eps: float = 1e-5
    max_seq_len: int = 64
    rope_theta: float = 10000.0
    attn_scale: str = "mup"  # "mup": 1/head_dim, "sqrt": 1/sqrt(head_dim) (the planted bug)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def _norm(self, x: Tensor) -> Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)

    def forward(self, x: Tensor) -> Tensor:
        output = self._norm(x.float()).type_as(x)
        return output * self.weight

    def reset_parameters(self) -> None:
        nn.init.ones_(self.weight)


def precompute_freqs(dim: int, end: int, theta: float = 10000.0) -> tuple[Tensor, Tensor]:
    """cos and sin tables, each (end, dim // 2), for rotary embeddings of head size ``dim``."""
    freqs = 1.0 / (theta ** (torch.arange(0, dim, 2)[: (dim // 2)].float() / dim))
    t = torch.arange(end, dtype=torch.float32)
    freqs = torch.outer(t, freqs)
    return torch.cos(freqs), torch.sin(freqs)


def apply_rotary_emb(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate (B, T, H, D) by position, adjacent pairs as complex numbers (real arithmetic)."""
    x_ = x.float().reshape(*x.shape[:-1], -1, 2)  # (B, T, H, D/2, 2)
    x0, x1 = x_.unbind(-1)
    cos = cos[None, :, None, :]  # (1, T, 1, D/2)
    sin = sin[None, :, None, :]
    out = torch.stack((x0 * cos - x1 * sin, x0 * sin + x1 * cos), dim=-1)
    return out.flatten(3).type_as(x)


class Attention(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        assert args.attn_scale in ("mup", "sqrt"), args.attn_scale
        self.n_heads = args.n_heads
        self.head_dim = args.dim // args.n_heads
        self.attn_scale = args.attn_scale
        self.wq = nn.Linear(args.dim, args.n_heads * self.head_dim, bias=False)
        self.wk = nn.Linear(args.dim, args.n_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(args.dim, args.n_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(args.n_heads * self.head_dim, args.dim, bias=False)

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
        bsz, seqlen, _ = x.shape
        xq, xk, xv = self.wq(x), self.wk(x), self.wv(x)
        xq = xq.view(bsz, seqlen, self.n_heads, self.head_dim)
        xk = xk.view(bsz, seqlen, self.n_heads, self.head_dim)
        xv = xv.view(bsz, seqlen, self.n_heads, self.head_dim)
        xq, xk = apply_rotary_emb(xq, cos, sin), apply_rotary_emb(xk, cos, sin)
        xq, xk, xv = (t.transpose(1, 2) for t in (xq, xk, xv))  # (bs, n_heads, seqlen, head_dim)
        scale = 1.0 / self.head_dim if self.attn_scale == "mup" else None  # None: 1/sqrt(head_dim)
        output = F.scaled_dot_product_attention(xq, xk, xv, is_causal=True, scale=scale)
        output = output.transpose(1, 2).contiguous().view(bsz, seqlen, -1)
        return self.wo(output)


class FeedForward(nn.Module):
    def __init__(self, dim: int, hidden_dim: int, multiple_of: int):
        super().__init__()
        hidden_dim = int(2 * hidden_dim / 3)
        hidden_dim = multiple_of * ((hidden_dim + multiple_of - 1) // multiple_of)
        self.w1 = nn.Linear(dim, hidden_dim, bias=False)
        self.w2 = nn.Linear(hidden_dim, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden_dim, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class TransformerBlock(nn.Module):
    def __init__(self, layer_id: int, args: ModelArgs):
        super().__init__()
        self.layer_id = layer_id
        self.attention = Attention(args)
        self.feed_forward = FeedForward(args.dim, 4 * args.dim, args.multiple_of)
        self.attention_norm = RMSNorm(args.dim, eps=args.norm_eps)
        self.ffn_norm = RMSNorm(args.dim, eps=args.norm_eps)

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
        h = x + self.attention(self.attention_norm(x), cos, sin)
        out = h + self.feed_forward(self.ffn_norm(h))
        return out


class Transformer(nn.Module):
    """LLaMA in muP (mup package): tokens (B, T) -> logits (B, T, vocab_size)."""

    def __init__(self, params: ModelArgs):
        super().__init__()
        assert params.dim % params.n_heads == 0
        self.params = params
        self.vocab_size = params.vocab_size
        self.n_layers = params.n_layers
        self.tok_embeddings = nn.Embedding(params.vocab_size, params.dim)
        self.layers = nn.ModuleDict({str(i): TransformerBlock(i, params) for i in range(params.n_layers)})
        self.norm = RMSNorm(params.dim, eps=params.norm_eps)
        self.output = mup.MuReadout(params.dim, params.vocab_size, bias=False, readout_zero_init=True)
        cos, sin = precompute_freqs(params.dim // params.n_heads, params.max_seq_len, params.rope_theta)
        self.register_buffer("freqs_cos", cos, persistent=False)
        self.register_buffer("freqs_sin", sin, persistent=False)
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """muP init, called again by the harness after ``mup.set_base_shapes``: var 1/fan_in for
        hidden matrices (1/(2 n_layers fan_in) on residual outputs), unit embeddings, zero readout."""
        nn.init.normal_(self.tok_embeddings.weight, std=1.0)
        for layer in self.layers.values():
            for lin in (layer.attention.wq, layer.attention.wk, layer.attention.wv,
                        layer.feed_forward.w1, layer.feed_forward.w3):
                nn.init.normal_(lin.weight, std=lin.in_features ** -0.5)
            for lin in (layer.attention.wo, layer.feed_forward.w2):
                nn.init.normal_(lin.weight, std=(2 * self.n_layers * lin.in_features) ** -0.5)
            layer.attention_norm.reset_parameters()
            layer.ffn_norm.reset_parameters()
        self.norm.reset_parameters()
        self.output.reset_parameters()

    def forward(self, tokens: Tensor) -> Tensor:
        _bsz, seqlen = tokens.shape
        h = self.tok_embeddings(tokens)
        cos, sin = self.freqs_cos[:seqlen], self.freqs_sin[:seqlen]
        for layer in self.layers.values():
            h = layer(h, cos, sin)
        h = self.norm(h)
        return self.output(h).float()


def llama_builder(width: int, n_layer: int = 2, n_head: int = 4, vocab_size: int = 256, attn_scale: str = "mup",
                  **kw) -> Transformer:
    """LLaMA-style muP transformer with ``dim=width``; kw are further :class:`ModelArgs` fields."""
    return Transformer(ModelArgs(dim=width, n_layers=n_layer, n_heads=n_head, vocab_size=vocab_size,
                                 attn_scale=attn_scale, **kw))


# ---------------------------------------------------------------------------------------
# 5. torchtitan / maester style: muP by hand, init_weights(), a fixed head_dim (heads grow)
# ---------------------------------------------------------------------------------------


@dataclass
class TitanModelArgs:
    dim: int = 1024
    n_layers: int = 2
    n_heads: int = 8
    vocab_size: int = 256
    multiple_of: int = 32
    norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    max_seq_len: int = 64
    init_std: float = 0.02  # at the base width; blocks get init_std / sqrt(mup_width_mul)

    # muP, set by the training config as torchtitan-derived trainers do
    enable_mup: bool = True
    mup_input_alpha: float = 1.0
    mup_output_alpha: float = 1.0
    mup_width_mul: float = 1.0  # = dim / base_dim
    attn_scale: str = "mup"  # "mup": 1/head_dim, "sqrt": 1/sqrt(head_dim) (a bug only if head_dim grows with dim)

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_heads


class TitanAttention(nn.Module):
    def __init__(self, model_args: TitanModelArgs):
        super().__init__()
        assert model_args.attn_scale in ("mup", "sqrt"), model_args.attn_scale
        self.n_heads = model_args.n_heads
        self.head_dim = model_args.head_dim
        self.wq = nn.Linear(model_args.dim, self.n_heads * self.head_dim, bias=False)
        self.wk = nn.Linear(model_args.dim, self.n_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(model_args.dim, self.n_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(self.n_heads * self.head_dim, model_args.dim, bias=False)
        mup = model_args.enable_mup and model_args.attn_scale == "mup"
        self.attn_scale = 1.0 / self.head_dim if mup else 1.0 / math.sqrt(self.head_dim)

    def init_weights(self, init_std: float) -> None:
        for linear in (self.wq, self.wk, self.wv, self.wo):
            nn.init.normal_(linear.weight, mean=0.0, std=init_std)

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
        bs, seqlen, _ = x.shape
        # -1 infers n_heads, as tensor-parallel code that shards the heads writes it
        q = self.wq(x).view(bs, seqlen, -1, self.head_dim)
        k = self.wk(x).view(bs, seqlen, -1, self.head_dim)
        v = self.wv(x).view(bs, seqlen, -1, self.head_dim)
        q, k = apply_rotary_emb(q, cos, sin), apply_rotary_emb(k, cos, sin)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # (bs, n_heads, seqlen, head_dim)
        output = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=self.attn_scale)
        output = output.transpose(1, 2).contiguous().view(bs, seqlen, -1)
        return self.wo(output)


class TitanFeedForward(FeedForward):
    """The LLaMA SwiGLU feed-forward above, with torchtitan's explicit ``init_weights``."""

    def init_weights(self, init_std: float) -> None:
        for linear in (self.w1, self.w2, self.w3):
            nn.init.normal_(linear.weight, mean=0.0, std=init_std)


class TitanBlock(nn.Module):
    def __init__(self, layer_id: int, model_args: TitanModelArgs):
        super().__init__()
        self.layer_id = layer_id
        self.attention = TitanAttention(model_args)
        self.feed_forward = TitanFeedForward(model_args.dim, 4 * model_args.dim, model_args.multiple_of)
        self.attention_norm = RMSNorm(model_args.dim, eps=model_args.norm_eps)
        self.ffn_norm = RMSNorm(model_args.dim, eps=model_args.norm_eps)
        # muP: hidden matrices' std shrinks like 1/sqrt(width) (variance 1/fan_in up to the base width's constant)
        scale = math.sqrt(model_args.mup_width_mul) if model_args.enable_mup else 1.0
        self.weight_init_std = model_args.init_std / scale

    def init_weights(self) -> None:
        for norm in (self.attention_norm, self.ffn_norm):
            norm.reset_parameters()
        self.attention.init_weights(self.weight_init_std)
        self.feed_forward.init_weights(self.weight_init_std)

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
        h = x + self.attention(self.attention_norm(x), cos, sin)
        return h + self.feed_forward(self.ffn_norm(h))


class TitanTransformer(nn.Module):
    """A torchtitan-derived LLaMA with muP written by hand: tokens (B, T) -> logits (B, T, vocab_size)."""

    def __init__(self, model_args: TitanModelArgs):
        super().__init__()
        assert model_args.n_heads > 0 and model_args.dim % model_args.n_heads == 0, (model_args.dim,
                                                                                      model_args.n_heads)
        self.model_args = model_args
        self.tok_embeddings = nn.Embedding(model_args.vocab_size, model_args.dim)
        cos, sin = precompute_freqs(model_args.head_dim, model_args.max_seq_len, model_args.rope_theta)
        self.register_buffer("freqs_cos", cos, persistent=False)
        self.register_buffer("freqs_sin", sin, persistent=False)
        self.layers = nn.ModuleDict({str(i): TitanBlock(i, model_args) for i in range(model_args.n_layers)})
        self.norm = RMSNorm(model_args.dim, eps=model_args.norm_eps)
        self.output = nn.Linear(model_args.dim, model_args.vocab_size, bias=False)
        self.init_weights()

    def init_weights(self) -> None:
        """Embeddings and output at ``init_std`` (width-independent), blocks at ``init_std / sqrt(m)``."""
        nn.init.normal_(self.tok_embeddings.weight, std=self.model_args.init_std)
        for layer in self.layers.values():
            layer.init_weights()
        self.norm.reset_parameters()
        nn.init.normal_(self.output.weight, std=self.model_args.init_std)

    def forward(self, tokens: Tensor) -> Tensor:
        args = self.model_args
        h = self.tok_embeddings(tokens)
        if args.enable_mup:
            h = h * args.mup_input_alpha
        seqlen = tokens.shape[1]
        cos, sin = self.freqs_cos[:seqlen], self.freqs_sin[:seqlen]
        for layer in self.layers.values():
            h = layer(h, cos, sin)
        h = self.norm(h)
        if args.enable_mup:  # muP's output multiplier, on h so the readout's output is what is trained on
            h = h * (args.mup_output_alpha / args.mup_width_mul)
        return self.output(h)


def titan_mup_optimizer(model: TitanTransformer, lr: float) -> torch.optim.AdamW:
    """AdamW with muP learning rates: attention and feed-forward matrices at ``lr / m``; embeddings, norms and
    the output at ``lr`` (with the ``1/m`` output multiplier in forward, that is muP for Adam)."""
    args = model.model_args
    m = args.mup_width_mul if args.enable_mup else 1.0
    hidden = [p for layer in model.layers.values() for mod in (layer.attention, layer.feed_forward)
              for p in mod.parameters()]
    ids = {id(p) for p in hidden}
    rest = [p for p in model.parameters() if id(p) not in ids]
    groups = [{"params": hidden, "lr": lr / m}, {"params": rest, "lr": lr}]
    return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95), weight_decay=0.1)


def titan_llama_builder(width: int, head_dim: int | None = None, n_heads: int | None = None, base_width: int = 128,
                        **kw) -> TitanTransformer:
    """torchtitan-style muP LLaMA with ``dim=width``: either ``head_dim`` fixed (default 128; the number of heads
    ``width / head_dim`` grows with width, as torchtitan configs do) or ``n_heads`` fixed (the head dimension
    ``width / n_heads`` grows); ``mup_width_mul = width / base_width``; kw are further :class:`TitanModelArgs`
    fields."""
    if head_dim is not None and n_heads is not None:
        raise ValueError("give head_dim (fixed; heads grow with width) or n_heads (fixed; head_dim grows), not both")
    if n_heads is None:
        head_dim = head_dim or 128
        if width % head_dim:
            raise ValueError(f"width {width} is not a multiple of head_dim {head_dim}")
        n_heads = width // head_dim
    return TitanTransformer(TitanModelArgs(dim=width, n_heads=n_heads, mup_width_mul=width / base_width, **kw))
