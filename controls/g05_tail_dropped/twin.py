"""TWIN of g05_tail_dropped: vectorised by 8 columns, with the tail summed."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        full = (x.shape[1] // 8) * 8
        return x[:, :full].reshape(x.shape[0], -1, 8).sum(dim=2).sum(dim=1) + x[:, full:].sum(dim=1)
