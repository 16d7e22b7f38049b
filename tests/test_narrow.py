"""The narrow torch header of a CUDA extension source (kverify._internal.narrow): which names it
serves, and that g++ compiles typical host code against it (torch's own headers, CPU wheel)."""
import shutil
import subprocess

import pytest
import torch.utils.cpp_extension as cpp

from kverify._internal.narrow import HEAVY_PREAMBLE, narrow_files, narrow_header, write_shim

INC = cpp.include_paths()[0]

HOST = r"""
torch::Tensor relu_cuda(torch::Tensor x, double alpha) {
  TORCH_CHECK(x.dim() >= 1, "x must have a dimension");  // torch::nn is named in a comment only
  auto xc = x.contiguous();
  auto y = torch::empty_like(xc);
  auto z = torch::zeros({xc.size(0)}, torch::TensorOptions().dtype(torch::kFloat32).device(xc.device()));
  auto w = at::zeros_like(y) + z.sum() * alpha;
  for (auto i : c10::irange(2)) { (void)i; }
  float* p = y.data_ptr<float>();
  (void)p;
  return relu(w);  // unqualified: found by argument-dependent lookup
}
"""


def includes(h: str) -> set[str]:
    return {ln.split("<")[1].rstrip(">") for ln in h.splitlines() if ln.startswith("#include")}


def test_serves_the_names_the_source_calls():
    h = narrow_header(HOST, INC)
    assert h is not None
    inc = includes(h)
    assert {"ATen/ops/empty_like.h", "ATen/ops/zeros.h", "ATen/ops/zeros_like.h", "ATen/ops/relu.h",
            "ATen/ops/sum.h"} <= inc
    # torch:: factories: torch's overloads, without torch/csrc/autograd/variable.h
    assert "torch/csrc/autograd/generated/variable_factories.h" not in inc
    assert "inline at::Tensor empty_like(" in h and "inline at::Tensor zeros(" in h
    assert "ATen/Dispatch.h" not in inc
    files = narrow_files(HOST, INC)
    light = files["ATen/ops/empty_like.h"]
    assert "at::Tensor empty_like(" in light and not any(f"<{p}>" in light.split("written at build time")[1]
                                                         for p in HEAVY_PREAMBLE)
    # tensor() and from_blob() have other forms: torch's own file
    assert "variable_factories.h" in narrow_header("auto t = torch::tensor({1.0, 2.0});", INC)


def test_refuses_names_it_does_not_serve():
    assert narrow_header("auto f = torch::nn::functional::relu;", INC) is None
    assert narrow_header("at::native::add_out(a, b, c);", INC) is None
    assert narrow_header('AT_DISPATCH_FLOATING_TYPES(x.type(), "k", [&] {});', INC) is None  # deprecated type()
    assert narrow_header('printf("torch::nn is not used here");', INC) is not None  # a string is no use
    with_dispatch = narrow_header("AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), \"k\", [&] {});", INC)
    assert "ATen/Dispatch.h" in includes(with_dispatch)
    only_at = narrow_header("auto y = at::empty({4}, x.options());", INC)
    assert "torch/csrc/autograd/generated/variable_factories.h" not in includes(only_at)


def _gxx(tmp_path, files: dict, body: str) -> subprocess.CompletedProcess:
    shim = write_shim(tmp_path / "inc", files)
    src = tmp_path / "tu.cpp"
    src.write_text("#include <torch/types.h>\n#include <torch/extension.h>\n" + body)
    return subprocess.run([shutil.which("g++") or "g++", "-std=c++17", "-fsyntax-only", f"-I{shim}",
                           *[f"-isystem{p}" for p in cpp.include_paths()], str(src)],
                          capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_host_code_compiles_against_it_and_a_missing_name_is_an_error(tmp_path):
    if not shutil.which("g++"):
        pytest.skip("no g++")
    r = _gxx(tmp_path, narrow_files(HOST, INC), HOST)
    assert r.returncode == 0, r.stderr[-3000:]
    # a header made for another source lacks sigmoid: a compile error, never another overload
    r = _gxx(tmp_path, narrow_files("auto y = torch::empty({1});", INC), "at::Tensor f(at::Tensor x) { return at::sigmoid(x); }")
    assert r.returncode != 0 and "sigmoid" in r.stderr


def test_scanner_skips_literals_and_comments_in_linear_time():
    """A name hidden in a literal is no use; one after a literal is (review findings: "//" inside a
    string, raw strings, char literals, digit separators, line splices); no input is slow."""
    import time

    from kverify._internal.narrow import _code

    assert _code('f("see https://x"); torch::empty_like(x);') == 'f(""); torch::empty_like(x);'
    assert _code('R"(a"b)" torch::zeros(1); L\'"\' g(); int n = 1\'000; h();') == \
        '"" torch::zeros(1); L\'\' g(); int n = 1\'000; h();'
    assert _code("auto y = torch::\\\nempty_like(x); /* c */ z") == "auto y = torch::empty_like(x);   z"
    t = time.monotonic()
    _code("/*" * 200000), _code('"' * 200001), _code('R"(' * 100000)
    assert time.monotonic() - t < 5
    # torch::empty_like keeps torch's wrapper even when the scan never saw the name
    assert "inline at::Tensor empty_like(" in narrow_header("auto y = x + 1;", INC)
