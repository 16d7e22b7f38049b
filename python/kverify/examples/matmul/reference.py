import torch
import torch.nn as nn


class Model(nn.Module):
    """C = A @ B with A (M, K) and B (K, N)."""

    def forward(self, A, B):
        return torch.matmul(A, B)


M = 67
K = 131
N = 45


def get_inputs():
    return [torch.randn(M, K), torch.randn(K, N)]


def get_init_inputs():
    return []
