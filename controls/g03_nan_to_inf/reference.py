import torch
import torch.nn as nn


class Model(nn.Module):
    """Row maximum; NaN propagates (torch.amax)."""

    def forward(self, x):
        return torch.amax(x, dim=-1)


rows = 24
cols = 130


def get_inputs():
    return [torch.randn(rows, cols)]


def get_init_inputs():
    return []
