"""``my_pkg.mup_gpt``: a nanoGPT-style GPT with muP by hand, as on the docs' "Your model" page.

It takes a config object, returns ``(logits, loss)`` and brings its own optimizer factory with per-group learning
rates (``coordcheck.testing.public_models``).
"""

from coordcheck.testing.public_models import GPT, configure_optimizers, gpt_builder


def build(width: int, base_width: int, **kw) -> GPT:
    """``GPT(GPTConfig(n_embd=width, mup_base_width=base_width, **kw))``."""
    return gpt_builder(width, base_width=base_width, **kw)


def make_optimizer(model: GPT, lr: float):
    """``factory(model, lr) -> Optimizer``: AdamW, hidden matrices at ``lr * base_width / width``."""
    return configure_optimizers(model, lr)
