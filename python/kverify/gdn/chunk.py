"""kverify's chunked gated delta rule as a torch op, a drop-in for fla's ``chunk_gated_delta_rule``.

The arithmetic is native C++ (gdn/src/chunk_body.hpp): CUDA kernels on a GPU tensor (sm_90a,
on the current stream), the same kernel bodies run serially on a CPU tensor. This module only
allocates, reshapes and wires autograd. Shapes (fla's conventions): q, k ``[B,T,H,K]``;
v ``[B,T,HV,V]``; g (log decay, ≤ 0) and beta ``[B,T,HV]``; initial_state / final state
``[N,HV,K,V]`` float32; HV a multiple of H; K ≤ 128. q, k, v share a dtype (float32, float16,
bfloat16); g and beta are computed in g's dtype. Accumulation and state are float32.
"""
from __future__ import annotations

import torch

from kverify import _core
from kverify.gdn.oracle import cu_seqlens_list

_DTYPES = (torch.float32, torch.float16, torch.bfloat16)

_UNSUPPORTED = ("use_beta_sigmoid_in_kernel", "allow_neg_eigval", "state_v_first", "cp_context",
                "use_gate_in_kernel")


def _l2norm(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """x / sqrt(xᵀx + eps) over the last dimension (the oracle's and fla's definition), returned in
    x's dtype. Computed in float64 by torch ops, outside the native kernels: in float32, xᵀx
    overflows for |x| above ~1e19 and the result collapses to 0 (kverify's G10 showed it)."""
    xd = x.double()
    return (xd * torch.rsqrt((xd * xd).sum(-1, keepdim=True) + eps)).to(x.dtype)


def _stream(t: torch.Tensor) -> int:
    return torch.cuda.current_stream(t.device).cuda_stream if t.is_cuda else 0


class _Tables:
    """cu_seqlens [N+1] and the chunk tables on the tensors' device (int64)."""

    def __init__(self, cu: list[int], device: torch.device):
        seq0, chunks = _core.gdn_chunk_table(cu)
        self.N, self.NT = len(cu) - 1, len(chunks) // 2
        self.cu = torch.tensor(cu, dtype=torch.int64, device=device)
        self.seq0 = torch.tensor(seq0, dtype=torch.int64, device=device)
        self.chunks = torch.tensor(chunks if chunks else [0, 0], dtype=torch.int64, device=device)[: 2 * self.NT]


class ChunkGatedDeltaRule(torch.autograd.Function):
    """autograd Function over flattened tokens: q, k [tokens,H,K], v [tokens,HV,V], g, beta
    [tokens,HV,1]. Saves the inputs; the backward recomputes the forward state (no activations kept)."""

    @staticmethod
    def forward(ctx, q, k, v, g, beta, scale: float, h0, output_final_state: bool, cu: list[int]):
        tab = _Tables(cu, q.device)
        tokens, H, K = q.shape
        HV, V = v.shape[1], v.shape[2]
        ws = torch.empty(_core.gdn_chunk_workspace(tokens, H, HV, K, V, tab.N, tab.NT, False),
                         dtype=torch.float32, device=q.device)
        o = torch.empty(tokens, HV, V, dtype=q.dtype, device=q.device)
        ht = torch.empty(tab.N, HV, K, V, dtype=torch.float32, device=q.device) if output_final_state else None
        d = [x.detach() if x is not None else None for x in (q, k, v, g, beta, h0)]
        _core.gdn_chunk_forward(*d, o, ht, ws, tab.cu, tab.seq0, tab.chunks, scale, _stream(q))
        ctx.save_for_backward(*d)
        ctx.tab, ctx.scale = tab, scale
        if ht is not None:
            return o, ht
        return o, None

    @staticmethod
    def backward(ctx, do, dht):
        q, k, v, g, beta, h0 = ctx.saved_tensors
        tab = ctx.tab
        tokens, H, K = q.shape
        HV, V = v.shape[1], v.shape[2]
        if do is None:
            do = torch.zeros(tokens, HV, V, dtype=q.dtype, device=q.device)
        do = do.to(q.dtype)
        if do.stride(-1) != 1:
            do = do.contiguous()
        dht = None if dht is None else dht.float().contiguous()
        ws = torch.empty(_core.gdn_chunk_workspace(tokens, H, HV, K, V, tab.N, tab.NT, True),
                         dtype=torch.float32, device=q.device)
        dq, dk = torch.empty_like(q, memory_format=torch.contiguous_format), torch.empty_like(k, memory_format=torch.contiguous_format)
        dv = torch.empty(tokens, HV, V, dtype=q.dtype, device=q.device)
        dg = torch.empty(tokens, HV, 1, dtype=g.dtype, device=q.device)
        dbeta = torch.empty_like(dg)
        dh0 = torch.empty_like(h0) if h0 is not None else None
        _core.gdn_chunk_backward(q, k, v, g, beta, h0, do, dht, dq, dk, dv, dg, dbeta, dh0, ws,
                                 tab.cu, tab.seq0, tab.chunks, ctx.scale, _stream(q))
        return dq, dk, dv, dg, dbeta, None, dh0, None, None


def chunk_gated_delta_rule(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor,
                           beta: torch.Tensor, scale: float | None = None,
                           initial_state: torch.Tensor | None = None, output_final_state: bool = False,
                           use_qk_l2norm_in_kernel: bool = False, cu_seqlens: torch.Tensor | None = None,
                           **kwargs) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The gated delta rule, chunked (64 tokens), forward and backward in native code.

    Args (fla's names and shapes): q, k [B,T,H,K]; v [B,T,HV,V]; g, beta [B,T,HV]; scale
    (default K**-0.5); initial_state [N,HV,K,V]; output_final_state; use_qk_l2norm_in_kernel
    (q, k ← x / sqrt(xᵀx + 1e-6), by torch ops before the kernels); cu_seqlens [N+1] int (B must
    be 1; its values are read on the host, from ``cu_seqlens_cpu`` when given, as fla does).
    g must be ≤ 0 (a log decay); it is not checked (that would synchronise the GPU): with g > 0 the
    state grows as e^{Σg} and overflows float32 into NaN/Inf.
    Returns (o [B,T,HV,V] in q's dtype, final_state [N,HV,K,V] float32 or None). T = 0 gives an
    empty o and final_state = initial_state (or zeros).
    Raises ValueError for inconsistent shapes, dtypes, devices or cu_seqlens; TypeError for a
    non-tensor input or an unknown argument; NotImplementedError for fla options this op does not
    have (``use_beta_sigmoid_in_kernel``, ...).
    """
    for name in _UNSUPPORTED:
        if kwargs.get(name):
            raise NotImplementedError(f"kverify.gdn.chunk_gated_delta_rule: {name}=True is not supported")
    for name in kwargs:
        if name not in _UNSUPPORTED + ("cu_seqlens_cpu", "chunk_indices"):
            raise TypeError(f"kverify.gdn.chunk_gated_delta_rule: unexpected argument {name!r}")
    for name, x in (("q", q), ("k", k), ("v", v), ("g", g), ("beta", beta), ("initial_state", initial_state)):
        if x is None and name == "initial_state":
            continue
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
        if x.dtype not in _DTYPES:
            raise ValueError(f"{name} must be float32, float16 or bfloat16, got {x.dtype}")
        if x.device.type not in ("cpu", "cuda") or x.device != q.device:
            raise ValueError(f"{name} is on {x.device}: every tensor must be on q's device, a CPU or CUDA one")
    if q.ndim != 4 or k.shape != q.shape or v.ndim != 4 or v.shape[:2] != q.shape[:2]:
        raise ValueError(f"q, k must be [B,T,H,K] and v [B,T,HV,V] with q's B, T; got q {tuple(q.shape)}, "
                         f"k {tuple(k.shape)}, v {tuple(v.shape)}")
    B, T, H, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    if min(H, K, HV, V) < 1:
        raise ValueError(f"H, K (q [B,T,H,K]) and HV, V (v [B,T,HV,V]) must be >= 1, got H={H}, K={K}, HV={HV}, V={V}")
    for name, x in (("g", g), ("beta", beta)):
        if tuple(x.shape) != (B, T, HV):
            raise ValueError(f"{name} must be [B,T,HV] = {(B, T, HV)}, got {tuple(x.shape)}")
    if HV % H:
        raise ValueError(f"HV = {HV} must be a multiple of H = {H}")
    if k.dtype != q.dtype or v.dtype != q.dtype:
        raise ValueError(f"q, k, v must share a dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    host_cu = kwargs.get("cu_seqlens_cpu")
    if host_cu is not None and cu_seqlens is None:
        raise ValueError("cu_seqlens_cpu is the host copy of cu_seqlens: pass cu_seqlens too")
    if cu_seqlens is not None:
        if B != 1:
            raise ValueError(f"cu_seqlens needs B = 1 (sequences packed along T), got B = {B}")
        try:
            cu = cu_seqlens_list(cu_seqlens if host_cu is None else host_cu)
        except (TypeError, ValueError, RuntimeError) as e:
            raise ValueError(f"cu_seqlens must be a 1-D sequence of integer offsets: {e}") from None
        if len(cu) < 2 or cu[0] != 0 or cu[-1] != T or any(b < a for a, b in zip(cu, cu[1:])):
            raise ValueError(f"cu_seqlens must rise from 0 to T = {T}, got {cu}")
    else:
        cu = [b * T for b in range(B + 1)]
    N = len(cu) - 1
    if initial_state is not None and tuple(initial_state.shape) != (N, HV, K, V):
        raise ValueError(f"initial_state must be [N,HV,K,V] = {(N, HV, K, V)}, got {tuple(initial_state.shape)}")
    if scale is None:
        scale = K ** -0.5
    if B * T == 0:  # nothing to compute: the state passes through
        ht = (initial_state.float().clone() if initial_state is not None
              else q.new_zeros(N, HV, K, V, dtype=torch.float32)) if output_final_state else None
        # empty, but still a function of the inputs, so backward() through it works (zero-size grads)
        tie = sum(x.sum() for x in (q, k, v, g, beta)) * 0
        return v.new_zeros(B, T, HV, V).to(q.dtype) + tie.to(q.dtype), ht
    if use_qk_l2norm_in_kernel:
        q, k = _l2norm(q), _l2norm(k)
    h0 = None if initial_state is None else initial_state.float().contiguous()
    bg = beta.to(g.dtype)

    def flat3(x, heads, dim):
        x = x.reshape(B * T, heads, dim)
        return x if x.stride(-1) == 1 else x.contiguous()

    o, ht = ChunkGatedDeltaRule.apply(flat3(q, H, K), flat3(k, H, K), flat3(v, HV, V), flat3(g, HV, 1),
                                      flat3(bg, HV, 1), float(scale), h0, bool(output_final_state), cu)
    return o.reshape(B, T, HV, V), ht
