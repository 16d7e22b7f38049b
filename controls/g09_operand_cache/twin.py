"""TWIN of g09_operand_cache: uses the scale it is given."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x, scale):
        return x * scale.clone()
