"""Specs are data: the one place that says what a spec value may become in generated code.

Two halves, one module:

* **Typed values.** The rules every spec value must satisfy before an emitter sees it: names (a strict
  pattern, no Python keyword, builtin or name the generated modules use), dtype names (fixed tables),
  numbers (finite, bounded), free text (emitted only as a literal: `repr`, `docstring`, `comment`).
  The loader and the model apply them at the value's line and column; emitters never see a value that
  broke one.
* **The audit.** `audit_module` parses every generated module with `ast` before anything is written
  (`generate.write`, and `validate` on what it renders) and rejects whatever lies outside what the templates emit: imports from other
  modules, dunder or private attributes, names that are neither bound in the module nor allowlisted
  builtins, builtins like `eval` or `open`, attributes of `torch` / `T` / `st` outside their tables,
  bindings that shadow an imported name or a builtin. So a new emitter, or a new spec field that reaches
  code unchecked, cannot reopen the hole: what it lets through never reaches a file.

The limits the loader and the expression parser enforce live here too, so that the documentation
(docs/spec-language.md, "What is guaranteed") has one source.
"""
from __future__ import annotations

import ast
import builtins
import keyword
import math
import re
from functools import lru_cache
from pathlib import Path
from typing import Dict, Iterable, Optional

# -- limits -------------------------------------------------------------------------------------------
MAX_FILE_BYTES = 256 * 1024      # a spec file; the largest shipped one is 6.5 KB
MAX_YAML_DEPTH = 32              # nested mappings and sequences
MAX_YAML_NODES = 20_000          # nodes of one file, counting those reached through aliases
MAX_ALIAS_NODES = 1_000          # nodes reached through aliases, in all (a billion laughs stops here)
MAX_NUMBER_CHARS = 32            # characters of a number in YAML or in an expression
MAX_INT = 2 ** 63 - 1            # |integer| in a spec
MAX_EXPR_CHARS = 1_000           # characters of one expression or compute statement
MAX_EXPR_DEPTH = 32              # nesting of an expression tree (parentheses, operators, calls)
MAX_NAME_CHARS = 64              # characters of a name
MAX_SIZE = 2 ** 31 - 1           # a size, block, group or extent: kernels index in int32
MAX_VARIANTS = 256               # generated variants of one op (each is a kernel factory per profile)
FLOAT32_MAX = 3.4028234663852886e38
MAX_LISTED = 8                   # names an error message lists before "... (N in all)"

# -- names --------------------------------------------------------------------------------------------
NAME = re.compile(r"[a-z][a-z0-9_]*")          # op, family, params, axes, tensors, values, formats, archs
DIM_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
KEYWORDS = frozenset(keyword.kwlist) | {"_", "case", "match", "type"}     # with the soft keywords
BUILTINS = frozenset(n for n in dir(builtins) if not n.startswith("_"))
# names that generated modules define or import (templates, printers, kernel lowering, runtime helpers)
GENERATED_NAMES = frozenset({
    "T", "T_", "tilelang", "tilelang_", "torch", "torch_", "kernel", "kernel_", "tkgen", "tkgen_generated",
    "hypothesis", "st", "typing", "Optional",
    "OP", "OpInfo", "InputInfo", "OutputInfo", "ParamInfo", "allocate", "check", "run", "registry", "site_of",
    "bank_pad", "pad_pow2", "pick_block", "fit_rows", "fit_threads", "vector_granule", "choose", "edges", "rows",
    "tensor_recipe",
    "with_codec", "cases",
    "draw", "max_rows", "recipe", "inputs", "shapes", "variant", "outs", "res", "grads", "ctx",
    "TARGET", "PASS_CONFIGS", "COMPILE_FLAGS", "VARIANTS", "WRITTEN_ROWS", "REQUIRES", "EXAMPLES", "ARCHS",
    "FUNCTIONAL", "pid", "threads", "tile_elems", "vector_bytes", "order_key", "arch_for_capability", "ARCH",
    "MODULE", "KNOBS",
    "blocks", "bid", "tile", "part", "specialize", "by_variant",
})
# dims may be called T: the kernel lowering renames it T_ (tkgen/spec/pyexpr.py: sym)
RENAMED_DIMS = frozenset({"T"})
# local names of kernel factories: <prefix>_<axis> and <prefix>_<input>
AXIS_PREFIXES = ("N", "B", "b", "i", "block")
INPUT_PREFIXES = ("STORAGE", "LOAD")
# what a persistent schedule adds per row sum: the tensor scratch_<output> of per-block partial sums, the
# buffer carry_<output> that accumulates them, and the axis blocksum_<output> of the kernel adding them
SCHEDULE_PREFIXES = ("scratch_", "carry_", "blocksum_")


def name_problem(name, kind: str = "name") -> Optional[str]:
    """Why `name` cannot be a spec name of this kind (`dim` allows upper case and the dim `T`), or None."""
    pattern = DIM_NAME if kind == "dim" else NAME
    if not isinstance(name, str) or not pattern.fullmatch(name):
        return f"expected a name matching ^{pattern.pattern}$, found {short(name)}"
    if len(name) > MAX_NAME_CHARS:
        return f"a name has at most {MAX_NAME_CHARS} characters, found {len(name)}"
    if name in KEYWORDS:
        return f"{name!r} is a Python keyword; generated code could not use it as a name"
    if name in BUILTINS:
        return f"{name!r} is a Python builtin; generated code would shadow it"
    if name in GENERATED_NAMES or name in torch_prims_names():
        if not (kind == "dim" and name in RENAMED_DIMS):
            return f"{name!r} is a name the generated modules use"
    return None


def lowering_name_problem(name, axes: Iterable[str], inputs: Iterable[str]) -> Optional[str]:
    """Why `name` would collide with a local name of the kernel factories (`N_t`, `i_t`, `LOAD_x`)."""
    for prefix in AXIS_PREFIXES:
        for a in axes:
            if name == f"{prefix}_{a}":
                return f"{name!r} is the name kernels give to axis {a!r} ({prefix}_<axis>)"
    if name.startswith(SCHEDULE_PREFIXES):
        added = ", ".join(p + "<output>" for p in SCHEDULE_PREFIXES)
        return f"{name!r} starts like the names a schedule adds ({added})"
    for prefix in INPUT_PREFIXES:
        for t in inputs:
            if name == f"{prefix}_{t}":
                return f"{name!r} is the name kernels give to input {t!r} ({prefix}_<input>)"
    return None


def fragment_problem(value) -> Optional[str]:
    """Why a string cannot be part of a generated name (a structural param's value in `build_<v>`)."""
    if not isinstance(value, str) or not NAME.fullmatch(value) or len(value) > MAX_NAME_CHARS:
        return f"expected a lower-case name (^{NAME.pattern}$, at most {MAX_NAME_CHARS} characters), " \
               f"found {short(value)}"
    return None


# -- dtype names --------------------------------------------------------------------------------------
# element type name -> bytes; the torch names the runtime maps (tkgen/runtime/ops.py: TORCH_DTYPES) and
# the TileLang names kernels declare buffers with (tkgen/codegen/print_tilelang.py)
CONTAINER_DTYPES = {"float32": 4, "bfloat16": 2, "float16": 2, "float8_e4m3fn": 1, "float8_e5m2": 1,
                    "int8": 1, "uint8": 1, "int16": 2, "uint16": 2}
STORAGE_DTYPES = {"float32": 4, "bfloat16": 2, "float16": 2, "float8_e4m3fn": 1, "float8_e5m2": 1,
                  "int8": 1, "uint8": 1, "int16": 2, "uint16": 2, "int32": 4, "uint32": 4}
BACKENDS = ("cuda", "cpu")


def dtype_problem(value, table: Dict[str, int], what: str) -> Optional[str]:
    if value not in table:
        return f"expected {what} ({listing(sorted(table))}), found {short(value)}"
    return None


# -- numbers ------------------------------------------------------------------------------------------
def int_problem(value, lo: int = 1, hi: int = MAX_SIZE, what: str = "an integer") -> Optional[str]:
    """Why `value` is not an integer in [lo, hi] (booleans are not integers)."""
    if isinstance(value, bool) or not isinstance(value, int):
        return f"expected {what}, found {short(value)}"
    if not lo <= value <= hi:
        return f"expected {what} in [{lo}, {hi}], found {short(value)}"
    return None


def float_problem(value, allow_inf: bool = False, lo: float = -FLOAT32_MAX, hi: float = FLOAT32_MAX) -> Optional[str]:
    """Why `value` is not a finite number within float32's range (±inf allowed where `allow_inf`)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"expected a number, found {short(value)}"
    try:
        v = float(value)
    except OverflowError:
        return f"{short(value)} is out of a float's range"
    if math.isnan(v):
        return "NaN is not a value a spec can hold"
    if math.isinf(v) and allow_inf:
        return None
    if not lo <= v <= hi:
        return f"expected a number in [{lo:g}, {hi:g}], found {short(value)}"
    return None


# -- free text ----------------------------------------------------------------------------------------
def docstring(text: str) -> str:
    """`text` as the body of a \"\"\"...\"\"\" literal with the same value: backslashes and quotes that
    would end it are escaped (text without them is unchanged)."""
    body = str(text).replace("\\", "\\\\").replace('"""', '\\"\\"\\"')
    return body[:-1] + '\\"' if body.endswith('"') else body


def comment(text: str) -> str:
    """`text` fit for a `#` comment: line breaks and other control characters escaped."""
    text = str(text)
    return text if text.isprintable() else ascii(text)[1:-1]


def short(value, limit: int = 60) -> str:
    """A value as error messages show it: its repr, cut to `limit` characters."""
    r = repr(value)
    return r if len(r) <= limit else f"{r[:limit]}... ({len(r)} characters)"


def listing(names, limit: int = MAX_LISTED) -> str:
    """At most `limit` names, comma-separated, then how many there are."""
    names = [str(n) for n in names]
    if len(names) <= limit:
        return ", ".join(names)
    return ", ".join(names[:limit]) + f", ... ({len(names)} in all)"


def did_you_mean(name, candidates) -> str:
    """"; did you mean X?" naming the closest of `candidates` (at most three), or "" when none is close."""
    import difflib
    close = difflib.get_close_matches(str(name), [str(c) for c in candidates], n=3, cutoff=0.6)
    return f"; did you mean {' or '.join(close)}?" if close else ""


# -- the audit ----------------------------------------------------------------------------------------
class AuditError(ValueError):
    """A generated module that steps outside what the templates emit; nothing was written."""

    def __init__(self, path, node, message):
        line, col = getattr(node, "lineno", 1), getattr(node, "col_offset", 0) + 1
        self.path, self.line, self.col, self.message = path, line, col, message
        super().__init__(f"{path}:{line}:{col}: generated code rejected by the audit (tkgen/spec/safety.py): {message}")


_PKG = Path(__file__).resolve().parents[1]       # the tkgen package
# modules generated code may import, and from where each may take its names: "defined" means a name the
# module itself defines (def, class or assignment), "*" a star import
_IMPORTS = {
    ("torch", 0): "module", ("tilelang.language", 0): "module",
    ("typing", 0): {"Optional"}, ("hypothesis", 0): {"strategies"}, ("tkgen", 0): {"registry"},
    ("tkgen.runtime.schedule", 0): "defined", ("tkgen.runtime.ops", 0): "defined",
    ("tkgen.runtime.autograd", 0): "defined", ("tkgen.testing.strategies", 0): "defined",
    ("tkgen.runtime.conventions", 0): "defined", ("tkgen.runtime.fastpath", 0): "defined",
    ("tkgen.runtime.torch_prims", 0): "*",
    # generated siblings: the common helpers of a kernel or reference module, the op of a package
    ("common.tilelang_helpers", 3): "generated", ("common.torch_helpers", 3): "generated",
    ("op", 1): "generated",
}
_SAFE_BUILTINS = frozenset({
    "None", "True", "False", "bool", "int", "float", "str", "tuple", "list", "dict", "set", "frozenset",
    "len", "range", "min", "max", "abs", "isinstance", "enumerate", "zip", "sorted", "reversed", "sum", "any",
    "all", "round", "divmod", "pow", "ValueError", "TypeError", "RuntimeError", "KeyError", "IndexError",
    "NotImplementedError",
})
_MODULE_NAMES = {"__package__"}        # the one dunder a generated module reads (op.py: package=__package__)
# attributes of the imported modules, by the name generated code binds them to
_TORCH_ATTRS = frozenset({
    "Tensor", "arange", "device", "empty", "zeros", "ones", "full", "tensor", "stack", "cat", "where",
    "maximum", "minimum", "isnan", "isinf", "abs", "exp", "log", "sqrt", "rsqrt", "floor", "ceil", "round",
    "trunc", "sign", "clamp", "bitwise_and", "bitwise_or", "bitwise_xor", "contiguous_format", "library",
    "ops", "compiler", "float32", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2", "int8", "uint8", "int16",
    "uint16", "int32", "uint32", "int64", "bool", "div", "remainder", "float64", "broadcast_to",
})
_TORCH_CHAINS = {"library": frozenset({"custom_op"}), "ops": frozenset({"tkgen"}),
                 "compiler": frozenset({"is_compiling"})}
_TILELANG_ATTRS = frozenset({
    "Kernel", "Parallel", "Pipelined", "Serial", "Unroll", "serial", "unroll", "grid", "vectorized",
    "prim_func", "macro", "dynamic", "symbolic", "Tensor", "StridedTensor", "Buffer", "Select", "if_then_else",
    "cast", "assume",
    "reinterpret", "alloc_fragment", "alloc_local", "alloc_shared", "alloc_var", "copy", "fill", "clear",
    "reduce_absmax", "reduce_max", "reduce_min", "reduce_sum", "reduce_abssum", "cumsum", "cummax",
    "atomic_add", "atomic_max", "atomic_min", "gemm", "max", "min", "abs", "ceildiv", "floordiv",
    "floormod", "truncdiv", "truncmod", "isnan", "isinf", "isfinite", "exp", "exp2", "log", "log2",
    "log1p", "sqrt", "rsqrt", "sigmoid", "tanh", "erf", "floor", "ceil", "round", "trunc", "nearbyint", "fma",
    "pow", "copysign", "ldexp", "clamp", "infinity", "max_value", "min_value", "shift_left",
    "shift_right", "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not", "sync_threads", "view",
    "reshape", "shfl_xor", "shfl_down", "shfl_up", "warp_reduce_sum", "warp_reduce_max", "warp_reduce_min",
    "Not", "ieee_add", "ieee_sub", "ieee_mul", "ieee_fdiv",
})
_TILELANG_DTYPE = re.compile(r"(u?int|float|bfloat|tfloat)\d+(_e\dm\d[a-z]*)?")
_HYPOTHESIS_ATTRS = frozenset({"composite", "none", "just", "sampled_from", "integers", "floats", "booleans",
                               "one_of", "lists", "tuples", "fixed_dictionaries", "builds", "data"})
# attribute names that reach frames, code, files, processes or pickles, on any object
_FORBIDDEN_ATTRS = frozenset({
    "system", "popen", "spawn", "exec", "eval", "compile", "open", "load", "loads", "save", "dump", "dumps",
    "tofile", "fromfile", "load_library", "hub", "jit", "classes", "utils", "cpp_extension",
    "import_module", "modules", "builtins", "gi_frame", "gi_code", "cr_frame", "ag_frame", "f_globals",
    "f_locals", "f_builtins", "f_back", "f_code", "tb_frame", "tb_next", "co_code", "func_globals",
    "write_text", "write_bytes", "read_text", "read_bytes", "unlink", "remove", "rmtree", "mkdir", "rename",
    "chmod", "call_extern", "call_pure_extern", "call_packed", "call_cpacked", "import_source",
})
_ALLOWED_NODES = (
    ast.Module, ast.Expr, ast.Import, ast.ImportFrom, ast.alias, ast.Assign, ast.AugAssign, ast.FunctionDef,
    ast.Lambda, ast.arguments, ast.arg, ast.keyword, ast.Return, ast.If, ast.For, ast.While, ast.With,
    ast.withitem, ast.Raise, ast.Assert, ast.Pass, ast.Break, ast.Continue,
    ast.BoolOp, ast.BinOp, ast.UnaryOp, ast.IfExp, ast.Dict, ast.Set, ast.List, ast.Tuple, ast.ListComp,
    ast.SetComp, ast.DictComp, ast.GeneratorExp, ast.comprehension, ast.Compare, ast.Call, ast.Constant,
    ast.Attribute, ast.Subscript, ast.Slice, ast.Starred, ast.Name, ast.JoinedStr, ast.FormattedValue,
    ast.Load, ast.Store, ast.operator, ast.boolop, ast.unaryop, ast.cmpop,
)
# the concrete node classes (operators are subclasses of ast.operator, ...): a set lookup per node
_ALLOWED_TYPES = frozenset(c for base in _ALLOWED_NODES for c in [base, *base.__subclasses__()])
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@lru_cache(maxsize=None)
def _module_source_names(dotted: str):
    """(names a tkgen module defines at top level, its __all__ or None), read from its source."""
    path = _PKG.parent.joinpath(*dotted.split(".")).with_suffix(".py")
    tree = ast.parse(path.read_text())
    defined, exported = set(), None
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            defined.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for target in (node.targets if isinstance(node, ast.Assign) else [node.target]):
                if isinstance(target, ast.Name):
                    defined.add(target.id)
                    if target.id == "__all__":
                        exported = tuple(ast.literal_eval(node.value))
    return frozenset(defined), exported


def torch_prims_names() -> frozenset:
    """What a generated reference gets from `from tkgen.runtime.torch_prims import *`."""
    return frozenset(_module_source_names("tkgen.runtime.torch_prims")[1])


def audit_module(path, source: str) -> None:
    """Parse one generated module and check it against the allowlists; raises AuditError."""
    try:
        tree = ast.parse(source, filename=str(path))
    except SyntaxError as e:
        raise AuditError(path, e, f"not valid Python: {e.msg}") from None
    _Audit(path).run(tree)


def audit_all(files: Dict[Path, str]) -> None:
    """Audit every generated module (keyed by its path) before any of them is written."""
    for rel, text in sorted(files.items()):
        if str(rel).endswith(".py"):
            audit_module(rel, text)


class _Audit:
    def __init__(self, path):
        self.path = path
        self.imported: Dict[str, str] = {}        # name -> what it is bound to ("torch", "T", "st", ...)
        self.star = frozenset()

    def fail(self, node, message):
        raise AuditError(self.path, node, message)

    def run(self, tree):
        nodes = _nodes(tree)
        bound = set()
        for node in nodes:
            if type(node) not in _ALLOWED_TYPES:
                self.fail(node, f"a {type(node).__name__} node is not something tkgen emits")
            if type(node) in (ast.Import, ast.ImportFrom):
                self.check_import(node)
            name = _binding(node)
            if name is not None:
                bound.add(name)
        # a binding may not hide an imported name, a star-imported one or a builtin
        taken = set(self.imported) | set(self.star) | BUILTINS
        for node in nodes:
            kind = type(node)
            if kind is ast.Name:
                self.check_identifier(node, node.id)
                if isinstance(node.ctx, ast.Load):
                    self.check_load(node, bound)
            elif kind is ast.Attribute:
                self.check_identifier(node, node.attr)
                self.check_attribute(node)
            elif kind is ast.keyword and node.arg:
                self.check_identifier(node, node.arg)
            elif kind is ast.alias:
                for part in node.name.split(".") + [node.asname or ""]:
                    if part and part != "*":
                        self.check_identifier(node, part)
            name = _binding(node)
            if name is not None:
                self.check_identifier(node, name)
                if name in taken:
                    what = "builtin" if name in BUILTINS else "imported name"
                    self.fail(node, f"binding {name!r} hides the {what} of that name")
        self.check_scopes(tree)

    def check_scopes(self, tree):
        """A name a top-level function reads is bound in that function (its arguments, assignments and
        nested functions) or at module level: a name bound only in another function would be a NameError
        at the call (two variants merged into one function that declared one of their parameters)."""
        functions = [s for s in tree.body if type(s) is ast.FunctionDef]
        module = {s.name for s in functions}
        for stmt in tree.body:
            if type(stmt) is not ast.FunctionDef:
                module |= {n for n in map(_binding, _nodes(stmt)) if n is not None}
        known = module | set(self.imported) | set(self.star) | _SAFE_BUILTINS | _MODULE_NAMES
        for fn in functions:
            nodes = _nodes(fn)
            local = {n for n in map(_binding, nodes) if n is not None}
            for node in nodes:
                if type(node) is ast.Name and isinstance(node.ctx, ast.Load) and \
                        node.id not in local and node.id not in known:
                    self.fail(node, f"name {node.id!r} is bound neither in function {fn.name!r} nor in the module")

    # imports ------------------------------------------------------------------------------------------
    def check_import(self, node):
        if isinstance(node, ast.Import):
            for a in node.names:
                if _IMPORTS.get((a.name, 0)) != "module":
                    self.fail(node, f"`import {a.name}`: generated code imports only torch and tilelang.language")
                self.imported[a.asname or a.name.split(".")[0]] = a.name
            return
        rule = _IMPORTS.get((node.module, node.level))
        where = "." * node.level + (node.module or "")
        if rule is None or rule == "module":
            self.fail(node, f"`from {where} import ...`: not a module generated code imports from")
        for a in node.names:
            if a.name == "*":
                if rule != "*":
                    self.fail(node, f"`from {where} import *` is not allowed")
                self.star = self.star | set(_module_source_names(node.module)[1] or ())
                continue
            ok = (a.name in rule if isinstance(rule, set) else
                  a.name in _module_source_names(node.module)[0] if rule == "defined" else
                  _IDENT.fullmatch(a.name) and not a.name.startswith("__"))
            if not ok:
                self.fail(node, f"`from {where} import {a.name}`: not a name generated code takes from there")
            self.imported[a.asname or a.name] = f"{node.module}.{a.name}"

    # names --------------------------------------------------------------------------------------------
    def check_identifier(self, node, name):
        if not name.isascii() or not _IDENT.fullmatch(name):
            self.fail(node, f"identifier {short(name)} is not plain ASCII")
        if name.startswith("__") and not (isinstance(node, ast.Name) and name in _MODULE_NAMES):
            self.fail(node, f"dunder name {name!r}")

    def check_load(self, node, bound):
        name = node.id
        if name in bound or name in self.imported or name in self.star or name in _SAFE_BUILTINS \
                or name in _MODULE_NAMES:
            return
        what = "a builtin generated code never uses" if name in BUILTINS else "bound nowhere in the module"
        self.fail(node, f"name {name!r} is {what}")

    def check_attribute(self, node):
        attr = node.attr
        if attr.startswith("_"):
            self.fail(node, f"private or dunder attribute {attr!r}")
        if attr in _FORBIDDEN_ATTRS:
            self.fail(node, f"attribute {attr!r} (files, processes, frames or foreign code)")
        chain = _chain(node)
        if chain is None:
            return
        root, attrs = chain[0], chain[1:]
        origin = self.imported.get(root, "torch" if root == "torch" and root in self.star else None)
        if origin == "torch":
            self.check_torch(node, attrs)
        elif origin == "tilelang.language":
            if attrs[0] not in _TILELANG_ATTRS and not _TILELANG_DTYPE.fullmatch(attrs[0]):
                self.fail(node, f"T.{attrs[0]} is not in the TileLang allowlist (tkgen/spec/safety.py)")
        elif origin == "hypothesis.strategies":
            if attrs[0] not in _HYPOTHESIS_ATTRS:
                self.fail(node, f"st.{attrs[0]} is not in the Hypothesis allowlist (tkgen/spec/safety.py)")

    def check_torch(self, node, attrs):
        if attrs[0] not in _TORCH_ATTRS:
            self.fail(node, f"torch.{attrs[0]} is not in the torch allowlist (tkgen/spec/safety.py)")
        allowed = _TORCH_CHAINS.get(attrs[0])
        if allowed is not None and len(attrs) > 1 and attrs[1] not in allowed:
            self.fail(node, f"torch.{attrs[0]}.{attrs[1]} is not in the torch allowlist (tkgen/spec/safety.py)")


def _nodes(tree):
    """Every node of the tree in source order (a preorder walk, so that the first violation found is the
    first in the file; ast.walk is breadth-first and slower)."""
    out, stack, AST = [], [tree], ast.AST
    while stack:
        node = stack.pop()
        out.append(node)
        children = []
        for field in node._fields:
            value = getattr(node, field, None)
            if type(value) is list:
                children.extend(v for v in value if isinstance(v, AST))
            elif isinstance(value, AST):
                children.append(value)
        stack.extend(reversed(children))
    return out


def _binding(node) -> Optional[str]:
    """The name a node binds: an assignment or loop target, a def, an argument."""
    if type(node) is ast.Name and isinstance(node.ctx, ast.Store):
        return node.id
    if type(node) is ast.FunctionDef:
        return node.name
    if type(node) is ast.arg:
        return node.arg
    return None


def _chain(node):
    """['torch', 'ops', 'tkgen', 'x'] for the attribute chain torch.ops.tkgen.x (each inner attribute gives
    its own prefix of it); None when the chain is not rooted at a name (`f().x`, `a[0].x`)."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return [node.id] + parts[::-1]
