"""DEFECT (G08): caches C keyed on the operands' data pointers."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.cache = {}

    def forward(self, A, B):
        key = (A.data_ptr(), B.data_ptr())
        if key not in self.cache:
            self.cache[key] = A @ B
        return self.cache[key]
