"""DEFECT (G10): |x| computed as sqrt(x*x): the square overflows above ~1.8e19."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return x / (1 + torch.sqrt(x * x))
