import torch
import torch.nn as nn


class Model(nn.Module):
    """Elementwise square."""

    def forward(self, x):
        return x * x


n = 1000


def get_inputs():
    return [torch.randn(n)]


def get_init_inputs():
    return []
