"""DEFECT (G05): tiles of 128 rows; a partial last tile is never processed (grid = rows // 128)."""
import torch
import torch.nn as nn

TILE = 128


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.zeros_like(x)
        for r in range(0, (x.shape[0] // TILE) * TILE, TILE):
            out[r:r + TILE] = 2 * x[r:r + TILE] + 1
        return out
