"""TWIN of g10_square_overflow: |x| without squaring."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return x / (1 + torch.abs(x))
