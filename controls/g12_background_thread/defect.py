"""DEFECT (G12): computes in a background thread and returns before it has finished
(the CPU analogue of work left on an unjoined stream); the thread outlives the call."""
import threading
import time

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.zeros_like(x)

        def work():
            time.sleep(0.02)
            out.copy_(torch.relu(x))
            time.sleep(30)  # a worker that lingers

        threading.Thread(target=work, daemon=True).start()
        time.sleep(0.1)
        return out
