import torch
import torch.nn as nn


class Model(nn.Module):
    """Forward difference along a flat vector: y[i] = x[i+1] - x[i], with y[n-1] = -x[n-1]."""

    def forward(self, x):
        nxt = torch.cat([x[1:], x.new_zeros(1)])
        return nxt - x


n = 4097


def get_inputs():
    return [torch.randn(n)]


def get_init_inputs():
    return []
