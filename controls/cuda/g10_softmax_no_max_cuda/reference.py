import torch
import torch.nn as nn


class Model(nn.Module):
    """Softmax over dim 1 of a (batch, dim) tensor."""

    def forward(self, x):
        return torch.softmax(x, dim=1)


batch_size = 7
dim = 1031


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
