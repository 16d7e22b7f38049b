"""TWIN of g12_background_thread: the thread is joined before returning."""
import threading

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.zeros_like(x)
        t = threading.Thread(target=lambda: out.copy_(torch.relu(x)))
        t.start()
        t.join()
        return out
