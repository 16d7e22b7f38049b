"""DEFECT (G06): partial sums of 1000 columns are rounded through bfloat16 before the final add."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        parts = [p.sum(dim=1).bfloat16().float() for p in x.split(1000, dim=1)]
        return torch.stack(parts, dim=1).sum(dim=1)
