"""The gates, one module each (DESIGN.md "The twelve gates"). ``GATES`` maps id -> module in
execution order. Implemented: G01, G02, G03, G04, G07, G08."""
from kverify.gates import (g01_contract, g02_accuracy, g03_nonfinite, g04_determinism, g07_immutability,
                           g08_fresh_output)

GATES = {m.GATE: m for m in (g01_contract, g02_accuracy, g03_nonfinite, g04_determinism, g07_immutability,
                             g08_fresh_output)}

__all__ = ["GATES"]
