"""DEFECT (G03): zero-fills non-finite operands before multiplying."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, A, B):
        return torch.nan_to_num(A, nan=0.0, posinf=0.0, neginf=0.0) @ torch.nan_to_num(B, nan=0.0, posinf=0.0, neginf=0.0)
