"""DEFECT (G11): reads one element past the end of x (assumes a zero there, as padded buffers have)."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        window = torch.as_strided(x, (x.numel() + 1,), (1,))  # x[n] is outside the tensor
        return window[1:] - x
