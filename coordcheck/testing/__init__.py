"""Models whose muP answer is known, shared by the tests and ``experiments/``.

``coordcheck.testing.public_models``: muP models written the way public repositories write
them (config objects, ``(logits, loss)`` outputs, fused and functional attention, stages,
``nn.ModuleDict`` blocks), each correct by default with planted bugs one keyword away.

``coordcheck.testing.known_models``: ``HandMuP``, muP written by hand (an output multiplier and a
hidden-matrix learning rate scaled by ``base_width / width``, through its own optimizer factory),
with each of the two switched off as a planted bug.

``coordcheck.testing.planted``: issue 17's known causes — the nanoGPT-mup GPT above with one planted fault each,
one keyword away (a hidden matrix at an unscaled learning rate, the embedding at the hidden learning rate, one layer
at a constant init std, no output multiplier, attention 1/sqrt(d)); ``FAULTS`` names each fault's keywords.
"""
