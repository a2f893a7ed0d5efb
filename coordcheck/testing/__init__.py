"""Models whose muP answer is known, shared by the tests and ``experiments/``; the gate for other people's tests.

``coordcheck.testing.public_models``: muP models written the way public repositories write
them (config objects, ``(logits, loss)`` outputs, fused and functional attention, stages,
``nn.ModuleDict`` blocks), each correct by default with planted bugs one keyword away.

``coordcheck.testing.known_models``: ``HandMuP``, muP written by hand (an output multiplier and a
hidden-matrix learning rate scaled by ``base_width / width``, through its own optimizer factory),
with each of the two switched off as a planted bug.

``coordcheck.testing.planted``: issue 17's known causes — the nanoGPT-mup GPT above with one planted fault each,
one keyword away (a hidden matrix at an unscaled learning rate, the embedding at the hidden learning rate, one layer
at a constant init std, no output multiplier, attention 1/sqrt(d)); ``FAULTS`` names each fault's keywords.

``coordcheck.testing.depth_models``: issue 18's depth known answer for user models — a nanoGPT-mup-style GPT with muP
and CompleteP by hand (branch multiplier (n_layer / depth_base)^-α in the block, CompleteP's Table 1 in its own AdamW
factory ``make_optimizer``); ``build`` passes the depth check, ``build_no_multiplier`` (the multiplier dropped) fails.

``coordcheck.testing.gate``: ``assert_mup(build, widths=...)``, the gate for model libraries' test suites (re-exported
here: ``from coordcheck.testing import assert_mup``); ``coordcheck.testing.pytest_plugin``, its pytest plugin (the
``coordcheck`` fixture, ``--coordcheck-report DIR``). Nothing here imports torch until it is used: the plugin is
loaded in every pytest session of anyone who installs coordcheck.
"""

from __future__ import annotations

from importlib import import_module

__all__ = ["assert_mup"]

_LAZY = {"assert_mup": "coordcheck.testing.gate"}


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'coordcheck.testing' has no attribute {name!r}")
