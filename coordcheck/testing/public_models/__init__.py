"""muP models written the way public repositories write them, each with planted muP bugs.

The built-in models (``coordcheck.setup.models``) are written for the harness. These are written
in the styles people actually use, with the quirks that come with them (tuple outputs,
sequence-first tensors, fused projections, functional attention, empty shortcut
``Sequential``\\s, blocks in a ``ModuleDict``), so that the harness is tested on what it
will meet. Every model is muP-correct by default; each bug is one keyword away.

One module per style: :mod:`.gpt` (nanoGPT-mup, ``gpt_builder`` -> :class:`GPT`,
:func:`configure_optimizers`), :mod:`.encoder` (mup examples/Transformer, sequence-first,
``encoder_builder`` -> :class:`TransformerModel`), :mod:`.resnet` (kuangliu CIFAR / mup examples,
``resnet_builder`` -> :class:`ResNet`), :mod:`.llama` (LLaMA in the mup package, ``llama_builder`` ->
:class:`Transformer`) and :mod:`.titan` (torchtitan / maester, muP by hand, ``titan_llama_builder`` ->
:class:`TitanTransformer`, :func:`titan_mup_optimizer`). Each module's docstring says how to run its
model and which keywords plant its bugs; every public name is re-exported here, so dotted paths such
as Hydra's ``_target_: coordcheck.testing.public_models.gpt_builder`` resolve.

Data: :func:`seq_first_tokens` (T, B) token batches, :func:`images` gaussian images.
"""

from __future__ import annotations

from coordcheck.testing.public_models.encoder import TransformerModel, encoder_builder, seq_first_tokens
from coordcheck.testing.public_models.gpt import GPT, GPTConfig, configure_optimizers, gpt_builder
from coordcheck.testing.public_models.llama import ModelArgs, RMSNorm, Transformer, llama_builder
from coordcheck.testing.public_models.resnet import BasicBlock, ResNet, images, resnet_builder
from coordcheck.testing.public_models.titan import (
    TitanModelArgs,
    TitanTransformer,
    titan_llama_builder,
    titan_mup_optimizer,
)

__all__ = [
    "GPTConfig", "GPT", "configure_optimizers", "gpt_builder",
    "TransformerModel", "encoder_builder", "seq_first_tokens",
    "BasicBlock", "ResNet", "resnet_builder", "images",
    "ModelArgs", "RMSNorm", "Transformer", "llama_builder",
    "TitanModelArgs", "TitanTransformer", "titan_mup_optimizer", "titan_llama_builder",
]
