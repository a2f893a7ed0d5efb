"""``my_pkg.models.build``: a muP model as the docs' ``model._target_=my_pkg.models.build`` expects it."""

from coordcheck.setup.models import GPT


def build(width: int, n_layer: int = 2, **kwargs) -> GPT:
    """The built-in muP GPT (MuReadout, tokens in, logits out) at ``width``, ``n_layer`` blocks."""
    return GPT(width, n_layer=n_layer, **kwargs)
