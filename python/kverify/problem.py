"""KernelBench problems: loading a reference file and a candidate file, free dimensions, input
specifications, weights and the fp64 oracle.

A reference file defines ``class Model``, module-level size constants, ``get_inputs()`` and
``get_init_inputs()``; a candidate file defines ``class ModelNew``. Free dimensions are the
top-level integer constants that ``get_inputs``/``get_init_inputs`` read (directly or through
other top-level functions); rebinding them in the module namespace gives new shapes.
"""
from __future__ import annotations

import ast
import copy
import functools
import hashlib
import math
import sys
import threading
import time
import types
from dataclasses import dataclass, field

import torch

from kverify._internal import memory_wait
from kverify.engine import Dist
from kverify.errors import BudgetSpent, LoadError
from kverify.journal import BUDGET_MARK


#: torch's global RNG and a problem's module globals (its free dimensions) are process-wide state.
#: kverify runs several checks as threads of one process (controls, demo), so every seeded draw
#: (manual_seed + get_inputs / get_init_inputs / Model(...)) and every bind-then-run of the
#: reference holds this lock: one check's manual_seed can never land between another's seeding
#: and its draws (which silently gave the parent other weights than the worker: a false FAIL).
STATE_LOCK = threading.RLock()

#: torch's seed while a reference file loads (Problem): the same module-level draws in the check's
#: process and its workers, whose candidate may read them (Problem.namespace; a review's find, stop 41)
LOAD_SEED = 0
_MISSING = object()


def derive_seed(seed: int, label: str) -> int:
    """A 63-bit seed derived from (seed, label) — stable across processes and machines."""
    h = hashlib.sha256(f"{seed}/{label}".encode()).digest()
    return int.from_bytes(h[:8], "little") & (2**63 - 1)


def _compile(source: str, path: str, what: str) -> types.CodeType:
    try:
        return compile(source, path, "exec")
    except SyntaxError as e:
        raise LoadError(path, f"{what} is not valid Python: {e.msg} (line {e.lineno})") from None


def exec_module(source: str, path: str, name: str, what: str, inherit: dict | None = None) -> types.ModuleType:
    """Execute ``source`` as a fresh module named ``name``, its namespace first given ``inherit``
    (a candidate: the reference module's names, Problem.namespace). Raises LoadError naming ``path``
    when it does not parse or raises while running (e.g. a compile error in ``load_inline``)."""
    code = _compile(source, path, what)
    mod = types.ModuleType(name)
    mod.__file__ = path
    mod.__dict__.update(inherit or {})
    sys.modules[name] = mod  # some files pickle or inspect their own module
    try:
        exec(code, mod.__dict__)
    except SystemExit as e:
        raise LoadError(path, f"{what} called exit({e.code}) while loading") from None
    except Exception as e:  # noqa: BLE001 — any failure of foreign code is a load error
        msg = str(e).strip().splitlines()
        first = next((l for l in msg if "error" in l.lower()), msg[0] if msg else "")
        if "CUDA_HOME" in str(e) and torch.version.cuda is None:  # torch's hint cannot help here
            raise LoadError(path, f"{what} builds a CUDA extension and this torch has no CUDA "
                                  f"({torch.__version__}): it needs a CUDA build of torch and a GPU, and is "
                                  f"not judged here", detail=str(e)[-4000:]) from None
        raise LoadError(path, f"{what} raised {type(e).__name__} while loading: {first[:300]}",
                        detail=str(e)[-4000:]) from None
    return mod


def borrowed_names(source: str, path: str, reference: types.ModuleType) -> list[str]:
    """The names a candidate's code reads as globals (symtable: a module-level read, a free name
    of a class body, or a global read in a function), never binds at its own top level (an
    assignment, import, def or class there, or a ``global`` name bound in a function), that are
    not builtins and that the reference's module defines (not a dunder name such as ``__file__``,
    which the candidate's module has of its own), sorted; [] when the source does not
    parse (exec_module reports that). The report's meta.borrowed: what the candidate takes from
    the reference's file (the loader gives it every name of that file: Problem.namespace; a name
    also bound somewhere in the candidate, e.g. after its use, is loaded right but not listed).
    KernelBench's harness runs the reference's file and then the candidate's in one namespace
    (``load_original_model_and_inputs`` and ``load_custom_model`` sharing one ``context`` dict in
    KernelBench's ``eval_kernel_against_ref``), so a candidate it accepted may read the
    reference's constants (``batch_size``, ``hardtanh_min``) or helpers (``to_2tuple``): audit
    rows kbleaderboard/deepseek-coder/L2/P10, L3/P29 and claude-3.5-sonnet/L3/P33 raised NameError
    loaded alone (stop 41). A name the code reads only through ``globals()`` or ``eval`` is not
    seen. ``path`` names the source in symtable's errors."""
    import builtins
    import symtable

    try:
        top = symtable.symtable(source, path, "exec")
    except (SyntaxError, ValueError):
        return []
    bound, read = set(), set()

    def binds(sym) -> bool:
        return sym.is_assigned() or sym.is_imported() or sym.is_namespace()

    for sym in top.get_symbols():
        if binds(sym):
            bound.add(sym.get_name())
        if sym.is_referenced():
            read.add(sym.get_name())
    tables = list(top.get_children())
    while tables:
        t = tables.pop()
        tables.extend(t.get_children())
        for sym in t.get_symbols():
            if sym.is_declared_global() and binds(sym):
                bound.add(sym.get_name())
            if sym.is_referenced() and (sym.is_global() or (t.get_type() == "class" and not sym.is_local())):
                read.add(sym.get_name())
    return sorted(n for n in read - bound - set(dir(builtins))
                  if n in vars(reference) and not (n.startswith("__") and n.endswith("__")))  # its own __file__


def _assignments(tree: ast.Module) -> list[tuple[tuple[str, ...], ast.expr, bool]]:
    """Top-level assignments to names, in source order: (names, value, unpack) for ``a = ...``
    (unpack False) and ``a, b = ...`` (unpack True)."""
    out = []
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            t = node.targets[0]
            if isinstance(t, ast.Name):
                out.append(((t.id,), node.value, False))
            elif isinstance(t, ast.Tuple) and t.elts and all(isinstance(e, ast.Name) for e in t.elts):
                out.append((tuple(e.id for e in t.elts), node.value, True))
    return out


def _constant(value: ast.expr, names: tuple[str, ...], unpack: bool, ns: dict) -> tuple | None:
    """The values an assignment gives ``names`` when its right-hand side is an expression of
    literals and earlier constants (``ns``; no builtins, no calls of anything else), else None."""
    try:
        val = eval(compile(ast.Expression(value), "<dim>", "eval"), {"__builtins__": {}}, dict(ns))
    except Exception:  # noqa: BLE001 — not a constant expression
        return None
    if not unpack:
        return (val,)
    if not isinstance(val, (tuple, list)) or len(val) != len(names):
        return None
    return tuple(val)


def free_dimensions(source: str) -> dict[str, int]:
    """Top-level integer constants (``n = 4096``, ``d, h, w = 16, 32, 32``, or expressions of
    earlier constants) read by get_inputs/get_init_inputs (or by top-level functions they call)."""
    tree = ast.parse(source)
    ns: dict[str, object] = {}
    consts: dict[str, int] = {}
    for names, value, unpack in _assignments(tree):
        vals = _constant(value, names, unpack, ns)
        for name in names:
            ns.pop(name, None)
            consts.pop(name, None)
        if vals is None:
            continue
        for name, val in zip(names, vals):
            ns[name] = val
            if isinstance(val, int) and not isinstance(val, bool):
                consts[name] = val
    used = names_reached(tree, ("get_inputs", "get_init_inputs"))
    return {k: v for k, v in consts.items() if k in used}


def names_reached(tree: ast.Module, roots: tuple[str, ...], kinds: tuple = (ast.FunctionDef,)) -> set[str]:
    """The names read (ast.Name) in the top-level definitions ``roots`` of ``tree`` and, through
    them, in every top-level definition of ``kinds`` (functions; classes too for a model) they
    name, transitively."""
    defs = {node.name: node for node in tree.body if isinstance(node, kinds)}
    used: set[str] = set()
    todo = [f for f in roots if f in defs]
    seen: set[str] = set()
    while todo:
        f = todo.pop()
        if f in seen:
            continue
        seen.add(f)
        for n in ast.walk(defs[f]):
            if isinstance(n, ast.Name):
                used.add(n.id)
                if n.id in defs:
                    todo.append(n.id)
    return used


def derived_constants(assignments: list[tuple[tuple[str, ...], ast.expr, bool]], dims: dict[str, int]) -> set[str]:
    """Names of the top-level constants (``assignments``: _assignments of the source) computed from
    free dimensions (``multiplier_shape = (out_channels, 1, 1, 1)``, directly or through other
    such constants) that Problem.bind evaluates again. Without it a derived constant keeps its
    default while the free dimension it came from is rebound, and the reference fails at every
    other shape."""
    derived, moving = set(), set(dims)
    for names, value, _ in assignments:
        reads = {n.id for n in ast.walk(value) if isinstance(n, ast.Name)}
        if reads & moving:
            derived |= set(names) - set(dims)
            moving |= set(names)
    return derived


@dataclass
class InputSpec:
    """One positional input: a tensor synthesised from (seed, dist) or a plain value."""

    kind: str                      # "tensor" or "value"
    shape: tuple[int, ...] = ()
    dtype: str = "float32"         # torch dtype name
    dist: Dist = field(default_factory=Dist)
    value: object = None

    def to_json(self) -> dict:
        if self.kind == "value":
            return {"kind": "value", "value": self.value}
        return {"kind": "tensor", "shape": list(self.shape), "dtype": self.dtype, "dist": self.dist.to_json()}

    @staticmethod
    def from_json(d: dict) -> "InputSpec":
        if d["kind"] == "value":
            return InputSpec("value", value=d["value"])
        return InputSpec("tensor", tuple(d["shape"]), d["dtype"], Dist.from_json(d["dist"]))

    @property
    def torch_dtype(self) -> torch.dtype:
        return getattr(torch, self.dtype)

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


#: infer_dist takes the mean and standard deviation of about this many elements of a sample (a
#: prime stride, so that it does not line up with the tensor's rows): an fp64 copy of a whole
#: GiB-sized input cost seconds per call on the H200 audit. Their third decimal (the precision
#: kept) can differ from the whole sample's.
DIST_SAMPLE = 1 << 20


def _prime_at_least(n: int) -> int:
    """The smallest prime >= n (n small: a trial division)."""
    n = max(n, 2)
    while any(n % p == 0 for p in range(2, math.isqrt(n) + 1)):
        n += 1
    return n


def infer_dist(t: torch.Tensor) -> Dist:
    """A distribution resembling a sample drawn by get_inputs (torch.rand, randn, randint...): the
    integer range, or uniform on [0, 1) / [0, ceil(max)) when no element is negative, else a normal
    with the sample's mean and standard deviation (of about DIST_SAMPLE elements at a prime
    stride; the range is always the whole sample's)."""
    if t.dtype == torch.bool:
        return Dist("uniform_int", 0, 1)
    if not t.is_floating_point():
        if t.numel() == 0:
            return Dist("uniform_int", 0, 0)
        return Dist("uniform_int", float(t.min()), float(t.max()))
    t = t.detach()
    if t.numel() == 0:
        return Dist("normal", 0.0, 1.0)
    if t.element_size() == 1:  # float8: no min/max kernels of its own
        t = t.float()
    lo_t, hi_t = torch.aminmax(t)
    lo, hi = float(lo_t), float(hi_t)
    flat = t.reshape(-1)
    step = 1 if flat.numel() <= DIST_SAMPLE else _prime_at_least(flat.numel() // DIST_SAMPLE)
    x = flat[::step].double()
    if not (math.isfinite(lo) and math.isfinite(hi)):  # NaN or Inf in the sample: the finite elements
        x = t.double()
        x = x[torch.isfinite(x)]
        if x.numel() == 0:
            return Dist("normal", 0.0, 1.0)
        lo, hi = float(x.min()), float(x.max())
    if lo >= 0.0:
        return Dist("uniform", 0.0, 1.0 if hi <= 1.0 else float(math.ceil(hi)))
    mean, std = float(x.mean()), float(x.std()) if x.numel() > 1 else 1.0
    if abs(mean) < 0.25 and 0.75 < std < 1.25:
        return Dist("normal", 0.0, 1.0)
    return Dist("normal", round(mean, 3), max(round(std, 3), 1e-3))


def _jsonable(v: object) -> bool:
    if v is None or isinstance(v, (bool, int, float, str)):
        return True
    if isinstance(v, (list, tuple)):
        return all(_jsonable(x) for x in v)
    return False


class Problem:
    """A KernelBench reference problem.

    Args:
        source: text of the reference file.
        path: where it came from (file path or ``corpus#id``), used in every error message.
        tolerance: atol = rtol of the harness's ``allclose`` (the standard test).
    Raises:
        LoadError: not valid Python, raises on load, or lacks Model / get_inputs / get_init_inputs.
    """

    def __init__(self, source: str, path: str, tolerance: float = 1e-2):
        self.source, self.path, self.tolerance = source, path, tolerance
        with STATE_LOCK:  # draws while the file loads (a module-level torch.randn) are the same in every process
            torch.manual_seed(LOAD_SEED)
            self.module = exec_module(source, path, "kverify_reference", "reference")
        #: [module, {name: value last given}]: candidates' modules whose names follow the reference's (share())
        self._sharing: list[tuple[types.ModuleType, dict[str, object]]] = []
        for name in ("Model", "get_inputs", "get_init_inputs"):
            if not hasattr(self.module, name):
                raise LoadError(path, f"reference defines no {name}")
        try:
            self.dims = free_dimensions(source)
            #: the names the reference's Model reads, through the file's functions and classes it names
            tree = ast.parse(source)
            self.model_reads = names_reached(tree, ("Model",), (ast.FunctionDef, ast.ClassDef))
            self._assignments = _assignments(tree)
            self._derived = derived_constants(self._assignments, self.dims)
            self._derived_defaults = {n: getattr(self.module, n) for n in self._derived if hasattr(self.module, n)}
        except SyntaxError as e:  # already parsed above; defensive
            raise LoadError(path, f"reference is not valid Python: {e}") from None

    def namespace(self) -> dict:
        """The reference module's names now (dunders left out), for a candidate's module to start
        from (exec_module's ``inherit``), as KernelBench's one namespace gives them (borrowed_names);
        the candidate's own top-level bindings replace them in source order."""
        return {k: v for k, v in vars(self.module).items() if not (k.startswith("__") and k.endswith("__"))}

    def share(self, module: types.ModuleType, given: dict, borrowed: list[str]) -> None:
        """Make ``module`` (a candidate's, loaded from ``given`` = namespace(); ``borrowed``: the
        names its code reads and never binds, borrowed_names) follow every bind() in those of
        them that are free dimensions or derived constants the reference's Model reads too
        (model_reads): a candidate that reads the reference's ``batch_size`` where the reference's
        model does sees each variant's. One whose reference model takes its sizes from the inputs
        keeps the file's values (its own shape fixed, which G05 is there to catch: a review's
        find, stop 41). A name the candidate bound again unseen by borrowed_names (a star import,
        ``globals()``) or assigns later (a ``global`` in a function) is left alone, now and after."""
        names = set(borrowed) & (set(self.dims) | self._derived) & self.model_reads
        self._sharing.append((module, {n: given[n] for n in names
                                       if n in given and vars(module).get(n, _MISSING) is given[n]}))
        self._share()

    def _share(self) -> None:
        for module, last in self._sharing:
            for n, was in list(last.items()):
                if vars(module).get(n, _MISSING) is not was:  # the candidate assigned it since: its own now
                    del last[n]
                elif hasattr(self.module, n):
                    last[n] = getattr(self.module, n)
                    setattr(module, n, last[n])

    def bind(self, binding: dict[str, int] | None) -> None:
        """Set free dimensions (unknown names raise LoadError) and the module constants computed
        from them (derived_constants), evaluated again; None restores the defaults. Modules
        given share() follow."""
        try:
            self._bind(binding)
        finally:
            self._share()

    def _bind(self, binding: dict[str, int] | None) -> None:
        values = {**self.dims, **(binding or {})}
        for k in values:
            if k not in self.dims:
                raise LoadError(self.path, f"'{k}' is not a free dimension (free: {sorted(self.dims)})")
        for k, v in values.items():
            setattr(self.module, k, int(v))
        for n, v in self._derived_defaults.items():  # the values the module was loaded with
            setattr(self.module, n, v)
        if not self._derived or not binding or all(int(v) == self.dims[k] for k, v in binding.items()):
            return  # nothing derived, or the defaults: as loaded (a name assigned twice keeps its import-time value)
        ns: dict[str, object] = {}  # the constants, as free_dimensions evaluates them, at this binding
        for names, value, unpack in self._assignments:
            vals = _constant(value, names, unpack, ns)
            for n, v in zip(names, vals if vals is not None else (None,) * len(names)):
                if n in self.dims:
                    ns[n] = int(values[n])
                elif vals is None:  # not a constant expression here: keeps its import-time value
                    ns.pop(n, None)
                else:
                    ns[n] = v
                    if n in self._derived:
                        setattr(self.module, n, v)

    def init_inputs(self, seed: int) -> list:
        with STATE_LOCK:
            torch.manual_seed(seed)
            try:
                init = self.module.get_init_inputs()
            except Exception as e:  # noqa: BLE001
                raise LoadError(self.path, f"get_init_inputs() raised {type(e).__name__}: {e}") from None
        if not isinstance(init, (list, tuple)):
            raise LoadError(self.path, f"get_init_inputs() must return a list, got a {type(init).__name__}")
        return list(init)

    def input_specs(self, seed: int, binding: dict[str, int] | None = None) -> list[InputSpec]:
        """Specs of get_inputs() at ``binding``: each tensor's shape, dtype and a distribution
        inferred from one sample drawn with ``seed``. Raises LoadError for unsupported inputs."""
        with STATE_LOCK:
            self.bind(binding)
            torch.manual_seed(seed)
            try:
                sample = self.module.get_inputs()
            except Exception as e:  # noqa: BLE001
                raise LoadError(self.path, f"get_inputs() raised {type(e).__name__}: {e}") from None
        if not isinstance(sample, (list, tuple)):
            raise LoadError(self.path, f"get_inputs() must return a list, got a {type(sample).__name__}")
        sample = list(sample)
        specs = []
        for i, x in enumerate(sample):
            if isinstance(x, torch.Tensor):
                specs.append(InputSpec("tensor", tuple(x.shape), str(x.dtype).replace("torch.", ""), infer_dist(x)))
            elif _jsonable(x):
                specs.append(InputSpec("value", value=x))
            else:
                raise LoadError(self.path, f"get_inputs() item {i} is a {type(x).__name__}; "
                                           "only tensors and plain values are supported")
        return specs

    def input_numel(self, seed: int, binding: dict[str, int] | None = None) -> int:
        """Elements of the tensors get_inputs() returns at ``binding``, counted on meta tensors (no
        data is drawn) when get_inputs() runs so, else from input_specs(). Raises LoadError."""
        with STATE_LOCK:
            try:
                self.bind(binding)
                return self._meta_inputs(seed, binding)[1]
            finally:
                self.bind(None)  # the defaults again, as specs_at leaves them

    def _meta_inputs(self, seed: int, binding: dict[str, int] | None) -> tuple[list | None, int]:
        """(get_inputs() on meta tensors, their elements) at ``binding``, which the caller bound
        under STATE_LOCK; when get_inputs() needs real data: (None, the elements of a sample drawn
        with ``seed``; input_specs binds again). Raises LoadError."""
        try:
            with torch.device("meta"):
                sample = self.module.get_inputs()
            return sample, sum(x.numel() for x in sample if isinstance(x, torch.Tensor))
        except Exception:  # noqa: BLE001 — a get_inputs() that needs real data: sample it
            return None, sum(s.numel for s in self.input_specs(seed, binding) if s.kind == "tensor")

    def footprint(self, binding: dict[str, int] | None = None, seed: int = 0) -> int | None:
        """Elements of the inputs, the reference model's parameters and buffers, and its outputs at
        ``binding``, counted on meta tensors (nothing allocated, nothing computed): a lower bound,
        without the outputs when the forward has no meta path or raises there (a shape the
        reference rejects, say). A get_inputs() that needs real data is sampled (with ``seed``)
        and its outputs are not counted. None when Model(...) cannot be built on meta tensors (it
        calls .item(), say) or get_inputs() raises. A binding can make the parameters alone huge
        (a kernel_size of 257 in a Conv3d: ~10^10 weights), which counting the inputs misses.
        Leaves the default binding bound."""
        with STATE_LOCK:
            try:
                self.bind(binding)
                sample, n = self._meta_inputs(seed, binding)
                model = self._meta_model()
                n += sum(t.numel() for t in model.parameters()) + sum(t.numel() for t in model.buffers())
                return n + (_meta_output_numel(model, sample) or 0)
            except Exception:  # noqa: BLE001
                return None
            finally:
                self.bind(None)

    def parameter_numel(self) -> int | None:
        """Elements of the reference model's parameters and buffers at the problem's own shape,
        counted on a model built on meta tensors (nothing allocated); None when Model(...) cannot
        be built so (it calls .item(), say)."""
        with STATE_LOCK:
            try:
                self.bind(None)
                model = self._meta_model()
                return sum(t.numel() for t in model.parameters()) + sum(t.numel() for t in model.buffers())
            except Exception:  # noqa: BLE001
                return None

    def output_numel(self) -> int | None:
        """Elements of the reference's tensor outputs at the problem's own shape, from a forward
        on meta tensors (nothing allocated, nothing computed); None where that cannot be told:
        Model(...) or get_inputs() cannot run on meta tensors, or the forward has no meta path
        (a custom op, .item()), or get_inputs() needs real data. Used by kverify.build.precompile
        for the audit's memory estimate of a check (an input of 8 channels and an output of 64
        hold 8x the memory of the input)."""
        with STATE_LOCK:
            try:
                self.bind(None)
                with torch.device("meta"):  # not _meta_inputs: its fallback draws real inputs
                    sample = self.module.get_inputs()
                return _meta_output_numel(self._meta_model(), sample)
            except Exception:  # noqa: BLE001
                return None

    def _meta_model(self) -> torch.nn.Module:
        """Model(*get_init_inputs()) on meta tensors, at the binding the caller bound under
        STATE_LOCK (nothing allocated). Raises what the constructor raises."""
        with torch.device("meta"):
            return self.module.Model(*self.module.get_init_inputs())

    def reference_model(self, seed: int, device: str) -> torch.nn.Module:
        """Model(*get_init_inputs()) with weights drawn after torch.manual_seed(seed), in eval
        mode, its modes as constructed recorded (remember_modes)."""
        with STATE_LOCK:
            init = self.init_inputs(seed)
            torch.manual_seed(seed)
            try:
                return remember_modes(self.module.Model(*init).to(device)).eval()
            except Exception as e:  # noqa: BLE001
                raise LoadError(self.path, f"Model(*get_init_inputs()) raised {type(e).__name__}: {e}") from None


def _meta_output_numel(model: torch.nn.Module, sample: list | None) -> int | None:
    """Elements of the tensors ``model`` (built on meta tensors) returns on ``sample`` (inputs on
    meta tensors; None: not available), computed on the meta device; None where the forward has
    no meta path or raises there (a shape the model rejects, say)."""
    if sample is None:
        return None
    try:
        with torch.device("meta"), torch.no_grad():
            return sum(y.numel() for y in as_outputs(model(*sample)) if isinstance(y, torch.Tensor))
    except Exception:  # noqa: BLE001 — no meta kernel, or the shape is rejected
        return None


def synthesize(specs: list[InputSpec], seed: int, device: str, dtype_override: dict | None = None) -> list:
    """Inputs from specs: tensor i is drawn from (derive_seed(seed, "input"), dist, stream i+1)
    by the core generator — the same bits in every process and on every device."""
    from kverify import engine

    s = derive_seed(seed, "input")
    out = []
    for i, sp in enumerate(specs):
        if sp.kind == "value":
            out.append(copy.deepcopy(sp.value))
            continue
        t = torch.empty(sp.shape, dtype=sp.torch_dtype, device=device)
        engine.fill(t, s, sp.dist, stream_id=i + 1)
        out.append(t)
    return out


def upcast(x):
    """fp64 copy of a float tensor (other values unchanged) — the oracle's inputs."""
    if isinstance(x, torch.Tensor) and x.is_floating_point():
        return x.detach().double()
    return x


def fp64_copy(model: torch.nn.Module) -> torch.nn.Module:
    """A float64 copy of ``model``: its floating parameters and buffers (Module.double()) and also
    the floating tensors its modules keep as plain attributes, alone or in (nested) lists, tuples
    and dicts (KernelBench's ``self.h0 = torch.randn(...)`` beside an nn.GRU or nn.LSTM:
    Module.double() leaves it float32, and the fp64 GRU then refuses an fp32 hidden state). Other
    dtypes stay. State a forward draws anew (``torch.randn(..., device=x.device)``) stays fp32.

    Functions the modules keep as attributes (public or private, alone or in lists, tuples and
    dicts; plain functions and ``functools.partial``) are rebuilt over the copy's objects wherever
    their closure cells, defaults or partial arguments hold the original's (a module, parameter,
    buffer, plain tensor, or another such function): ``copy.deepcopy`` shares functions as they
    are, so minGPT's ``self.mlpf = lambda x: m.dropout(m.c_proj(...))`` (KernelBench L3 problem
    44) called the fp32 original from the copy ("mat1 and mat2 must have the same dtype", CUDA-L1
    L3 T44 on the H200, stop 22). Bound methods deepcopy rebinds itself."""
    memo: dict = {}
    m = copy.deepcopy(model, memo).double()

    def walk(v, leaf):  # leaf() on v, or on each item of a (nested) list, tuple or dict; v itself if none changed
        if type(v) in (list, tuple):
            new = [walk(x, leaf) for x in v]
            return v if all(a is b for a, b in zip(new, v)) else type(v)(new)
        if type(v) is dict:
            new = {k: walk(x, leaf) for k, x in v.items()}
            return v if all(new[k] is v[k] for k in v) else new
        return leaf(v)

    def up(v):  # a Parameter double() converted stays shared
        if isinstance(v, torch.Tensor) and v.is_floating_point() and v.dtype != torch.float64:
            return v.detach().double()
        return v

    def each_attribute(fix) -> None:  # fix(value) -> value, on every plain attribute of the copy
        for sub in m.modules():
            for k, v in list(vars(sub).items()):
                if not k.startswith("_") or isinstance(v, (torch.Tensor, types.FunctionType, functools.partial)):
                    w = fix(v)
                    if w is not v:
                        object.__setattr__(sub, k, w)  # a plain attribute stays one (not a buffer)

    each_attribute(lambda v: walk(v, up))
    # the original's objects -> the copy's as they are now: double() replaced the buffers and up()
    # the plain tensors that deepcopy had copied (memo holds those fp32 copies)
    now: dict[int, object] = {}
    for (_, o), (_, c) in zip(model.named_modules(), m.named_modules()):
        now[id(o)] = c
        for table in ("_parameters", "_buffers"):
            for k, v in getattr(o, table).items():
                if v is not None:
                    now[id(v)] = getattr(c, table).get(k)
        for k, v in vars(o).items():
            if isinstance(v, torch.Tensor) and k in vars(c):
                now[id(v)] = vars(c)[k]
    done: dict[int, object] = {}

    def to_copy(x):
        if isinstance(x, (types.FunctionType, functools.partial)):
            return rebind(x)
        return now.get(id(x), memo.get(id(x), x))

    def conv(x):  # x as the copy should hold it (x itself when nothing of the original is in it)
        return walk(x, to_copy)

    def rebind(f):
        if id(f) in done:
            return done[id(f)]
        done[id(f)] = f  # a function reached again through its own closure keeps the original (a cycle)
        if isinstance(f, functools.partial):
            func, args, kw = conv(f.func), tuple(conv(a) for a in f.args), {k: conv(v) for k, v in f.keywords.items()}
            same = func is f.func and all(a is b for a, b in zip(args, f.args)) and \
                all(kw[k] is f.keywords[k] for k in kw)
            g = f if same else functools.partial(func, *args, **kw)
        else:
            cells = []
            for c in f.__closure__ or ():
                try:
                    cells.append((True, c.cell_contents))
                except ValueError:  # a cell not bound yet
                    cells.append((False, None))
            new = [(full, conv(x) if full else None) for full, x in cells]
            defaults = conv(f.__defaults__) if f.__defaults__ else f.__defaults__
            kwdefaults = conv(f.__kwdefaults__) if f.__kwdefaults__ else f.__kwdefaults__
            if all(a[1] is b[1] for a, b in zip(new, cells)) and defaults is f.__defaults__ \
                    and kwdefaults is f.__kwdefaults__:
                g = f
            else:
                g = types.FunctionType(f.__code__, f.__globals__, f.__name__, defaults,
                                       tuple(types.CellType(x) if full else types.CellType() for full, x in new))
                g.__kwdefaults__, g.__dict__ = kwdefaults, dict(f.__dict__)
        done[id(f)] = g
        return g

    each_attribute(conv)
    # to_copy, conv and rebind close over each other (a cycle only the garbage collector frees):
    # empty what they hold, or memo's fp32 copies of the buffers would stay until it runs
    memo.clear()
    now.clear()
    done.clear()
    return m


#: G09's name for the run in the modes as built (built_mode), in its perturbations
MODE_RUN = "training mode"

#: A built model's attribute: each submodule's ``training`` flag as its constructor left it
#: (remember_modes), the mode a harness that never calls train() or eval() runs it in.
BUILT_MODES = "_kverify_built_modes"


def remember_modes(model: torch.nn.Module) -> torch.nn.Module:
    """Record on ``model`` (BUILT_MODES, a plain attribute) each submodule's ``training`` flag as
    constructed, before the gates put it in eval mode; returns ``model``. A submodule without the
    flag is left out: a frozen TorchScript module (``torch.jit.freeze``/``optimize_for_inference``)
    has none and raises AttributeError when it is read (audit row cudal1/h20/L3/T24)."""
    model.__dict__[BUILT_MODES] = {name: m.training for name, m in model.named_modules()
                                   if hasattr(m, "training")}
    return model


def set_built_modes(model: torch.nn.Module) -> torch.nn.Module:
    """Put every submodule of ``model`` in the mode its constructor left it (remember_modes;
    training where nothing was recorded), as KernelBench's harness runs it; returns ``model``.
    For a model built for that run alone: a training-mode call changes state (BatchNorm's running
    statistics, whether updated in place or reassigned) that later eval-mode runs must not see."""
    modes = model.__dict__.get(BUILT_MODES, {})
    for name, m in model.named_modules():
        if hasattr(m, "training"):  # not a frozen TorchScript module (remember_modes)
            m.training = modes.get(name, True)
    return model


def as_outputs(y) -> list:
    """A model's return value as a list of outputs."""
    if isinstance(y, (list, tuple)):
        return list(y)
    return [y]


def container(y) -> str:
    """How a model returns its outputs: "tensor" (a bare value), "tuple" or "list"."""
    return "tuple" if isinstance(y, tuple) else ("list" if isinstance(y, list) else "tensor")


class Oracle:
    """The reference in float64 on upcast inputs/parameters/buffers (and tensors kept as plain
    attributes: fp64_copy), plus the low-precision
    reference itself (its error against the oracle calibrates the accuracy bounds)."""

    def __init__(self, problem: Problem, seed: int, device: str):
        self.problem, self.seed, self.device = problem, seed, device
        self._models: dict[str, tuple[torch.nn.Module, torch.nn.Module]] = {}
        self.container = "tensor"  #: how the reference returns its outputs (see container())
        self.stage: str | None = None  #: which model of run() raised, if one did (see run())
        #: time.monotonic() past which run() and run_fp64() raise BudgetSpent (None: no limit), and
        #: the budget in seconds it came from (for the message); set by limit()
        self.deadline: float | None = None
        self.budget: float | None = None
        #: oracle and reference runs that ran out of GPU memory and ran again (retrying(); the
        #: report's meta.memory_waits)
        self.memory_waits = 0
        self._count_lock = threading.Lock()

    def limit(self, deadline: float | None, budget: float | None) -> None:
        """Refuse oracle runs that would start after ``deadline`` (time.monotonic() seconds): the
        check's budget (kverify.check) bounds the parent's reference runs as the sandbox's deadline
        bounds the candidate's calls. A run already started is not interrupted."""
        self.deadline, self.budget = deadline, budget

    def check_budget(self) -> None:
        """Raise BudgetSpent when the deadline set by limit() has passed: called before each oracle
        run, and by gates before other reference runs of the parent's (G04, G09)."""
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise BudgetSpent(f"{BUDGET_MARK} ({self.budget:g} s) was spent before an oracle or reference run "
                              "of this gate")

    def models(self, binding: dict | None = None) -> tuple[torch.nn.Module, torch.nn.Module]:
        """(the reference model at the problem's dtype, its float64 copy) at ``binding`` (None: the
        problem's own shape), built once per binding from the seeded weights and cached."""
        key = repr(sorted((binding or {}).items()))
        with STATE_LOCK:
            if key not in self._models:
                self.problem.bind(binding)
                ref = self.problem.reference_model(self.seed, self.device)
                self._models[key] = (ref, fp64_copy(ref))
            return self._models[key]

    def forget(self, binding: dict | None) -> None:
        """Drop the models built for ``binding`` (models() builds them again if asked): G05 builds
        a pair per shape variant, on the GPU, which nothing needs once it is judged."""
        with STATE_LOCK:
            self._models.pop(repr(sorted((binding or {}).items())), None)

    @torch.no_grad()
    def run_fp64(self, inputs: list, binding: dict | None = None, transform=None) -> list:
        """The fp64 oracle's outputs for ``inputs``, each float input upcast and then passed
        through ``transform`` (a map of fp64 tensors, e.g. replacing ±Inf by ±M; G03's limit probes).
        Raises BudgetSpent past the deadline set by limit(). Out of GPU memory it runs again
        after a pause, as run() does."""
        return self.retrying(lambda: self._run_fp64(inputs, binding, transform), inputs)

    def retrying(self, fn, inputs: list = ()):
        """``fn()`` (a run of the reference or its fp64 copy, in this process) run again after a
        pause where it runs out of GPU memory (kverify._internal.memory_wait.retry): while the
        process has pausing time, at most memory_wait.RERUNS times, only where the deadline set
        by limit() leaves room, and not where the failed try wrote into a tensor of ``inputs``
        (those ``fn`` passes on without a copy: _untouched); each retry counted in memory_waits.
        Raises what ``fn`` raises once it is not run again. Used by run(), run_fp64() and the
        gates' own reference runs (G04, G09)."""
        return memory_wait.retry(fn, self.deadline, self._after_oom, self._untouched(list(inputs)))

    def _after_oom(self) -> None:
        """Count a retry of a run that ran out of GPU memory (retrying, memory_wait.retry), under a
        lock of its own: STATE_LOCK may be held for minutes by another thread's judging (G09)."""
        with self._count_lock:
            self.memory_waits += 1

    @staticmethod
    def _untouched(inputs: list):
        """A check, for memory_wait.retry's ``may_retry``, that no tensor of ``inputs`` whose
        storage the oracle shares (upcast passes fp64 tensors on detached, integer, bool and
        complex ones as they are) was written to since this call (its version counter, which
        detach() shares): a try that wrote into one before running out of memory is not retried
        (the next try would see other inputs), and nothing is copied. An inference tensor
        (torch.inference_mode) keeps no version counter: with one among them, no try runs again."""
        shared = [x for x in inputs
                  if isinstance(x, torch.Tensor) and (x.dtype == torch.float64 or not x.is_floating_point())]
        try:
            seen = [x._version for x in shared]
        except RuntimeError:  # "Inference tensors do not track version counter"
            return lambda: False
        return lambda: all(x._version == v for x, v in zip(shared, seen))

    def _run_fp64(self, inputs: list, binding: dict | None, transform) -> list:
        self.check_budget()
        xs = [upcast(x) for x in inputs]
        if transform is not None:
            xs = [transform(x) if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in xs]
        with STATE_LOCK:  # the model may read its module's free dimensions while it runs
            _, ora = self.models(binding)
            self.problem.bind(binding)
            high = as_outputs(ora(*xs))
        return [h.detach() if isinstance(h, torch.Tensor) else h for h in high]

    @torch.no_grad()
    def run(self, inputs: list, binding: dict | None = None) -> tuple[list, list]:
        """(oracle outputs in fp64, reference outputs at the problem's dtype) for ``inputs``.
        Raises BudgetSpent past the deadline set by limit(), and what the models raise; ``stage``
        then says which raised ("reference" or "oracle", the fp64 copy; None after a run that
        ended). Out of GPU memory (another check holds it, in an audit) it runs again, the same
        models on the same inputs, after a pause, while the process has pausing time and the
        deadline room (kverify._internal.memory_wait; memory_waits counts the retries); not where
        the failed try wrote into an input it shares with the caller (_untouched). A reference
        whose forward changes its own state before running out of memory runs on from there."""
        return self.retrying(lambda: self._run(inputs, binding), inputs)

    def _run(self, inputs: list, binding: dict | None) -> tuple[list, list]:
        self.stage = None
        self.check_budget()
        with STATE_LOCK:  # the model may read its module's free dimensions (or draw) while it runs
            ref, ora = self.models(binding)
            self.problem.bind(binding)
            self.stage = "reference"
            raw = ref(*[x.clone() if isinstance(x, torch.Tensor) else x for x in inputs])
            self.container = container(raw)
            low = as_outputs(raw)
            self.stage = "oracle"
            high = as_outputs(ora(*[upcast(x) for x in inputs]))
            self.stage = None
        return [h.detach() if isinstance(h, torch.Tensor) else h for h in high], \
               [l.detach() if isinstance(l, torch.Tensor) else l for l in low]
