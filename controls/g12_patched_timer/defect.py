"""DEFECT (G12): replaces the harness's timer and sync functions when imported (timings that lie)."""
import time

import torch
import torch.nn as nn

_real = time.perf_counter
time.perf_counter = lambda: _real() * 0.5
torch.cuda.synchronize = lambda *a, **k: None


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.where(x < 0, torch.zeros_like(x), x)
