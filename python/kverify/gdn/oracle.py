"""The fp64 GDN oracle (C++, gdn/src/oracle.cpp) with fla's argument names.

Shapes (fla's ``chunk_gated_delta_rule``): q, k ``[B,T,H,K]``; v ``[B,T,HV,V]``; g (log-space
decay) and beta ``[B,T,HV]``; initial_state / final state ``[N,HV,K,V]``; HV a multiple of H.
Inputs of any float dtype and device are copied to contiguous CPU float64; outputs are CPU float64
tensors. Formulas and the derivation of the reverse pass: gdn/include/kverify/gdn/oracle.hpp.
Raises ValueError naming the field for inconsistent shapes or cu_seqlens.
"""
from __future__ import annotations

import torch

from kverify import _core


def _f64(x):
    """Contiguous CPU float64 copy of a tensor, NumPy array or nested list (None stays None)."""
    return None if x is None else torch.as_tensor(x).detach().to("cpu", torch.float64).contiguous()


def cu_seqlens_list(cu_seqlens) -> list[int] | None:
    """cu_seqlens as a list of ints. Raises ValueError unless it is 1-D and integer-valued."""
    if cu_seqlens is None:
        return None
    t = torch.as_tensor(cu_seqlens)
    if t.ndim != 1 or (t.is_floating_point() and not bool((t == t.round()).all())) or t.is_complex():
        raise ValueError(f"cu_seqlens must be a 1-D sequence of integer offsets, got {cu_seqlens!r}")
    return [int(c) for c in t.tolist()]


def oracle_forward(q, k, v, g, beta, scale: float | None = None, initial_state=None,
                   use_qk_l2norm_in_kernel: bool = False, cu_seqlens=None) -> tuple[torch.Tensor, torch.Tensor]:
    """(o [B,T,HV,V], final_state [N,HV,K,V]) in float64 on the CPU. scale None: K**-0.5."""
    o, ht = _core.gdn_oracle_forward(_f64(q), _f64(k), _f64(v), _f64(g), _f64(beta), _f64(initial_state),
                                     scale, use_qk_l2norm_in_kernel, cu_seqlens_list(cu_seqlens))
    return torch.from_numpy(o), torch.from_numpy(ht)


def oracle_backward(q, k, v, g, beta, do, dht=None, scale: float | None = None, initial_state=None,
                    use_qk_l2norm_in_kernel: bool = False, cu_seqlens=None) -> dict[str, torch.Tensor]:
    """Gradients of L = sum(do * o) + sum(dht * final_state): {dq, dk, dv, dg, dbeta, dh0}, float64 CPU."""
    names = ("dq", "dk", "dv", "dg", "dbeta", "dh0")
    out = _core.gdn_oracle_backward(_f64(q), _f64(k), _f64(v), _f64(g), _f64(beta), _f64(initial_state), _f64(do),
                                    _f64(dht), scale, use_qk_l2norm_in_kernel, cu_seqlens_list(cu_seqlens))
    return {n: torch.from_numpy(a) for n, a in zip(names, out)}
