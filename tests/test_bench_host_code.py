"""bench/cu_headers.py's host_code: the host functions a source defines, with their calls, read
from section .text only (stop 26: disassembling the whole object took ~12 s per 100k lines of
header code and made the compile benchmark run past its time limit)."""
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from cu_headers import host_code  # noqa: E402

HEADER = """
inline int helper(int x) { return x * 3 + 1; }          // header code: a COMDAT .text.* section
template <class T> T twice(T x) { return x + x; }
"""
SOURCE = """
int own(int x) { return helper(x) + twice(x); }
"""


@pytest.mark.skipif(not (shutil.which("objdump") and shutil.which("g++")), reason="needs objdump and g++")
@pytest.mark.parametrize("call", ["helper", "twice"])
def test_own_functions_with_their_calls_and_no_header_code(tmp_path, call):
    (tmp_path / "h.h").write_text(HEADER)
    src = '#include "h.h"\n' + SOURCE.replace("helper(x) + twice(x)", f"{call}(x)")
    (tmp_path / "a.cpp").write_text(src)
    subprocess.run(["g++", "-O0", "-fPIC", "-c", "a.cpp", "-o", "a.o"], cwd=tmp_path, check=True)
    funcs = host_code(tmp_path / "a.o", src)
    assert list(funcs) == ["own(int)"], funcs  # helper/twice: named in the source but header code
    assert call in funcs["own(int)"]  # the call's relocation target is kept
    # a different callee is a different body: the comparison can see an overload resolved otherwise
    other = '#include "h.h"\n' + SOURCE.replace("helper(x) + twice(x)", "(x * 3 + 1)")
    (tmp_path / "b.cpp").write_text(other)
    subprocess.run(["g++", "-O0", "-fPIC", "-c", "b.cpp", "-o", "b.o"], cwd=tmp_path, check=True)
    assert host_code(tmp_path / "b.o", other) != funcs
