"""kuangliu pytorch-cifar / mup examples ResNet: stages, BatchNorm, empty shortcuts.

``resnet_builder(width, num_classes=10, blocks=(1, 1, 1, 1), readout="mu")`` -> :class:`ResNet`:
``width`` is the stem's channel count, stages have ``width, 2w, 4w, 8w`` channels; shortcuts are an
empty ``nn.Sequential()`` when shapes match. No ``reset_parameters``: PyTorch's default (fan-in)
conv init plus mup's readout rescaling is the muP init. ``readout="linear"`` is a plain
``nn.Linear`` (fine under ``sp``, refused under ``mup``). Run with ``parametrization="mup"`` (the
fix) or ``"sp"`` (the control that must fail), ``data=images()`` (:func:`images`: gaussian images),
a small ``base_width`` (e.g. 16) and widths like 8..64.
"""

from __future__ import annotations

import mup
import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["BasicBlock", "ResNet", "resnet_builder", "images"]


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
