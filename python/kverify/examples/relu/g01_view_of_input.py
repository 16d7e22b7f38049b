"""DEFECT (G01): returns a view with gaps between rows (strides of a larger buffer), not a dense tensor."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        buf = torch.empty(x.shape[0], x.shape[1] + 3, dtype=x.dtype, device=x.device)
        buf[:, : x.shape[1]] = torch.relu(x)
        return buf[:, : x.shape[1]]
