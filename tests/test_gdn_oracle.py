"""The C++ fp64 GDN oracle against float64 autograd of a plain PyTorch transcription of the
recurrence (DESIGN.md, section GDN), on the CPU: outputs, final state and every gradient."""
import pytest
import torch

from kverify.gdn import oracle_backward, oracle_forward


def transcription(q, k, v, g, beta, scale, h0, l2norm, cu_seqlens):
    """S_t = e^{g_t}(I - b_t k_t k_t^T) S_{t-1} + b_t k_t v_t^T; o_t = S_t^T (scale q_t)."""
    B, T, H, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    if l2norm:
        q = q / torch.sqrt((q * q).sum(-1, keepdim=True) + 1e-6)
        k = k / torch.sqrt((k * k).sum(-1, keepdim=True) + 1e-6)
    seqs = [(b, 0, T) for b in range(B)] if cu_seqlens is None else \
        [(0, int(a), int(e)) for a, e in zip(cu_seqlens[:-1], cu_seqlens[1:])]
    o = [[None] * T for _ in range(B)]
    finals = []
    for n, (b, t0, t1) in enumerate(seqs):
        heads = []
        for hv in range(HV):
            h = hv // (HV // H)
            S = h0[n, hv] if h0 is not None else torch.zeros(K, V, dtype=torch.float64)
            for t in range(t0, t1):
                kt, vt = k[b, t, h], v[b, t, hv]
                S = torch.exp(g[b, t, hv]) * (S - beta[b, t, hv] * torch.outer(kt, kt @ S)) + beta[b, t, hv] * torch.outer(kt, vt)
                if o[b][t] is None:
                    o[b][t] = [None] * HV
                o[b][t][hv] = S.T @ (scale * q[b, t, h])
            heads.append(S)
        finals.append(torch.stack(heads))
    out = torch.stack([torch.stack([torch.stack(o[b][t]) for t in range(T)]) for b in range(B)])
    return out, torch.stack(finals)


CASES = {
    "gva_h0_l2norm": dict(B=2, T=9, H=2, HV=4, K=4, V=3, h0=True, l2norm=True, cu=None, gmin=-3.0),
    "plain_no_h0": dict(B=1, T=7, H=1, HV=1, K=3, V=5, h0=False, l2norm=False, cu=None, gmin=-1.0),
    "varlen_ragged": dict(B=1, T=11, H=1, HV=2, K=3, V=2, h0=True, l2norm=True, cu=[0, 4, 5, 11], gmin=-3.0),
    "strong_decay": dict(B=1, T=6, H=1, HV=1, K=2, V=2, h0=True, l2norm=False, cu=None, gmin=-20.0),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_oracle_equals_float64_autograd(name):
    c = CASES[name]
    gen = torch.Generator().manual_seed(sum(map(ord, name)))
    r = lambda *s: torch.randn(*s, generator=gen, dtype=torch.float64)  # noqa: E731
    B, T, H, HV, K, V = c["B"], c["T"], c["H"], c["HV"], c["K"], c["V"]
    N = B if c["cu"] is None else len(c["cu"]) - 1
    q, k, v = r(B, T, H, K), 0.5 * r(B, T, H, K), r(B, T, HV, V)
    g = c["gmin"] * torch.rand(B, T, HV, generator=gen, dtype=torch.float64)
    beta = 0.05 + 0.9 * torch.rand(B, T, HV, generator=gen, dtype=torch.float64)
    h0 = r(N, HV, K, V) if c["h0"] else None
    do, dht = r(B, T, HV, V), r(N, HV, K, V)
    scale = K ** -0.5
    leaves = [x.clone().requires_grad_() for x in (q, k, v, g, beta)] + ([h0.clone().requires_grad_()] if c["h0"] else [])
    o_ref, ht_ref = transcription(*leaves[:5], scale, leaves[5] if c["h0"] else None, c["l2norm"], c["cu"])
    grads = torch.autograd.grad((o_ref * do).sum() + (ht_ref * dht).sum(), leaves)

    o, ht = oracle_forward(q, k, v, g, beta, scale=scale, initial_state=h0,
                           use_qk_l2norm_in_kernel=c["l2norm"], cu_seqlens=c["cu"])
    d = oracle_backward(q, k, v, g, beta, do, dht, scale=scale, initial_state=h0,
                        use_qk_l2norm_in_kernel=c["l2norm"], cu_seqlens=c["cu"])
    rel = lambda a, b: ((a - b).norm() / b.norm().clamp_min(1e-300)).item()  # noqa: E731
    assert rel(o, o_ref.detach()) < 1e-13 and rel(ht, ht_ref.detach()) < 1e-13
    for n, ref in zip(("dq", "dk", "dv", "dg", "dbeta", "dh0"), grads):
        assert rel(d[n], ref) < 1e-12, (n, rel(d[n], ref))
    if not c["h0"]:
        assert d["dh0"].shape == (N, HV, K, V)


def test_bad_shapes_name_the_field():
    q = torch.zeros(1, 4, 2, 3, dtype=torch.float64)
    v = torch.zeros(1, 4, 3, 2, dtype=torch.float64)  # HV=3 not a multiple of H=2
    gb = torch.zeros(1, 4, 3, dtype=torch.float64)
    with pytest.raises(ValueError, match="multiple of H"):
        oracle_forward(q, q, v, gb, gb)
    with pytest.raises(ValueError, match=r"g must be \[B,T,HV\]"):
        oracle_forward(q, q, torch.zeros(1, 4, 2, 2, dtype=torch.float64), gb, gb)
    with pytest.raises(ValueError, match="cu_seqlens"):
        oracle_forward(q, q, torch.zeros(1, 4, 2, 2, dtype=torch.float64), gb[..., :2], gb[..., :2], cu_seqlens=[0, 5])


def test_scale_zero_is_zero_and_inputs_may_be_numpy():
    import numpy as np

    rng = np.random.default_rng(0)
    q, k = rng.standard_normal((1, 5, 1, 4)), rng.standard_normal((1, 5, 1, 4))
    v, g, beta = rng.standard_normal((1, 5, 2, 3)), -rng.random((1, 5, 2)), rng.random((1, 5, 2))
    o, ht = oracle_forward(q, k, v, g, beta, scale=0.0)  # an explicit 0 is 0, not the default
    assert o.abs().max().item() == 0.0 and ht.abs().max().item() > 0.0
    o1, _ = oracle_forward(q, k, v, g, beta)
    o2, _ = oracle_forward(q, k, v, g, beta, scale=4 ** -0.5)
    assert torch.equal(o1, o2)


def test_cu_seqlens_must_be_integer_offsets():
    q = torch.zeros(1, 5, 1, 2, dtype=torch.float64)
    v, gb = torch.zeros(1, 5, 1, 2, dtype=torch.float64), torch.zeros(1, 5, 1, dtype=torch.float64)
    with pytest.raises(ValueError, match="cu_seqlens"):
        oracle_forward(q, q, v, gb, gb, cu_seqlens=[0, 2.7, 5])
    with pytest.raises(ValueError, match="cu_seqlens"):
        oracle_forward(q, q, v, gb, gb, cu_seqlens=[[0, 5]])
    o, ht = oracle_forward(q, q, v, gb, gb, cu_seqlens=torch.tensor([0, 2, 5], dtype=torch.int32))
    assert ht.shape == (2, 1, 2, 2)
