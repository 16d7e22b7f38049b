"""Thin Python face of the C++ engine (``kverify._core``): synthesis, comparison, digest and
sentinels on torch tensors through DLPack. CUDA work runs on the current torch stream.

Every function accepts CPU or CUDA tensors of any strides; tensors that require grad are detached.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass

import torch

from kverify import _core

SPECIAL = {"nan": 1, "+inf": 2, "-inf": 4}


def _stream(t: torch.Tensor) -> int:
    return torch.cuda.current_stream(t.device).cuda_stream if t.is_cuda else 0


def _plain(t: torch.Tensor) -> torch.Tensor:
    return t.detach()


@dataclass(frozen=True)
class Dist:
    """A distribution of element values (core/include/kverify/synth/synth.hpp).

    kind: "normal" (p0 mean, p1 std), "uniform" [p0, p1), "uniform_int" [p0, p1].
    special_density: probability of replacing an element by a special value; specials: subset of
    {"nan", "+inf", "-inf"}.
    """

    kind: str = "normal"
    p0: float = 0.0
    p1: float = 1.0
    special_density: float = 0.0
    specials: tuple[str, ...] = ()

    def to_json(self) -> dict:
        return {"kind": self.kind, "p0": self.p0, "p1": self.p1,
                "special_density": self.special_density, "specials": list(self.specials)}

    @staticmethod
    def from_json(d: dict) -> "Dist":
        return Dist(d["kind"], float(d["p0"]), float(d["p1"]), float(d.get("special_density", 0.0)),
                    tuple(d.get("specials", ())))


def fill(t: torch.Tensor, seed: int, dist: Dist, stream_id: int = 0) -> torch.Tensor:
    """Fill ``t`` in place (no autograd version bump) from (seed, dist, stream_id); returns ``t``.

    Bitwise identical on CPU and CUDA for the same arguments. Raises ValueError on bad parameters.
    """
    mask = 0
    for s in dist.specials:
        mask |= SPECIAL[s]
    _core.fill(_plain(t), int(seed) & (2**64 - 1), dist.kind, float(dist.p0), float(dist.p1),
               float(dist.special_density), mask, int(stream_id), _stream(t))
    return t


def compare(candidate: torch.Tensor, oracle: torch.Tensor, atol: float = 0.0, rtol: float = 0.0) -> dict:
    """One-pass CompareStats of ``candidate`` against ``oracle`` (same shape; float dtypes; the
    candidate is moved to the oracle's device). Integer/bool tensors are compared as float64."""
    if candidate.device != oracle.device:
        candidate = candidate.to(oracle.device)
    if not candidate.is_floating_point():
        candidate = candidate.double()
    if not oracle.is_floating_point():
        oracle = oracle.double()
    return json.loads(_core.compare(_plain(candidate), _plain(oracle), float(atol), float(rtol), _stream(oracle)))


def digest(t: torch.Tensor) -> str:
    """Hex 64-bit digest of the logical contents (bits, dtype, shape); identical on CPU and CUDA."""
    return f"{_core.digest(_plain(t), _stream(t)):016x}"


def fill_sentinel(t: torch.Tensor) -> None:
    """Poison every element of ``t`` with the sentinel NaN payload (core/poison)."""
    _core.fill_sentinel(_plain(t), _stream(t))


def count_sentinel(t: torch.Tensor) -> tuple[int, int]:
    """(count, first logical index or -1) of sentinel elements in ``t``."""
    return tuple(_core.count_sentinel(_plain(t), _stream(t)))


def count_unwritten(t: torch.Tensor) -> tuple[int, int]:
    """Elements that still hold poison: the sentinel NaN payload, and on the CPU (4/8-byte types)
    the 0xA5.. bytes of a fresh allocation under MALLOC_PERTURB_ (kverify.sandbox). (count, first)."""
    n, first = count_sentinel(t)
    if not t.is_cuda and t.element_size() >= 4:
        m, f2 = _core.count_fresh(_plain(t), 0)
        if m:
            first = f2 if first < 0 else min(first, f2)
            n += m
    return n, first


def finite_json(x):
    """``x`` with non-finite floats written as "nan"/"inf"/"-inf" (the core's JSON convention)."""
    if isinstance(x, float) and not math.isfinite(x):
        return "nan" if x != x else ("inf" if x > 0 else "-inf")
    if isinstance(x, dict):
        return {k: finite_json(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [finite_json(v) for v in x]
    return x


def judge(gate: str, measurements: dict) -> dict:
    """Apply the core's verdict rule of ``gate`` to ``measurements``; returns the GateResult dict."""
    return json.loads(_core.judge(gate, json.dumps(finite_json(measurements), allow_nan=False)))


def g02_bound(reference_stats: dict, dtype: torch.dtype) -> dict:
    """G02 bound {normwise, atol, rtol} calibrated on the reference's own error stats."""
    return json.loads(_core.g02_bound(json.dumps(reference_stats), str(dtype).replace("torch.", "")))


def classify(results: list[dict]) -> str:
    """BROKEN / VIOLATION / CLEAN (DESIGN.md classes), decided by the core."""
    return _core.classify([json.dumps(r) for r in results])
