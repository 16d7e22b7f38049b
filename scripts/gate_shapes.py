"""Which corpus rows the gates can check at a small shape (kverify.check._gate_shape), without a GPU.

For each row: the elements of its inputs at the own shape; if above gates.base.SMALL_INPUTS and
the problem has free dimensions, the shapes gates.base.shrink_bindings tries (with at most half
the own inputs, as Context.small_binding) and the smallest at which the reference's forward runs
on meta tensors (shapes only, no data, no device: a proxy for Context.small_binding, which runs
the fp64 reference; an op without a meta kernel counts as "does not run"). The candidate's probe run is not modelled. Prints a summary.

Usage: python scripts/gate_shapes.py CORPUS.jsonl [--json OUT]
"""
from __future__ import annotations

import argparse
import collections
import json
import statistics

import torch

from kverify.gates.base import SMALL_INPUTS, shrink_bindings
from kverify.problem import Problem


def runs_on_meta(p: Problem, binding: dict) -> bool:
    p.bind(binding)
    try:
        with torch.device("meta"):
            p.module.Model(*p.module.get_init_inputs())(*p.module.get_inputs())
        return True
    except Exception:  # noqa: BLE001 — any failure: not at this shape
        return False
    finally:
        p.bind(None)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("corpus")
    ap.add_argument("--json", help="write [id, own inputs, gate-shape inputs, binding or reason] per row")
    a = ap.parse_args()
    stats, out = collections.Counter(), []
    with open(a.corpus, encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    for r in rows:
        try:
            p = Problem(r["reference"], r["id"], 1e-2)
            own = p.input_numel(0)
        except Exception:  # noqa: BLE001
            stats["reference not loadable here"] += 1
            continue
        if own <= SMALL_INPUTS:
            stats["small already"] += 1
            out.append([r["id"], own, own, "small already"])
            continue
        if not p.dims:
            stats["large, no free dimension"] += 1
            out.append([r["id"], own, own, "no free dimension"])
            continue
        tries = shrink_bindings(p.dims, lambda b: p.input_numel(0, b), SMALL_INPUTS, own=own)
        found = next((t for t in reversed(tries) if runs_on_meta(p, t)), None)
        if found is None:
            stats["large, the reference runs at no smaller shape (meta)"] += 1
            out.append([r["id"], own, own, "no smaller shape runs"])
            continue
        n = p.input_numel(0, found)
        stats["large, smaller shape found"] += 1
        stats["  of which still above the limit"] += n > SMALL_INPUTS
        out.append([r["id"], own, n, found])
    print(f"{len(rows)} rows, limit {SMALL_INPUTS} input elements")
    for k, v in stats.items():
        print(f"  {k}: {v}")
    small = [(o, n) for _, o, n, b in out if isinstance(b, dict)]
    if small:
        print(f"  rows with a smaller shape: median inputs {statistics.median(o for o, _ in small):.0f} at the own shape, "
              f"{statistics.median(n for _, n in small):.0f} at the gates' shape "
              f"(median ratio {statistics.median(o / max(n, 1) for o, n in small):.0f}x)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f)


if __name__ == "__main__":
    main()
