"""The gated delta rule (GDN) from the inside: the fp64 oracle (``kverify.gdn.oracle``) and the
native chunked forward/backward as a torch op (``kverify.gdn.chunk``), a drop-in for fla's
``chunk_gated_delta_rule``."""
from kverify.gdn.chunk import chunk_gated_delta_rule
from kverify.gdn.oracle import oracle_backward, oracle_forward

__all__ = ["chunk_gated_delta_rule", "oracle_forward", "oracle_backward"]
