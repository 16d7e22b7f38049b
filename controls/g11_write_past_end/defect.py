"""DEFECT (G11): uses the 16 elements after its input as scratch (a write past the end)."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        scratch = torch.as_strided(x, (16,), (1,), x.storage_offset() + x.numel())
        scratch.zero_()
        return x * x
