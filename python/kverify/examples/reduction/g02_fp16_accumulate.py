"""DEFECT (G02): accumulates in fp16 where the reference keeps fp32."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        acc = torch.zeros(x.shape[0], dtype=torch.float16, device=x.device)
        for c in x.half().split(256, dim=1):
            acc = acc + c.sum(dim=1, dtype=torch.float16)
        return acc.float()
