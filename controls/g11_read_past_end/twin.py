"""TWIN of g11_read_past_end: treats x[n] as zero without reading it."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        y[:-1] = x[1:] - x[:-1]
        y[-1] = -x[-1]
        return y
