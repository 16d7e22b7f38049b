"""TWIN of g10_flush_to_zero: keeps subnormals."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.where(x < 0, torch.zeros_like(x), x)
