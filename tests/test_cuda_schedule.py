"""kverify._internal.cuda_schedule: how kverify's processes wait for the GPU (CPU-side logic; the
effect on a real context is tests/test_gpu.py::test_cuda_schedule_sets_the_primary_contexts_wait_mode)."""
import pytest

from kverify._internal import cuda_schedule


def test_nothing_asked_does_nothing(monkeypatch):
    monkeypatch.delenv(cuda_schedule.ENV, raising=False)
    assert cuda_schedule.apply() == ""
    assert cuda_schedule.apply("") == ""


def test_an_unknown_mode_is_refused():
    with pytest.raises(ValueError, match="block"):
        cuda_schedule.apply("sleepy")


def test_a_known_mode_is_set_or_reported_unavailable():
    """Where a CUDA driver exists the mode is set; elsewhere (CI) the reason is returned, no raise."""
    r = cuda_schedule.apply("block")
    assert r == "block" or r.startswith("unavailable: "), r


def test_check_refuses_an_unknown_mode_before_starting_anything(monkeypatch, tmp_path):
    from kverify.check import check
    from kverify.errors import UsageError
    monkeypatch.setenv(cuda_schedule.ENV, "sleepy")
    with pytest.raises(UsageError, match="KVERIFY_CUDA_SCHEDULE"):
        check("x", str(tmp_path / "r.py"), "y", str(tmp_path / "c.py"), device="cpu", workdir=tmp_path / "w")
