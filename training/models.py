"""The models: Horovod's MNIST example network and torchvision's ResNet-50 (random init)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class MnistNet(nn.Module):
    """The convolutional network of Horovod's MNIST example (logits out)."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 10, kernel_size=5)
        self.conv2 = nn.Conv2d(10, 20, kernel_size=5)
        self.conv2_drop = nn.Dropout2d()
        self.fc1 = nn.Linear(320, 50)
        self.fc2 = nn.Linear(50, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(F.max_pool2d(self.conv1(x), 2))
        x = F.relu(F.max_pool2d(self.conv2_drop(self.conv2(x)), 2))
        x = x.flatten(1)
        x = F.dropout(F.relu(self.fc1(x)), training=self.training)
        return self.fc2(x)



def resnet50(num_classes: int, zero_init_residual: bool = False) -> nn.Module:
    """torchvision's ResNet-50, randomly initialised (nothing is downloaded), ``num_classes``
    outputs; ``zero_init_residual`` starts each block's last BatchNorm weight at zero."""
    from torchvision.models import resnet50 as tv_resnet50

    return tv_resnet50(weights=None, num_classes=num_classes, zero_init_residual=zero_init_residual)
