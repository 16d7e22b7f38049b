"""DEFECT (G04): summation order varies per call (as with atomicAdd across blocks)."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        perm = torch.randperm(x.shape[1], device=x.device)
        parts = x[:, perm].split(97, dim=1)
        acc = torch.zeros(x.shape[0], dtype=x.dtype, device=x.device)
        for p in parts:
            acc = acc + p.sum(dim=1)
        return acc
