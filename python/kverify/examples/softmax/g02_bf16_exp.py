"""DEFECT (G02): exponentials in bfloat16. Outputs are ~1e-3, so allclose(atol=1e-2) cannot see
a 0.4% relative error; the oracle can."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        e = torch.exp((x - x.amax(dim=1, keepdim=True)).bfloat16()).float()
        return e / e.sum(dim=1, keepdim=True)
