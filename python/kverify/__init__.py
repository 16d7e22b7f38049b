"""kverify: a contract-grade verifier for GPU kernels.

Public API (grouped):
  - checking:  check(reference, candidate, ...) -> CheckReport dict
  - problems:  load_kernelbench(path), load_corpus_row(file, id)
  - engine:    synth / compare / digest / sentinels in kverify.engine
"""
from kverify import _core  # noqa: F401  (the C++ engine)

__version__ = "0.1.0"
