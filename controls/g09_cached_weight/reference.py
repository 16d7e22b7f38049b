import torch
import torch.nn as nn


class Model(nn.Module):
    """A linear layer y = x W^T + b."""

    def __init__(self, features, out):
        super().__init__()
        self.fc = nn.Linear(features, out)

    def forward(self, x):
        return self.fc(x)


batch = 12
features = 40
out = 24


def get_inputs():
    return [torch.randn(batch, features)]


def get_init_inputs():
    return [features, out]
