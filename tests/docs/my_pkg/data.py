"""``my_pkg.data.cifar_like``: a fixed batch of CIFAR-shaped images, as the docs' ``data._target_`` example."""

import torch


def cifar_like(batch_size: int = 8) -> tuple[torch.Tensor, torch.Tensor]:
    """Gaussian images (batch_size, 3, 32, 32) and labels (batch_size,) in 0..9, the same on every call."""
    g = torch.Generator().manual_seed(0)
    return torch.randn(batch_size, 3, 32, 32, generator=g), torch.randint(0, 10, (batch_size,), generator=g)
