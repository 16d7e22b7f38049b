"""GDN layer core as a KernelBench-style problem; kverify's fp64 oracle is the C++ GDN oracle.

The inputs are unconstrained tensors, mapped the way Gated DeltaNet layers do before the op:
g = −softplus(a) (log decay ≤ 0), beta = sigmoid(b), q and k L2-normalised inside the op.
In float64 (kverify's oracle pass: it upcasts every input) the model calls the C++ fp64 oracle,
kverify.gdn.oracle_forward. In any other dtype it runs the plain token-by-token recurrence in
that dtype, as a KernelBench reference would: kverify calibrates its tolerance-based bounds on
that run's own error, which a float32 recurrence has and a rounded fp64 result would not.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

from kverify.gdn import oracle_forward


def recurrence(q, k, v, g, beta):
    """S_t = e^{g_t}(S_{t-1} − β_t k_t (k_tᵀ S_{t-1})) + β_t k_t v_tᵀ, o_t = S_tᵀ (K^{-1/2} q_t), in the
    inputs' dtype; q, k [B,T,H,K] (L2-normalised here), v [B,T,HV,V], g, beta [B,T,HV]."""
    B, T, H, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    q = q / torch.sqrt((q * q).sum(-1, keepdim=True) + 1e-6)
    k = k / torch.sqrt((k * k).sum(-1, keepdim=True) + 1e-6)
    q, k = q.repeat_interleave(HV // H, dim=2), k.repeat_interleave(HV // H, dim=2)
    S = q.new_zeros(B, HV, K, V)
    out = []
    for t in range(T):
        kt, bt = k[:, t], beta[:, t, :, None, None]
        S = torch.exp(g[:, t])[..., None, None] * (S - bt * kt[..., None] * (kt[..., None, :] @ S)) \
            + bt * kt[..., None] * v[:, t, :, None, :]
        out.append((q[:, t, :, None, :] @ S)[:, :, 0] * K ** -0.5)
    return torch.stack(out, 1)


class Model(nn.Module):
    def forward(self, q, k, v, a, b):
        g, beta = -F.softplus(a), torch.sigmoid(b)
        if q.dtype == torch.float64:
            o, _ = oracle_forward(q, k, v, g, beta, use_qk_l2norm_in_kernel=True)
            return o.to(q.device)
        return recurrence(q, k, v, g, beta)


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
