"""``my_pkg.resnet.build``: a CIFAR-style ResNet whose readout is a ``MuReadout``."""

from coordcheck.testing.public_models import ResNet, resnet_builder


def build(width: int, **kw) -> ResNet:
    """ResNet with ``width`` stem channels, one BasicBlock per stage, a MuReadout over 10 classes."""
    return resnet_builder(width, **kw)
