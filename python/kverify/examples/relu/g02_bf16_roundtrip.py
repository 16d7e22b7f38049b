"""DEFECT (G02): stores through bfloat16 (a silent precision loss of 0.4%)."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.relu(x).bfloat16().float()
