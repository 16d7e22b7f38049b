"""DEFECT (G07): zeroes operand B after use (the exploit that makes a second call's check easy)."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, A, B):
        C = A @ B
        B.zero_()
        return C
