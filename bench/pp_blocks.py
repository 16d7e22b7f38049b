"""How often the corpus's CUDA sources share a leading include block: the key of kverify's kept
preprocessed prefixes (kverify._internal.ppcache.block), each source as load_inline writes it
(torch's three includes first, bench/cu_headers.PREFIX).

    python bench/pp_blocks.py [--corpus .corpus/accepted_kernels.jsonl] [--top 8]

Prints the number of sources with a CUDA text made of string constants, of distinct blocks, of
sources without a block, and the most common blocks with their counts (stop 52: 672 sources, 49
blocks, the most common 337 times).
"""
import argparse
import collections
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import cu_headers as ch  # noqa: E402

from kverify._internal import ppcache  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", default=".corpus/accepted_kernels.jsonl")
    ap.add_argument("--top", type=int, default=8)
    a = ap.parse_args()
    rows = [json.loads(line) for line in open(a.corpus) if line.strip()]
    srcs = [s for r in rows if (s := ch.cuda_sources(r.get("candidate", ""))) is not None]
    blocks = collections.Counter()
    for s in srcs:
        found = ppcache.block((ch.PREFIX + s).encode())
        blocks[tuple(found[0]) if found else None] += 1
    none = blocks.pop(None, 0)
    print(f"{len(srcs)} CUDA sources; {len(blocks)} distinct include blocks; {none} without one")
    for key, n in blocks.most_common(a.top):
        print(f"{n:5}  " + " ".join(f"{line}:<{h}>" for line, h in key))
    return 0


if __name__ == "__main__":
    sys.exit(main())
