import torch
import torch.nn as nn


class Model(nn.Module):
    """C = A @ B."""

    def forward(self, A, B):
        return A @ B


M = 33
K = 256
N = 17


def get_inputs():
    return [torch.randn(M, K), torch.randn(K, N)]


def get_init_inputs():
    return []
