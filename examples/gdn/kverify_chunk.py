"""Candidate: kverify's native chunked GDN (kverify.gdn.chunk_gated_delta_rule) on reference.py."""
import torch.nn as nn
import torch.nn.functional as F

from kverify.gdn import chunk_gated_delta_rule


class ModelNew(nn.Module):
    def forward(self, q, k, v, a, b):
        g = -F.softplus(a.float())
        beta = b.float().sigmoid()
        o, _ = chunk_gated_delta_rule(q, k, v, g, beta, use_qk_l2norm_in_kernel=True)
        return o
