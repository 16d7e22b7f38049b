"""TWIN of g05_partial_tile: grid = ceil(rows / 128), the last tile clipped."""
import torch
import torch.nn as nn

TILE = 128


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.zeros_like(x)
        for r in range(0, x.shape[0], TILE):
            out[r:r + TILE] = 2 * x[r:r + TILE] + 1
        return out
