"""DEFECT (G05): vectorised by 8 columns; the n % 8 tail is dropped. Exact at the default n = 4096."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        full = (x.shape[1] // 8) * 8
        return x[:, :full].reshape(x.shape[0], -1, 8).sum(dim=2).sum(dim=1)
