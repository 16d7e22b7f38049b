"""DEFECT (G07): ReLU written into the input (and returned)."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return x.clamp_(min=0)
