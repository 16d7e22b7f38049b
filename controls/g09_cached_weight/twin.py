"""TWIN of g09_cached_weight: transposes the current weight on every call."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, features, out):
        super().__init__()
        self.fc = nn.Linear(features, out)

    def forward(self, x):
        return x @ self.fc.weight.t() + self.fc.bias
