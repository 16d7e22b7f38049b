"""DEFECT (G03): skips NaN (nansum) — a row with a NaN sums to a number."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.nansum(x, dim=1)
