import torch
import torch.nn as nn


class Model(nn.Module):
    """A 1x1 convolution and BatchNorm: in training mode (as constructed, as the harness runs it)
    BatchNorm normalises by the batch's statistics."""

    def __init__(self, cin, cout):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, kernel_size=1, bias=False)
        self.bn = nn.BatchNorm2d(cout)

    def forward(self, x):
        return self.bn(self.conv(x))


batch = 6
cin = 5
cout = 7
height = 9
width = 11


def get_inputs():
    return [torch.randn(batch, cin, height, width)]


def get_init_inputs():
    return [cin, cout]
