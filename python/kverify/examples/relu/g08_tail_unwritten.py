"""DEFECT (G08): output from torch.empty; the last 5 elements (a partial vector) are never written."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        flat_in, flat_out = x.reshape(-1), out.view(-1)
        n = (flat_in.numel() // 8) * 8
        flat_out[:n] = torch.relu(flat_in[:n])
        return out
