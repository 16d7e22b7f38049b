"""Correct: blocked pairwise sum in fp32 (a different order than torch, same accuracy class)."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        b, n = x.shape
        pad = (-n) % 64
        xp = torch.cat([x, x.new_zeros(b, pad)], dim=1) if pad else x
        return xp.view(b, -1, 64).sum(dim=2).sum(dim=1)
