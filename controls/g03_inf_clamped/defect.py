"""DEFECT (G03): y = x (A - B) with infinities clamped to the largest finite float (a common way
to "keep training stable"). NaN still propagates, so only the ±Inf runs catch it: finite where the
oracle is non-finite."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, features, out):
        super().__init__()
        self.A = nn.Parameter(torch.randn(features, out))
        self.B = nn.Parameter(torch.randn(features, out))

    def forward(self, x):
        big = torch.finfo(x.dtype).max
        return torch.clamp(x @ (self.A - self.B), -big, big)
