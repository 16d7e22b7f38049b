"""DEFECT (G04): the denominator is summed in an order that changes per call (atomics)."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        e = torch.exp(x - x.amax(dim=1, keepdim=True))
        perm = torch.randperm(x.shape[1], device=x.device)
        s = torch.zeros((x.shape[0], 1), dtype=x.dtype, device=x.device)
        for p in e[:, perm].split(61, dim=1):
            s = s + p.sum(dim=1, keepdim=True)
        return e / s
