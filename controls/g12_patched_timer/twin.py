"""TWIN of g12_patched_timer: measures with its own timer, patches nothing."""
import time

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        t0 = time.perf_counter()
        y = torch.where(x < 0, torch.zeros_like(x), x)
        self.last_seconds = time.perf_counter() - t0
        return y
