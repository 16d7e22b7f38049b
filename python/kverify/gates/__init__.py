"""The twelve gates, one module each (DESIGN.md "The twelve gates"). ``GATES`` maps id -> module
in execution order."""
from kverify.gates import (g01_contract, g02_accuracy, g03_nonfinite, g04_determinism, g05_shapes, g06_accumulation,
                           g07_immutability, g08_fresh_output, g09_sensitivity, g10_range, g11_memory_safety,
                           g12_stream)

GATES = {m.GATE: m for m in (g01_contract, g02_accuracy, g03_nonfinite, g04_determinism, g05_shapes, g06_accumulation,
                             g07_immutability, g08_fresh_output, g09_sensitivity, g10_range, g11_memory_safety,
                             g12_stream)}

__all__ = ["GATES"]
