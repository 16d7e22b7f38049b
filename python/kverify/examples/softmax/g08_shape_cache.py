"""DEFECT (G08): caches the result by input shape and data pointer, returning it on later calls."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.cache = {}

    def forward(self, x):
        key = (tuple(x.shape), x.data_ptr())
        if key not in self.cache:
            self.cache[key] = torch.softmax(x, dim=1)
        return self.cache[key]
