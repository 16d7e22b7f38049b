import torch
import torch.nn as nn


class Model(nn.Module):
    """y = x A - x B, evaluated literally: with an infinite input, x A and x B are both infinite
    and their difference meets Inf - Inf = NaN wherever the two have the same sign."""

    def __init__(self, features, out):
        super().__init__()
        self.A = nn.Parameter(torch.randn(features, out))
        self.B = nn.Parameter(torch.randn(features, out))

    def forward(self, x):
        return x @ self.A - x @ self.B


batch = 20
features = 36
out = 28


def get_inputs():
    return [torch.randn(batch, features)]


def get_init_inputs():
    return [features, out]
