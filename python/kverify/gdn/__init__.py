"""The gated delta rule (GDN) from the inside: so far the fp64 oracle (``kverify.gdn.oracle``);
the native CUDA kernels and their torch face come next (issue 5)."""
from kverify.gdn.oracle import oracle_backward, oracle_forward

__all__ = ["oracle_forward", "oracle_backward"]
