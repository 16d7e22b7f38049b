"""DEFECT (G09): puts its BatchNorm in eval mode when built ("faster inference"), so the harness's
training-mode call normalises by the running statistics, not the batch's (CUDA-L1 L3 T25's change).
In eval mode, where the other gates judge, it is exact."""
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, kernel_size=1, bias=False)
        self.bn = nn.BatchNorm2d(cout)
        self.bn.eval()

    def forward(self, x):
        return self.bn(self.conv(x))
