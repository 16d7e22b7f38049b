import torch
import torch.nn as nn


class Model(nn.Module):
    """out = x * scale (elementwise, scale broadcast over rows)."""

    def forward(self, x, scale):
        return x * scale


rows = 20
cols = 33


def get_inputs():
    return [torch.randn(rows, cols), torch.rand(cols)]


def get_init_inputs():
    return []
