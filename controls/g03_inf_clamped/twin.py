"""TWIN of g03_inf_clamped: y = x (A - B), the same map with one product. With x[i, k] = +Inf
the exact limit of y[i, j] is sign(A[k, j] - B[k, j]) * Inf; the literal reference meets
Inf - Inf = NaN instead. G03 must accept that (±Inf where the oracle's NaN is an indeterminate
form, in runs injecting ±Inf only) and every other gate must pass."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, features, out):
        super().__init__()
        self.A = nn.Parameter(torch.randn(features, out))
        self.B = nn.Parameter(torch.randn(features, out))

    def forward(self, x):
        return x @ (self.A - self.B)
