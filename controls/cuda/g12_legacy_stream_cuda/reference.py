import torch
import torch.nn as nn


class Model(nn.Module):
    """Elementwise ReLU."""

    def forward(self, x):
        return torch.relu(x)


batch_size = 9
dim = 2053


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
