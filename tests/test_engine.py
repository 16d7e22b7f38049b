"""The C++ engine through its Python binding: DLPack views of torch tensors."""
import json

import pytest
import torch

from kverify import _core


def test_fill_is_layout_free_and_seeded():
    a = torch.empty(5, 7)
    _core.fill(a, 11)
    b = torch.empty(7, 5).t()  # non-contiguous view of the same logical shape
    _core.fill(b, 11)
    assert torch.equal(a, b)
    c = torch.empty(5, 7)
    _core.fill(c, 12)
    assert not torch.equal(a, c)


def test_compare_counts_nan_lost():
    oracle = torch.tensor([1.0, float("nan"), 3.0], dtype=torch.float64)
    cand = torch.tensor([1.0, 0.0, 3.0])
    s = json.loads(_core.compare(cand, oracle))
    assert s["nan_mismatch"] == 1 and s["first_nan"] == 1
    assert s["n_past_bound"] == 1


def test_bad_input_is_a_value_error():
    with pytest.raises(ValueError, match="differ in rank"):
        _core.compare(torch.zeros(3), torch.zeros(3, 1))
    with pytest.raises(ValueError, match="float"):
        _core.compare(torch.zeros(3, dtype=torch.int32), torch.zeros(3))


def test_digest_and_sentinel():
    t = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    assert _core.digest(t) == _core.digest(t.t().contiguous().t())
    u = t.clone()
    u[1, 2] = 5.000001
    assert _core.digest(u) != _core.digest(t)
    p = torch.empty(10, dtype=torch.float16)
    _core.fill_sentinel(p)
    assert _core.count_sentinel(p) == (10, 0)
    assert torch.isnan(p).all()
    p[:4] = 1
    assert _core.count_sentinel(p) == (6, 4)
