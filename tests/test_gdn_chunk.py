"""kverify.gdn.chunk_gated_delta_rule (the native chunked GDN) against the fp64 oracle: forward,
final state and every gradient through autograd, on the CPU path (same kernel bodies as the GPU)
and, with a GPU, on the CUDA kernels; bitwise reproducibility; every output element written; clear
errors for bad input."""
import pytest
import torch

from kverify import _core
from kverify.gdn import chunk_gated_delta_rule, oracle_backward, oracle_forward

NAMES = ("q", "k", "v", "g", "beta", "h0")


def make(B, T, H, HV, K, V, cu=None, gmin=-0.5, h0=True, seed=0, dtype=torch.float32, device="cpu"):
    gen = torch.Generator().manual_seed(seed)
    N = B if cu is None else len(cu) - 1
    r = lambda *s: torch.randn(*s, generator=gen)  # noqa: E731
    x = dict(q=r(B, T, H, K), k=torch.nn.functional.normalize(r(B, T, H, K), dim=-1), v=r(B, T, HV, V),
             g=gmin * torch.rand(B, T, HV, generator=gen), beta=torch.rand(B, T, HV, generator=gen),
             h0=r(N, HV, K, V) if h0 else None)
    out = {n: (None if t is None else t.to(device, dtype if n in "qkv" else torch.float32)) for n, t in x.items()}
    return out, r(B, T, HV, V).to(device, dtype), r(N, HV, K, V).to(device)


def run(x, do, dht, cu=None, l2=False):
    leaves = {n: (None if t is None else t.clone().requires_grad_()) for n, t in x.items()}
    o, ht = chunk_gated_delta_rule(leaves["q"], leaves["k"], leaves["v"], leaves["g"], leaves["beta"],
                                   initial_state=leaves["h0"], output_final_state=True,
                                   use_qk_l2norm_in_kernel=l2,
                                   cu_seqlens=None if cu is None else torch.tensor(cu))
    ((o.float() * do.float()).sum() + (ht * dht).sum()).backward()
    grads = {("d" + n if n != "h0" else "dh0"): t.grad for n, t in leaves.items() if t is not None}
    return o, ht, grads


def rel(a, b):
    a, b = a.detach().double().cpu(), b.double()
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


def oracle(x, do, dht, cu=None, l2=False):
    args = [x[n] for n in NAMES[:5]]
    o, ht = oracle_forward(*args, initial_state=x["h0"], use_qk_l2norm_in_kernel=l2, cu_seqlens=cu)
    g = oracle_backward(*args, do, dht, initial_state=x["h0"], use_qk_l2norm_in_kernel=l2, cu_seqlens=cu)
    return o, ht, g


CASES = {
    "one_token": dict(B=1, T=1, H=1, HV=1, K=8, V=8),
    "tail_63_gva": dict(B=2, T=63, H=1, HV=2, K=16, V=16),
    "exact_64_no_h0": dict(B=1, T=64, H=2, HV=2, K=16, V=16, h0=False),
    "65_l2norm": dict(B=1, T=65, H=1, HV=1, K=16, V=40, l2=True),
    "varlen_ragged": dict(B=1, T=150, H=1, HV=2, K=16, V=16, cu=[0, 1, 70, 70, 150]),
    "strong_decay": dict(B=1, T=130, H=1, HV=1, K=16, V=16, gmin=-20.0),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_cpu_path_matches_fp64_oracle(name):
    c = dict(CASES[name])
    l2 = c.pop("l2", False)
    x, do, dht = make(**c)
    o, ht, grads = run(x, do, dht, c.get("cu"), l2)
    ro, rht, rg = oracle(x, do, dht, c.get("cu"), l2)
    errs = {"o": rel(o, ro), "ht": rel(ht, rht), **{n: rel(grads[n], rg[n]) for n in grads}}
    assert max(errs.values()) < 1e-4, errs


def test_bf16_inputs_on_cpu_are_within_bf16_error():
    x, do, dht = make(1, 70, 1, 2, 16, 16, dtype=torch.bfloat16)
    o, ht, grads = run(x, do, dht)
    assert o.dtype == torch.bfloat16 and grads["dq"].dtype == torch.bfloat16 and grads["dg"].dtype == torch.float32
    ro, rht, rg = oracle(x, do, dht)
    errs = {"o": rel(o, ro), "ht": rel(ht, rht), **{n: rel(grads[n], rg[n]) for n in grads}}
    assert max(errs.values()) < 1e-2, errs


def test_a_wrong_gradient_term_would_be_seen():
    """The test's own teeth: dropping the initial state's gradient path changes dh0 and dq."""
    x, do, dht = make(1, 20, 1, 1, 8, 8)
    _, _, grads = run(x, do, dht)
    _, _, rg = oracle(x, do, dht)
    assert rel(grads["dh0"], rg["dh0"]) < 1e-4
    assert rel(torch.zeros_like(grads["dh0"]), rg["dh0"]) > 0.5


def test_bad_inputs_name_the_field():
    x, _, _ = make(1, 8, 1, 2, 8, 8)
    with pytest.raises(ValueError, match="HV = 3 must be a multiple of H = 2"):
        chunk_gated_delta_rule(torch.randn(1, 8, 2, 8), torch.randn(1, 8, 2, 8), torch.randn(1, 8, 3, 8),
                               torch.zeros(1, 8, 3), torch.zeros(1, 8, 3))
    with pytest.raises(ValueError, match="beta must be"):
        chunk_gated_delta_rule(x["q"], x["k"], x["v"], x["g"], x["beta"][:, :4])
    with pytest.raises(ValueError, match="cu_seqlens must rise"):
        chunk_gated_delta_rule(x["q"], x["k"], x["v"], x["g"], x["beta"], cu_seqlens=torch.tensor([0, 5, 3, 8]))
    with pytest.raises(ValueError, match="K = 256"):
        chunk_gated_delta_rule(torch.randn(1, 4, 1, 256), torch.randn(1, 4, 1, 256), torch.randn(1, 4, 1, 8),
                               torch.zeros(1, 4, 1), torch.zeros(1, 4, 1))
    with pytest.raises(ValueError, match="integer offsets"):
        chunk_gated_delta_rule(x["q"], x["k"], x["v"], x["g"], x["beta"], cu_seqlens=torch.tensor([0.0, 3.5, 8.0]))
    with pytest.raises(ValueError, match="pass cu_seqlens too"):
        chunk_gated_delta_rule(x["q"], x["k"], x["v"], x["g"], x["beta"], cu_seqlens_cpu=torch.tensor([0, 3, 8]))
    with pytest.raises(ValueError, match="must be >= 1"):
        chunk_gated_delta_rule(torch.randn(1, 4, 0, 8), torch.randn(1, 4, 0, 8), torch.randn(1, 4, 2, 8),
                               torch.zeros(1, 4, 2), torch.zeros(1, 4, 2))
    with pytest.raises(ValueError, match="q must be float32, float16 or bfloat16"):
        chunk_gated_delta_rule(x["q"].double(), x["k"], x["v"], x["g"], x["beta"])
    with pytest.raises(TypeError, match="q must be a torch.Tensor"):
        chunk_gated_delta_rule(x["q"].tolist(), x["k"], x["v"], x["g"], x["beta"])
    with pytest.raises(NotImplementedError, match="use_beta_sigmoid_in_kernel"):
        chunk_gated_delta_rule(x["q"], x["k"], x["v"], x["g"], x["beta"], use_beta_sigmoid_in_kernel=True)


def test_empty_sequence_passes_the_state_through():
    h0 = torch.randn(1, 2, 8, 8, requires_grad=True)
    o, ht = chunk_gated_delta_rule(torch.randn(1, 0, 1, 8), torch.randn(1, 0, 1, 8), torch.randn(1, 0, 2, 8),
                                   torch.zeros(1, 0, 2), torch.zeros(1, 0, 2), initial_state=h0, output_final_state=True)
    assert o.shape == (1, 0, 2, 8) and torch.equal(ht, h0)
    ht.sum().backward()
    assert torch.equal(h0.grad, torch.ones_like(h0))
    q = torch.randn(1, 0, 1, 8, requires_grad=True)  # o too stays part of the graph (empty gradients)
    o, _ = chunk_gated_delta_rule(q, torch.randn(1, 0, 1, 8), torch.randn(1, 0, 2, 8), torch.zeros(1, 0, 2),
                                  torch.zeros(1, 0, 2))
    o.sum().backward()
    assert q.grad is not None and q.grad.shape == q.shape


def test_host_copy_of_cu_seqlens_is_used_like_fla():
    x, do, dht = make(1, 20, 1, 1, 8, 8, cu=[0, 7, 20])
    a = chunk_gated_delta_rule(x["q"], x["k"], x["v"], x["g"], x["beta"], cu_seqlens=torch.tensor([0, 7, 20]))[0]
    b = chunk_gated_delta_rule(x["q"], x["k"], x["v"], x["g"], x["beta"], cu_seqlens=torch.tensor([0, 7, 20]),
                               cu_seqlens_cpu=torch.tensor([0, 7, 20]))[0]
    assert torch.equal(a, b)


def _sentinel_run(x, do, dht, device):
    """Backward through the binding with every output pre-filled with kverify's NaN sentinel;
    returns the outputs (the face allocates with torch.empty, which cannot show unwritten elements)."""
    B, T, H, K = x["q"].shape
    HV, V = x["v"].shape[2:]
    cu = [b * T for b in range(B + 1)]
    seq0, chunks = _core.gdn_chunk_table(cu)
    t64 = lambda a: torch.tensor(a, dtype=torch.int64, device=device)  # noqa: E731
    f3 = lambda t, h, d: t.reshape(B * T, h, d).contiguous()  # noqa: E731
    args = [f3(x["q"], H, K), f3(x["k"], H, K), f3(x["v"], HV, V), f3(x["g"], HV, 1), f3(x["beta"], HV, 1), x["h0"]]
    outs = [torch.empty(B * T, H, K, device=device), torch.empty(B * T, H, K, device=device),
            torch.empty(B * T, HV, V, device=device), torch.empty(B * T, HV, 1, device=device),
            torch.empty(B * T, HV, 1, device=device), torch.empty_like(x["h0"])]
    stream = torch.cuda.current_stream().cuda_stream if device == "cuda" else 0
    for t in outs:
        _core.fill_sentinel(t, stream)
    ws = torch.empty(_core.gdn_chunk_workspace(B * T, H, HV, K, V, len(cu) - 1, len(chunks) // 2, True), device=device)
    _core.gdn_chunk_backward(*args, f3(do, HV, V), dht, *outs, ws, t64(cu), t64(seq0), t64(chunks),
                             K ** -0.5, stream)
    return outs


def test_every_gradient_element_is_written_cpu():
    x, do, dht = make(2, 67, 1, 2, 8, 40)
    for name, t in zip(("dq", "dk", "dv", "dg", "dbeta", "dh0"), _sentinel_run(x, do, dht, "cpu")):
        assert _core.count_sentinel(t, 0)[0] == 0, name
    fresh = torch.empty(5)
    _core.fill_sentinel(fresh, 0)
    assert _core.count_sentinel(fresh, 0)[0] == 5  # the check sees an unwritten element


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["tail_63_gva", "varlen_ragged", "strong_decay", "65_l2norm"])
def test_cuda_kernels_match_fp64_oracle_and_are_bitwise_reproducible(name):
    c = dict(CASES[name])
    l2 = c.pop("l2", False)
    x, do, dht = make(**c, device="cuda")
    o, ht, grads = run(x, do, dht, c.get("cu"), l2)
    o2, ht2, grads2 = run(x, do, dht, c.get("cu"), l2)
    cpu = lambda t: None if t is None else t.cpu()  # noqa: E731
    ro, rht, rg = oracle({n: cpu(t) for n, t in x.items()}, do.cpu(), dht.cpu(), c.get("cu"), l2)
    errs = {"o": rel(o, ro), "ht": rel(ht, rht), **{n: rel(grads[n], rg[n]) for n in grads}}
    assert max(errs.values()) < 1e-4, errs
    assert torch.equal(o, o2) and torch.equal(ht, ht2)
    for n in grads:
        assert torch.equal(grads[n], grads2[n]), n


@pytest.mark.gpu
def test_every_gradient_element_is_written_cuda():
    x, do, dht = make(2, 67, 1, 2, 8, 40, device="cuda")
    for name, t in zip(("dq", "dk", "dv", "dg", "dbeta", "dh0"), _sentinel_run(x, do, dht, "cuda")):
        assert _core.count_sentinel(t, torch.cuda.current_stream().cuda_stream)[0] == 0, name
