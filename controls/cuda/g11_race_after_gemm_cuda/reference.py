import torch
import torch.nn as nn


class Model(nn.Module):
    """An fp16 linear layer with bias (PyTorch's: a cuBLAS GEMM on a GPU), then each row's sum in
    fp32: (batch, 768) fp16 -> (batch,) fp32."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(768, 768).half()

    def forward(self, x):
        return self.fc(x).float().sum(dim=1)


batch = 512


def get_inputs():
    return [torch.randn(batch, 768).half()]


def get_init_inputs():
    return []
