"""DEFECT (G08): output from torch.empty; the last partial tile of rows is never written."""
import torch
import torch.nn as nn

TILE = 4


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty(x.shape[0], dtype=x.dtype, device=x.device)
        full = (x.shape[0] // TILE) * TILE
        out[:full] = x[:full].sum(dim=1)
        return out
