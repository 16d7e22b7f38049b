"""DEFECT (G03): an early exit, "a row that holds +Inf sums to +Inf", which is wrong when the row
also holds -Inf or NaN (the sum is NaN: Inf - Inf has no limit). Exact on finite inputs and on
rows with +Inf alone. G03's limit probe must not excuse it: with the infinities replaced by ±M the
row sum stays finite (M - M), so the oracle's NaN is no stand-in for +Inf."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        s = torch.sum(x, dim=1)
        has_pos_inf = torch.isposinf(x).any(dim=1)
        return torch.where(has_pos_inf, torch.full_like(s, float("inf")), s)
