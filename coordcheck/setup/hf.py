"""Hugging Face ``transformers`` models from the command line: a builder for any config class.

Stage: build (``model=hf``). Input: a config class (``transformers.GraniteConfig``) or a ``model_type`` name
(``granite``, ``llama``, ``gpt2``), the width, and the config's fields (``model.config_kwargs.*``). Output: the
causal LM ``AutoModelForCausalLM.from_config(config)`` at that width, built on the job's device (the harness builds
inside ``torch.device(device)``), its weights from the library's own initialisation: nothing is downloaded (the
Hugging Face offline switches are set before ``transformers`` is imported).

``width`` sets ``hidden_size`` (GPT-2's ``n_embd``: the config's ``attribute_map`` translates every name) and the
fields that follow it: the MLP's inner size (``intermediate_size``, GPT-2's ``n_inner``) = ``mlp_ratio * width``, and
a mixture of experts' own inner sizes where its config names them apart (``moe_intermediate_size``,
``shared_expert_intermediate_size``); a Mamba-2 mixer's inner size (Falcon-H1's ``mamba_d_ssm`` = ``mamba_expand *
width``) and its number of heads (``mamba_n_heads`` = ``mamba_d_ssm / mamba_d_head``: the head size fixed, the heads
grow), and a Mamba-2 model's heads likewise (Mamba2Config's ``num_heads`` = ``expand * width / head_dim``, its
``head_dim`` the mixer's head size, from ``config_kwargs``; ``n_groups`` must divide the heads at every width);
the heads, by ``grows``: ``head_dim`` (``n_head`` heads at every width, so the head dimension grows, as muP's
1/head_dim attention assumes) or ``heads`` (``head_dim`` fixed, ``width / head_dim`` heads). Key/value heads follow
the heads (no grouped-query attention) unless ``config_kwargs`` sets ``num_key_value_heads``. A field that the width
sets, or one that the config class does not have, is one line naming it. Dropout probabilities (``*dropout``,
``*_pdrop``: GPT-2's default 0.1) are 0 unless ``config_kwargs`` sets them: the batch is the same at every step, and
dropout would only add noise between steps and widths.

``depth`` (the harness's ``depth=2,4,8 --multirun``) sets the number of blocks: the config class's
``num_hidden_layers`` (GPT-2's ``n_layer``, T5's ``num_layers``: :func:`depth_field`), over the one ``config_kwargs``
sets; unset, the config's own.

Width-dependent fields are written in YAML with the resolvers of ``coordcheck.app.config`` (``${cc.ratio:}`` =
width / base_width, ``${cc.head_dim:-1}`` = 1/head_dim), as ``conf/experiment/granite_mup.yaml`` does. The model's
output (a ``ModelOutput``) is read as its ``.logits`` by the harness; ``labels`` given to it (``loss=model
forward_targets=labels``) are the batch's next-token targets, which the model is told not to shift again.
"""

from __future__ import annotations

import difflib
import inspect
import os
import re
from collections.abc import Mapping
from typing import Any, Literal

from omegaconf import OmegaConf

from coordcheck.core.errors import CoordCheckError, check_depth, check_width

__all__ = ["build", "check_node", "config_class", "hf_config", "depth_field", "INSTALL", "OFFLINE", "WIDTH_FIELDS",
           "INNER_FIELDS", "EXPERT_INNER_FIELDS", "DEPTH_FIELDS"]

INSTALL = 'model=hf needs Hugging Face transformers: pip install -e ".[hf]"'
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}  # never fetch anything
WIDTH_FIELDS = ("hidden_size", "num_attention_heads", "head_dim")  # set from the width (and n_head / head_dim)
INNER_FIELDS = ("intermediate_size", "n_inner", "ffn_dim", "d_ff")  # the MLP's inner size, as configs name it
# the experts' inner sizes where a mixture of experts names them apart (Qwen2-MoE, Qwen3-MoE): they follow the width too
EXPERT_INNER_FIELDS = ("moe_intermediate_size", "shared_expert_intermediate_size")
DEPTH_FIELDS = ("num_hidden_layers", "n_layer", "num_layers", "n_layers")  # the number of blocks, as configs name it
DROPOUT = re.compile(r"(dropout|pdrop)$")  # dropout probabilities (GPT-2's attn_pdrop, resid_pdrop, embd_pdrop): 0

os.environ.update(OFFLINE)  # before transformers is imported: huggingface_hub reads them once, at import
try:
    import transformers
except ImportError:  # ModuleNotFoundError, or an import blocked (sys.modules["transformers"] = None)
    raise CoordCheckError(INSTALL) from None



def config_class(config: str | type) -> type:
    """The config class a ``model.config`` value names: a class, a dotted path (``transformers.GraniteConfig``)
    or a ``model_type`` (``granite``); one line with the closest names when it names none."""
    if isinstance(config, type):
        return config
    if not isinstance(config, str) or not config:
        raise CoordCheckError(f"model.config={config!r}: name a config class (transformers.GraniteConfig) or a "
                              "model_type (granite, llama, gpt2)")
    if "." in config:
        from coordcheck.core.targets import locate

        cls = locate(config, "model.config")
        if not (isinstance(cls, type) and issubclass(cls, transformers.PretrainedConfig)):
            raise CoordCheckError(f"model.config={config}: not a transformers config class (a PretrainedConfig)")
        return cls
    from transformers import CONFIG_MAPPING

    if config not in CONFIG_MAPPING:
        close = difflib.get_close_matches(config, list(CONFIG_MAPPING.keys()), n=3)
        hint = f": did you mean {', '.join(close)}?" if close else ""
        raise CoordCheckError(f"model.config={config}: no transformers model_type of that name{hint}")
    return CONFIG_MAPPING[config]


def _defaults(cls: type) -> dict[str, Any]:
    """The fields of a config class at their defaults (its default instance's public attributes)."""
    return {k: v for k, v in vars(cls()).items() if not k.startswith("_")}


def _canonical(cls: type, name: str) -> str:
    return getattr(cls, "attribute_map", {}).get(name, name)


def depth_field(cls: type) -> str:
    """The config class's field for its number of blocks (the first of :data:`DEPTH_FIELDS` it has, as the class
    itself names it: GPT-2's ``n_layer``); one line when it has none."""
    known = set(_defaults(cls))
    for name in DEPTH_FIELDS:
        if _canonical(cls, name) in known:
            return _canonical(cls, name)
    raise CoordCheckError(f"depth: {cls.__name__} has none of the fields {', '.join(DEPTH_FIELDS)}: its number of "
                          "blocks cannot be set (leave depth unset and set it in model.config_kwargs)")


def hf_config(width: int, config: str | type = "granite", *, grows: Literal["head_dim", "heads"] = "head_dim",
              n_head: int = 4, head_dim: int = 32, mlp_ratio: float = 4,
              config_kwargs: Mapping[str, Any] | None = None, depth: int | None = None) -> Any:
    """The config at ``width``: ``config_kwargs`` (checked against the class's fields) and the width's fields
    (module docstring). ``depth``: the number of blocks (:func:`depth_field`: ``num_hidden_layers``, GPT-2's
    ``n_layer``), over the one ``config_kwargs`` sets; None: as configured. Nothing is built."""
    width = check_width(width)
    depth = check_depth(depth, optional=True)
    cls = config_class(config)
    defaults = _defaults(cls)
    known = set(defaults) | set(getattr(cls, "attribute_map", {}))
    given = dict(OmegaConf.to_container(config_kwargs, resolve=True) if OmegaConf.is_config(config_kwargs)
                 else config_kwargs or {})  # plain values: a config's nested fields (rope_parameters) as dicts
    # a Mamba-2 model (Mamba2Config): no attention; its head_dim is the mixer's head size, not set by the width
    ssm = {"num_heads", "expand", "head_dim"} <= set(defaults) and _canonical(cls, "num_attention_heads") not in known
    for name in given:
        if _canonical(cls, name) in {_canonical(cls, f) for f in WIDTH_FIELDS} - ({"head_dim"} if ssm else set()):
            raise CoordCheckError(f"model.config_kwargs.{name}: set by the width (width=..., with model.grows, "
                                  "model.n_head, model.head_dim): remove it")
        if name not in known:
            close = difflib.get_close_matches(name, sorted(known), n=1)
            hint = f": did you mean {close[0]}?" if close else ""
            raise CoordCheckError(f"model.config_kwargs.{name}: {cls.__name__} has no field {name!r}{hint}")
    if grows == "head_dim":
        heads = n_head
    elif grows == "heads":
        heads = width // head_dim if head_dim > 0 else 0
    else:
        raise CoordCheckError(f"model.grows must be head_dim (n_head fixed) or heads (head_dim fixed), got {grows!r}")
    if not ssm and (heads < 1 or width % heads or (grows == "heads" and width % head_dim)):
        fixed = f"model.n_head={n_head}" if grows == "head_dim" else f"model.head_dim={head_dim}"
        raise CoordCheckError(f"width={width} is not a multiple of {fixed.split('=')[1]} ({fixed}): choose widths "
                              "it divides")
    fields = {"hidden_size": width} if ssm else {"hidden_size": width, "num_attention_heads": heads}
    if "head_dim" in known and not ssm:
        fields["head_dim"] = width // heads
    if "num_key_value_heads" in known and not any(_canonical(cls, n) == "num_key_value_heads" for n in given):
        fields["num_key_value_heads"] = heads
    inner = next((f for f in INNER_FIELDS if f in known), None)
    experts = tuple(f for f in EXPERT_INNER_FIELDS if f in known and isinstance(defaults.get(f), (int, type(None))))
    for f in ((inner,) if inner is not None else ()) + experts:  # (a list-valued one, per layer, is left as set)
        if not any(_canonical(cls, n) == f for n in given):
            fields[f] = int(round(mlp_ratio * width))
    given_names = {_canonical(cls, n) for n in given}
    mamba = {"mamba_d_ssm", "mamba_n_heads"}
    if mamba <= known and not mamba & given_names:  # a Mamba-2 mixer's inner size and heads (Falcon-H1)
        expand, d_head = given.get("mamba_expand", defaults.get("mamba_expand") or 2), given.get(
            "mamba_d_head", defaults.get("mamba_d_head") or 64)
        if not isinstance(expand, (int, float)) or isinstance(d_head, bool) or not isinstance(d_head, int) \
                or d_head < 1:
            raise CoordCheckError(f"model.config_kwargs: mamba_expand={expand!r} and mamba_d_head={d_head!r} must be "
                                  "numbers (the width sets mamba_d_ssm = mamba_expand * width and mamba_n_heads from "
                                  "them), or set mamba_d_ssm and mamba_n_heads yourself")
        d_ssm = int(round(float(expand) * width))
        if d_ssm % d_head:
            raise CoordCheckError(f"width={width}: the Mamba inner size mamba_expand * width = {d_ssm} is not a "
                                  f"multiple of mamba_d_head={d_head}: choose widths it divides")
        fields["mamba_d_ssm"], fields["mamba_n_heads"] = d_ssm, d_ssm // d_head
    if ssm:  # Mamba2Config: expand * width = num_heads * head_dim
        expand, d_head, n_heads, groups = (given.get(f, defaults[f]) for f in ("expand", "head_dim", "num_heads",
                                                                                 "n_groups"))
        if any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in (expand, d_head, n_heads, groups)):
            raise CoordCheckError(f"model.config_kwargs: expand={expand!r}, head_dim={d_head!r}, num_heads={n_heads!r} "
                                  f"and n_groups={groups!r} must be positive integers")
        d_ssm = expand * width
        if "num_heads" not in given_names:  # the head size fixed, the heads grow (as Falcon-H1's mamba_n_heads)
            if d_ssm % d_head:
                raise CoordCheckError(f"width={width}: the Mamba inner size expand * width = {d_ssm} is not a "
                                      f"multiple of head_dim={d_head}: choose widths it divides")
            fields["num_heads"] = n_heads = d_ssm // d_head
        elif n_heads * d_head != d_ssm:
            raise CoordCheckError(f"width={width}: num_heads * head_dim = {n_heads} * {d_head} is not the Mamba inner "
                                  f"size expand * width = {d_ssm}: leave num_heads to the width")
        if n_heads % groups:
            raise CoordCheckError(f"width={width}: n_groups={groups} does not divide the Mamba heads num_heads="
                                  f"{n_heads}: set model.config_kwargs.n_groups to a divisor of them at every width")
    for name in known - given_names:  # a fixed batch at every step: dropout would only add noise between steps
        if DROPOUT.search(name) and isinstance(defaults.get(name), float):
            fields[name] = 0.0
    kwargs = {_canonical(cls, k): v for k, v in {**given, **fields}.items()}
    if depth is not None:
        kwargs[depth_field(cls)] = depth
    return cls(**kwargs)


def _takes_shift_labels() -> bool:
    """Whether this transformers' causal-LM loss takes ``shift_labels`` (labels already shifted; 4.5x and 5.x)."""
    try:
        from transformers.loss.loss_utils import ForCausalLMLoss
    except ImportError:
        return False
    return "shift_labels" in inspect.signature(ForCausalLMLoss).parameters


def _next_token_labels(module: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict] | None:
    """``labels`` from the harness are next-token targets already (``targets[t]`` follows ``inputs[t]``); the model
    would shift them again. Passed as ``shift_labels`` too, its loss is the harness's cross-entropy exactly; where the
    loss takes no ``shift_labels`` (older transformers) they are moved one position right (``-100`` first), which the
    model's own shift undoes: the same loss without the last position."""
    labels = kwargs.get("labels")
    if labels is None or kwargs.get("shift_labels") is not None:
        return None
    if SHIFT_LABELS:
        return args, {**kwargs, "shift_labels": labels}
    return args, {**kwargs, "labels": labels.roll(1, dims=-1).index_fill(-1, labels.new_zeros(1), -100)}


SHIFT_LABELS = _takes_shift_labels()


def build(width: int, config: str | type = "granite", *, grows: Literal["head_dim", "heads"] = "head_dim",
          n_head: int = 4, head_dim: int = 32, mlp_ratio: float = 4,
          attn_implementation: Literal["sdpa", "eager"] = "sdpa",
          config_kwargs: Mapping[str, Any] | None = None, depth: int | None = None) -> Any:
    """``AutoModelForCausalLM.from_config`` at ``width`` and ``depth`` (see :func:`hf_config`; the harness's
    ``depth=...`` reaches it as ``depth``), with ``attn_implementation``
    ``sdpa`` (``F.scaled_dot_product_attention``: the probes record ``<attn>.(sdpa)`` and its head dimension) or
    ``eager`` (matmul and softmax: ``<attn>.(softmax)``), on the current default device."""
    os.environ.update(OFFLINE)
    if attn_implementation not in ("sdpa", "eager"):
        raise CoordCheckError(f"model.attn_implementation must be sdpa or eager, got {attn_implementation!r}")
    cfg = hf_config(width, config, grows=grows, n_head=n_head, head_dim=head_dim, mlp_ratio=mlp_ratio,
                    config_kwargs=config_kwargs, depth=depth)
    from transformers import AutoModelForCausalLM

    try:
        model = AutoModelForCausalLM.from_config(cfg, attn_implementation=attn_implementation)
    except ValueError as e:  # a config class with no causal LM, or a bad field value
        first = (str(e).strip().splitlines() or [""])[0]
        raise CoordCheckError(f"model.config={type(cfg).__name__}: AutoModelForCausalLM cannot build it ({first})"
                              ) from None
    model.register_forward_pre_hook(_next_token_labels, with_kwargs=True)
    return model


def check_node(node: Mapping[str, Any], width: Any, depth: Any = None) -> None:
    """The ``model`` config node of ``model=hf`` checked at ``width`` and ``depth`` (None: as configured) as
    :func:`build` will use it, nothing built:
    the command line calls it (``coordcheck.app.checks.check_targets``), so a bad class or field is one line and exit 2
    before any job runs."""
    kwargs = dict(OmegaConf.to_container(node, resolve=True) if OmegaConf.is_config(node) else node)
    kwargs = {k: v for k, v in kwargs.items() if not k.startswith("_")}
    attn = kwargs.pop("attn_implementation", "sdpa")
    if attn not in ("sdpa", "eager"):
        raise CoordCheckError(f"model.attn_implementation must be sdpa or eager, got {attn!r}")
    try:
        hf_config(width, **kwargs, depth=depth)
    except TypeError as e:  # a key the builder does not take
        raise CoordCheckError(f"model: {e}".replace("hf_config()", "coordcheck.setup.hf.build()")) from None


build.check_node = check_node  # type: ignore[attr-defined]
