"""Narrow torch headers for the CUDA translation unit of a ``load_inline`` extension.

``load_inline`` puts ``#include <torch/types.h>`` on top of every CUDA source, and most sources
include ``<torch/extension.h>`` as well: ATen/ATen.h with every operator's declaration, parsed four
times by nvcc (two preprocessor passes, cudafe++, the host compile). A typical candidate calls a
handful of torch functions (in the corpus's 739 load_inline candidates: Tensor 692 rows,
empty 210, zeros 206, empty_like 165, zeros_like 140; every other name in under 60 rows).

``narrow_header(cuda_text, include_dir)`` writes the header that serves exactly the names the
source uses: ``ATen/core/Tensor.h`` (the Tensor class with all its methods), the free tensor
operators, TORCH_CHECK, and the per-operator header ``ATen/ops/<name>.h`` of every identifier in
the source that is called and names an operator (qualified or not: an unqualified call on a Tensor
finds ``at::<name>`` by argument-dependent lookup, so its declaration must be there too), each
as torch's installed header minus its includes of HEAVY_PREAMBLE. Every ``torch::`` factory whose
operator header is included gets torch's own overload set, rewritten from the installed
``variable_factories.h`` without ``autograd/variable.h`` (factory_wrappers). The source gets None
— build it with the full headers — when it names something else under ``torch::`` / ``at::`` /
``c10::`` that this header does not declare. Comments and literals are skipped by a linear
scanner (_code), so a name in a message is not a use and no input makes the scan slow.

What it does not guarantee by itself (found by an adversarial review, reproduced with nvcc;
bench/narrow_controls/): a subset of torch's declarations can change what a source means
without a compile error --
- an overload defined only in ATen/Functions.h (``at::var(x, int dim)``, ``std``, ``var_mean``,
  ``std_mean``) is missing, so ``torch::var(x, 1)`` binds to ``var(x, bool unbiased)``;
- argument-dependent lookup can reach c10 functions in headers left out (``c10::load`` from
  c10/util/Load.h beats a user's ``load`` for ``c10::Half*`` in the full set, not here) — device
  code differs;
- macros of left-out headers (``CHECK``/``LOG`` of c10/util/Logging.h) change ``#ifdef`` branches;
- a user function colliding with a left-out declaration (``numel``) is ambiguous in the full set
  but compiles here.
Hence every narrow build is checked against the fast build's headers while it compiles
(kverify._internal.declset, run by kverify._internal.pnvcc on each preprocessing step: the
source's own code must preprocess to the same tokens, and every name it uses must have the same
declarations where its lookups can reach); a difference fails the narrow build and the fast
build runs. Both controls are refused that way, naming ``load`` and ``std``/``var``
(tests/test_declset.py). Sources calling ``Tensor::type()`` are refused here already (their
AT_DISPATCH needs a conversion only the full set declares). Device-code flags are untouched.
"""
from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

#: names under torch:: / at:: / c10:: that ATen/core/Tensor.h (with its c10 includes) declares,
#: or that the aliases below add
SERVED_TYPES = frozenset({
    "Tensor", "TensorBase", "TensorOptions", "ScalarType", "Dtype", "IntArrayRef", "SymIntArrayRef", "ArrayRef",
    "OptionalArrayRef", "MemoryFormat", "Layout", "Device", "DeviceType", "Scalar", "Half", "BFloat16",
    "optional", "nullopt", "dtype", "device", "layout", "TensorList", "ITensorListRef", "Storage", "SymInt",
    "kCUDA", "kCPU", "kStrided", "kFloat", "kDouble", "kHalf", "kBFloat16", "kInt", "kLong", "kShort", "kChar",
    "kByte", "kBool", "kComplexFloat", "kComplexDouble", "kUInt16", "kUInt32", "kUInt64",
    "kUInt8", "kInt8", "kInt16", "kInt32", "kInt64", "kFloat16", "kFloat32", "kFloat64",
    "kU8", "kU16", "kU32", "kU64", "kI8", "kI16", "kI32", "kI64", "kF16", "kF32", "kF64",
    "irange", "Error", "ValueError", "IndexError", "TypeError", "NotImplementedError", "elementSize",
    "toString", "typeMetaToScalarType", "scalarTypeToTypeMeta", "isFloatingType", "isComplexType",
    "isIntegralType", "CppTypeToScalarType", "impl", "detail", "cuda",
})
#: the usual factories torch:: wraps with its own requires_grad handling (the full list is read
#: from torch's variable_factories.h; this one stands in when that file is missing)
TORCH_FACTORIES = frozenset({
    "arange", "empty", "empty_like", "empty_strided", "eye", "full", "full_like", "from_blob", "linspace",
    "logspace", "normal", "ones", "ones_like", "rand", "rand_like", "randint", "randint_like", "randn",
    "randn_like", "randperm", "range", "scalar_tensor", "tensor", "zeros", "zeros_like",
})
_QUALIFIED = re.compile(r"\b(torch|at|c10)\s*::\s*(\w+)")
_CALLED = re.compile(r"\b([A-Za-z_]\w*)\s*(?:<[^<>;()]*>)?\s*\(")
_RAW_OPEN = re.compile(r'R"([^()\\\s]{0,16})\(')


@lru_cache(maxsize=4)
def operator_names(include_dir: str) -> frozenset[str]:
    """Names with a per-operator header ATen/ops/<name>.h under ``include_dir`` (torch's include folder)."""
    ops = Path(include_dir) / "ATen" / "ops"
    suffixes = ("_ops", "_native", "_meta", "_dispatch", "_meta_dispatch")
    return frozenset(p.stem for p in ops.glob("*.h") if not p.stem.endswith(suffixes) and "_dispatch" not in p.stem)


def _in_number(text: str, i: int) -> bool:
    """True when text[i] continues a numeric literal (the word before it starts with a digit)."""
    j = i
    while j > 0 and (text[j - 1].isalnum() or text[j - 1] in "_'."):
        j -= 1
    return j < i and text[j].isdigit()


def _code(text: str) -> str:
    """The source as code only, in one linear pass: line splices (backslash-newline) joined,
    comments replaced by a space, string, raw-string and character literals by empty ones
    (a name in a message is not a use). An unterminated comment or literal ends the text."""
    text = text.replace("\\\r\n", "").replace("\\\n", "")
    out: list[str] = []
    i, n, start = 0, len(text), 0
    while i < n:
        c = text[i]
        if c == "/" and text.startswith("//", i):
            j = text.find("\n", i)
            out.append(text[start:i] + " ")
            i = start = n if j < 0 else j
        elif c == "/" and text.startswith("/*", i):
            j = text.find("*/", i + 2)
            out.append(text[start:i] + " ")
            i = start = n if j < 0 else j + 2
        elif c == "R" and text.startswith('R"', i) and (m := _RAW_OPEN.match(text, i)):
            j = text.find(")" + m.group(1) + '"', m.end())
            out.append(text[start:i] + '""')
            i = start = n if j < 0 else j + len(m.group(1)) + 2
        elif c == "'" and _in_number(text, i):  # a digit separator (1'000'000), not a literal
            i += 1
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(text[start:i] + c + c)
            i = start = min(j + 1, n)
        else:
            i += 1
    out.append(text[start:])
    return "".join(out)


#: includes of every ATen/ops/<name>.h that none of its declarations needs (measured: ATen/ops/
#: empty.h adds 6.5 s to an nvcc compile of ATen/core/Tensor.h, almost all of it these headers)
HEAVY_PREAMBLE = ("ATen/Context.h", "ATen/DeviceGuard.h", "ATen/TensorUtils.h", "ATen/TracerMode.h")
_FACTORY = re.compile(r"^inline at::Tensor (\w+)\((.*?)\) \{\n(.*?)\n\}\n", re.M | re.S)
_FACTORY_BODY = re.compile(r"\s*at::AutoDispatchBelowADInplaceOrView guard;\s*return autograd::make_variable\("
                           r"(.*), /\*requires_grad=\*/options\.requires_grad\(\)\);\s*", re.S)
#: Tensor::type() (DeprecatedTypeProperties) passed to AT_DISPATCH needs a conversion that only the
#: full headers declare (2 of 60 corpus sources failed the narrow build so, bench/cu_headers.py)
_DEPRECATED_TYPE = re.compile(r"\.\s*type\s*\(\s*\)")
_AT_CALL = re.compile(r"\bat::(\w+)\(")


def light_op_header(include_dir: str, name: str) -> str:
    """torch's ATen/ops/<name>.h (installed under ``include_dir``) without the HEAVY_PREAMBLE
    includes: the same declarations, text for text. Raises OSError when the header is missing."""
    text = (Path(include_dir) / "ATen" / "ops" / f"{name}.h").read_text()
    kept = [ln for ln in text.splitlines() if not any(ln.strip() == f"#include <{h}>" for h in HEAVY_PREAMBLE)]
    return (f"// kverify narrow build: torch's ATen/ops/{name}.h without its includes of "
            f"{', '.join(HEAVY_PREAMBLE)}\n// (no declaration here uses them); written at build time.\n"
            + "\n".join(kept) + "\n")


@lru_cache(maxsize=4)
def factory_wrappers(include_dir: str) -> tuple[dict[str, list[str]], frozenset[str]]:
    """The torch:: factories of torch's variable_factories.h, by name, each overload rewritten to
    call kverify_narrow::variable instead of torch::autograd::make_variable (whose header,
    torch/csrc/autograd/variable.h, is most of that file's compile time). Names with any overload
    of another form (tensor, from_blob) are left out: a source calling them gets torch's file.
    Returns (wrappers by name, the names left out)."""
    path = Path(include_dir) / "torch" / "csrc" / "autograd" / "generated" / "variable_factories.h"
    try:
        text = path.read_text()
    except OSError:
        return {}, frozenset(TORCH_FACTORIES)
    out: dict[str, list[str]] = {}
    odd: set[str] = set()
    for m in _FACTORY.finditer(text):
        name, params, body = m.groups()
        b = _FACTORY_BODY.fullmatch(body)
        if not b:
            odd.add(name)
            continue
        out.setdefault(name, []).append(
            f"inline at::Tensor {name}({params}) {{\n  at::AutoDispatchBelowADInplaceOrView guard;\n"
            f"  return ::kverify_narrow::variable({b.group(1)}, options.requires_grad());\n}}")
    return {k: v for k, v in out.items() if k not in odd}, frozenset(odd)


def narrow_files(cuda_text: str, include_dir: str) -> dict[str, str] | None:
    """The headers that declare what ``cuda_text`` (the extension's CUDA sources, joined) uses
    from torch, by path relative to the folder passed with -I, or None when it uses a torch name
    this module does not serve.

    Files: ``torch/types.h`` and ``torch/extension.h`` (the same text: Tensor, its methods and
    operators, TORCH_CHECK, the called operators, the ``torch::`` aliases and factories), and
    ``ATen/ops/<name>.h`` for each operator header they include (light_op_header).

    Args:
        cuda_text: the CUDA sources as load_inline receives them (str, joined if a list).
        include_dir: torch's include folder (torch.utils.cpp_extension.include_paths()[0]).
    """
    code = _code(cuda_text)
    if _DEPRECATED_TYPE.search(code):
        return None
    ops = operator_names(include_dir)
    needed: set[str] = set()
    for _, name in _QUALIFIED.findall(code):
        if name in ops:
            needed.add(name)
        elif name not in SERVED_TYPES:
            return None
    needed |= {n for n in _CALLED.findall(code) if n in ops}
    wrappers, odd = factory_wrappers(include_dir)
    needed.add("empty_like")  # ATen/TensorOperators.h includes it
    # every factory whose header is included gets torch's wrapper, named in the source or not:
    # torch::X must never fall through to at::X (a name the scan missed would do that)
    while True:
        light = sorted(n for n in needed if n in wrappers)
        more = {c.removesuffix("_symint") for n in light for w in wrappers[n] for c in _AT_CALL.findall(w)} & ops
        if more <= needed:
            break
        needed |= more
    heavy_factories = [n for n in needed if n in odd]
    if heavy_factories:
        light = []
    lines = [
        "// kverify narrow torch header (kverify/_internal/narrow.py): generated for one extension's",
        "// CUDA sources; serves <torch/types.h> and <torch/extension.h> there. Full headers on any error.",
        "#ifndef KVERIFY_NARROW_TORCH_H",
        "#define KVERIFY_NARROW_TORCH_H",
        "#ifndef AT_PER_OPERATOR_HEADERS",
        "#define AT_PER_OPERATOR_HEADERS",
        "#define KVERIFY_NARROW_SET_PER_OP",
        "#endif",
        "#include <ATen/core/Tensor.h>",
        "#include <ATen/core/LegacyTypeDispatch.h>",
        "#include <ATen/TensorOperators.h>",
        "#include <c10/util/Exception.h>",
        "#include <c10/util/irange.h>",
    ]
    if "AT_DISPATCH" in code:
        lines.append("#include <ATen/Dispatch.h>")
    lines += [f"#include <ATen/ops/{n}.h>" for n in sorted(needed)]
    if heavy_factories:
        lines.append("#include <torch/csrc/autograd/generated/variable_factories.h>")
    lines += [
        "#ifdef KVERIFY_NARROW_SET_PER_OP",
        "#undef AT_PER_OPERATOR_HEADERS",
        "#undef KVERIFY_NARROW_SET_PER_OP",
        "#endif",
        "namespace kverify_narrow {",
        "// torch::autograd::make_variable(t, requires_grad) for the tensor a factory has just made",
        "// (its only owner): the same TensorImpl, given autograd metadata only when requires_grad.",
        "inline at::Tensor variable(at::Tensor t, bool requires_grad) {",
        "  if (requires_grad) t.set_requires_grad(true);",
        "  return t;",
        "}",
        "}  // namespace kverify_narrow",
        "namespace torch {",
        "using namespace at;  // torch/types.h does the same",
        "using Dtype = at::ScalarType;",
    ]
    # the dtype aliases torch/types.h defines (names of the public C++ API)
    for alias, target in (("kUInt8", "kByte"), ("kInt8", "kChar"), ("kInt16", "kShort"), ("kInt32", "kInt"),
                          ("kInt64", "kLong"), ("kFloat16", "kHalf"), ("kFloat32", "kFloat"), ("kFloat64", "kDouble"),
                          ("kU8", "kByte"), ("kI8", "kChar"), ("kI16", "kShort"), ("kI32", "kInt"), ("kI64", "kLong"),
                          ("kF16", "kHalf"), ("kF32", "kFloat"), ("kF64", "kDouble"), ("kU16", "kUInt16"),
                          ("kU32", "kUInt32"), ("kU64", "kUInt64")):
        lines.append(f"constexpr auto {alias} = at::{target};")
    for n in light:  # every overload of each factory the source names: the same overload set as torch's
        lines += wrappers[n]
    lines += ["}  // namespace torch", "#endif", ""]
    header = "\n".join(lines)
    files = {"torch/types.h": header, "torch/extension.h": header}
    try:
        files.update({f"ATen/ops/{n}.h": light_op_header(include_dir, n) for n in sorted(needed)})
    except OSError:
        return None
    return files


def narrow_header(cuda_text: str, include_dir: str) -> str | None:
    """The text of narrow_files' torch/types.h (None when the source is not served)."""
    files = narrow_files(cuda_text, include_dir)
    return files["torch/types.h"] if files else None


def write_shim(folder: Path, files: dict[str, str]) -> Path:
    """Write ``files`` (relative path -> text, from narrow_files) under ``folder``; returns
    ``folder`` (pass it with -I, ahead of torch's include folders)."""
    for rel, text in files.items():
        p = folder / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        if not p.exists() or p.read_text() != text:
            p.write_text(text)
    return folder
