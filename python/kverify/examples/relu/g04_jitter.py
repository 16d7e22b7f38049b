"""DEFECT (G04): last-bit noise that changes from call to call (as from a racy combine)."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.relu(x)
        flip = torch.rand_like(y) < 0.01
        return torch.where(flip, torch.nextafter(y, y + 1), y)
