"""What is recorded: the probes on a training model (activations, their change, a module's input and own update,
attention logits wherever computed), the moments they reduce to, where each module sits (layout), parameter shapes
and facts, and Adam's ε. Imports :mod:`coordcheck.setup` and :mod:`coordcheck.core`; :mod:`~coordcheck.record.shapes`
alone is torch-free (the judge reads it).

``coordcheck.record(model, width=..., out=...)``, the recorder for any training loop
(:func:`coordcheck.run.recorder.record`), is this package called: :mod:`coordcheck` makes it callable.
"""
