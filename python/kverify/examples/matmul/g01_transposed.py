"""DEFECT (G01): returns C as a transposed (column-major) view — not the reference's layout
contract when the shape is square, and the wrong shape otherwise."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, A, B):
        return (B.t() @ A.t())
