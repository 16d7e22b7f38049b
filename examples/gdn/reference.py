"""GDN layer core as a KernelBench-style problem whose reference is kverify's fp64 oracle.

The inputs are unconstrained tensors, mapped the way Gated DeltaNet layers do before the op:
g = −softplus(a) (log decay ≤ 0), beta = sigmoid(b), q and k L2-normalised inside the op. The
oracle (C++, float64, CPU) computes o; it is returned on the inputs' device and dtype.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

from kverify.gdn import oracle_forward


class Model(nn.Module):
    def forward(self, q, k, v, a, b):
        g = -F.softplus(a.double())
        beta = torch.sigmoid(b.double())
        o, _ = oracle_forward(q, k, v, g, beta, use_qk_l2norm_in_kernel=True)
        return o.to(device=q.device, dtype=q.dtype)


batch_size = 2
seq_len = 100
heads = 2
value_heads = 4


def get_inputs():
    return [torch.randn(batch_size, seq_len, heads, 64), torch.randn(batch_size, seq_len, heads, 64),
            torch.randn(batch_size, seq_len, value_heads, 64), torch.randn(batch_size, seq_len, value_heads),
            torch.randn(batch_size, seq_len, value_heads)]


def get_init_inputs():
    return []
