"""Specs are data: hostile values reach no generated file, whichever emitter they would go through.

Two layers are tested separately. The model rejects hostile values where they are written
(tests/test_malformed_specs.py). Here, the audit: values that a missing check would let through are put
straight into the model (as a new field that reached an emitter unchecked would be), and every emitter's
output is rejected before anything is written; free text reaches code only as string constants.
"""
import ast
import dataclasses
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tkgen import registry
from tkgen.spec import safety
from tkgen.codegen.generate import render_modules, write
from tkgen.driver import load_catalog
from tkgen.spec.model import Param
from tkgen.spec.safety import AuditError, audit_all, audit_module

OP = "per_token_cast"
CORPUS = Path(__file__).parent / "malformed"


@pytest.fixture
def catalog():
    """A fresh catalog (the tests change it) of the formats, the profiles and one operator."""
    cat = load_catalog(registry.specs_dir())
    return dataclasses.replace(cat, ops={OP: cat.ops[OP]})


def _payload(tmp_path):
    return f"__import__('os').system('touch {tmp_path / 'pwned'}')"


def _assert_nothing_written(catalog, tmp_path, match):
    """The audit rejects the rendered modules, `write` leaves its directory empty, and nothing ran."""
    with pytest.raises(AuditError, match=match):
        audit_all(render_modules(catalog, [OP]))
    out = tmp_path / "generated"
    with pytest.raises(AuditError):
        write(catalog, out)
    assert not out.exists()
    assert not (tmp_path / "pwned").exists()
    assert not [m for m in sys.modules if str(out) in str(getattr(sys.modules[m], "__file__", "") or "")]


# -- every emitter, fed a hostile string that no check stopped ---------------------------------------------
def _assert_knob_rejected(catalog, tmp_path, knob):
    """The kernel printer takes schedule knobs only as integers: a string never reaches code."""
    with pytest.raises(ValueError, match=f"schedule knob {knob}: expected an integer"):
        render_modules(catalog, [OP])
    out = tmp_path / "generated"
    with pytest.raises(ValueError, match=f"schedule knob {knob}"):
        write(catalog, out)
    assert not out.exists()
    assert not (tmp_path / "pwned").exists()


def test_kernel_emitter_tuned_threads(catalog, tmp_path):
    catalog.archs["sm90"].tuned = {OP: {"threads": f"32, pwn={_payload(tmp_path)}"}}
    _assert_knob_rejected(catalog, tmp_path, "threads")


def test_kernel_emitter_tuned_tile_elems(catalog, tmp_path):
    catalog.archs["sm90"].tuned = {OP: {"tile_elems": f"4096):\n    {_payload(tmp_path)}\n    def f(x=1"}}
    _assert_knob_rejected(catalog, tmp_path, "tile_elems")


def test_kernel_and_reference_emitters_structural_value(catalog, tmp_path):
    """A structural value becomes part of `def build_<variant>` and `def reference_<variant>`."""
    spec = catalog.ops[OP]
    spec.params["mode"] = Param("mode", "a mode", ("a", f"b():\n    pass\n{_payload(tmp_path)}\ndef c"), None, "a")
    _assert_nothing_written(catalog, tmp_path, "not valid Python|__import__|system")


def test_reference_emitter_storage(catalog, tmp_path):
    e5m2 = catalog.elements["e5m2"]
    catalog.elements["e5m2"] = dataclasses.replace(e5m2, storage=f"uint8 if {_payload(tmp_path)} else torch.uint8")
    _assert_nothing_written(catalog, tmp_path, "__import__|system")


def test_reference_and_op_emitters_container(catalog, tmp_path):
    e4m3 = catalog.elements["e4m3"]
    catalog.elements["e4m3"] = dataclasses.replace(e4m3, torch_dtype="load")
    _assert_nothing_written(catalog, tmp_path, "torch.load|attribute 'load'")


def test_kernel_emitter_native(catalog, tmp_path):
    e4m3 = catalog.elements["e4m3"]
    catalog.elements["e4m3"] = dataclasses.replace(e4m3, native={"cuda": f'float8_e4m3fn"), {_payload(tmp_path)}, ("'})
    _assert_nothing_written(catalog, tmp_path, "kernel_cuda")


def test_kernel_emitter_pass_configs(catalog, tmp_path):
    """A config value that prints as a name (`inf`) would fail the import: no name may be unbound."""
    catalog.archs["sm90"].pass_configs = {"tl.some_limit": float("inf")}
    _assert_nothing_written(catalog, tmp_path, "'inf' is bound nowhere")


def test_strategies_emitter_float_values(catalog, tmp_path):
    spec = catalog.ops[OP]
    spec.params["eps"] = Param("eps", "a float", None, None, 1e-6, "float", (float("nan"),))
    _assert_nothing_written(catalog, tmp_path, "strategies.py.*'nan' is bound nowhere")


def test_op_emitter_shadowing_names(catalog, tmp_path):
    """A param called `check` would hide the runtime's check inside the generated entry point."""
    catalog.ops[OP].params["check"] = Param("check", "a static param", (1, 2), None, 1)
    _assert_nothing_written(catalog, tmp_path, "'check' hides the imported name")


def test_archs_emitter(catalog, tmp_path):
    """A profile's name is pasted into the kernel module's docstring."""
    arch = catalog.archs.pop("cpu")
    arch.name = f'cpu"""\n{_payload(tmp_path)}\n"""'
    catalog.archs[arch.name] = arch
    _assert_nothing_written(catalog, tmp_path, "__import__|system")


def test_free_text_reaches_code_only_as_constants(catalog, tmp_path):
    """Docs are free text: quotes, backslashes and newlines stay inside string constants."""
    payload = f'x"""\n{_payload(tmp_path)}\n"""\\\' \'\'\' \\'
    spec = catalog.ops[OP]
    spec.doc = payload
    spec.params["group"] = dataclasses.replace(spec.params["group"], doc=payload)
    spec.inputs["x"] = dataclasses.replace(spec.inputs["x"], doc=payload)
    files = render_modules(catalog, [OP])
    audit_all(files)
    tree = ast.parse(files[Path("quant") / OP / "op.py"])
    constants = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
    assert any(payload in c for c in constants)                      # the docstring, verbatim
    assert any(c == payload for c in constants)                      # the param's doc, as data
    assert not any(isinstance(n, ast.Name) and n.id == "__import__" for n in ast.walk(tree))
    write(catalog, tmp_path / "generated")
    assert not (tmp_path / "pwned").exists()


def test_a_spec_path_is_commented_out_safely(tmp_path):
    specs = tmp_path / "specs"
    shutil.copytree(registry.specs_dir() / "formats", specs / "formats")
    shutil.copytree(registry.specs_dir() / "archs", specs / "archs")
    (specs / "quant").mkdir()
    name = "evil\nimport os\nos.system('touch pwned')\n.yaml"
    shutil.copy(registry.specs_dir() / "quant" / f"{OP}.yaml", specs / "quant" / name)
    files = render_modules(load_catalog(specs), [OP])
    audit_all(files)
    header = files[Path("quant") / OP / "op.py"].splitlines()[0]
    assert header.startswith("# Generated by tkgen from specs/quant/evil\\nimport os")


# -- through the command line: a hostile tree generates nothing ------------------------------------------------
@pytest.mark.parametrize("hostile, where", [("inject_one_of_newline.yaml", "demo/probe.yaml"),
                                             ("inject_tuned_threads.yaml", "archs/probe_cpu.yaml"),
                                             ("inject_storage.yaml", "formats/element/probe8.yaml"),
                                             ("tag_python_apply.yaml", "demo/probe.yaml")])
def test_generate_writes_nothing_for_a_hostile_tree(tmp_path, hostile, where):
    specs = tmp_path / "specs"
    shutil.copytree(registry.specs_dir() / "formats", specs / "formats")
    shutil.copytree(registry.specs_dir() / "archs", specs / "archs")
    (specs / where).parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(CORPUS / hostile, specs / where)
    out = tmp_path / "generated"
    r = subprocess.run([sys.executable, "-m", "tkgen.tools.cli", "--specs", str(specs), "generate", "--out", str(out)],
                       capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 1 and "Traceback" not in r.stderr and str(specs / where) in r.stderr
    assert not out.exists() and not (tmp_path / "pwned").exists()


# -- the audit itself ---------------------------------------------------------------------------------------------
def test_every_committed_generated_module_passes_the_audit():
    root = registry.generated_dir()
    audit_all({p.relative_to(root): p.read_text() for p in root.rglob("*.py")})


HEADER = "import torch\nimport tilelang.language as T\nfrom hypothesis import strategies as st\n"


@pytest.mark.parametrize("source, match", [
    ("import os\n", "imports only"),
    ("from os import system\n", "not a module"),
    ("from tkgen.runtime.ops import torch\n", "not a name generated code takes"),
    ("from tkgen.runtime.ops import *\n", "is not allowed"),
    ("x = __import__('os')\n", "dunder"),
    ("x = eval('1')\n", "builtin generated code never uses"),
    ("f = open\n", "builtin generated code never uses"),
    ("x = getattr(torch, 'load')\n", "builtin generated code never uses"),
    ("x = torch.tensor(1).__class__\n", "dunder"),
    ("x = torch._C\n", "private"),
    ("x = torch.load('f')\n", "'load'"),
    ("x = torch.hub\n", "'hub'"),
    ("x = T.call_extern('int32', 'system')\n", "call_extern"),
    ("x = T.annotate_compile_flags(['-fplugin=x'])\n", "allowlist"),
    ("x = st.from_type(int)\n", "allowlist"),
    ("def f(len):\n    return len\n", "hides the builtin"),
    ("def f(torch):\n    return torch\n", "hides the imported"),
    ("T = 3\n", "hides the imported"),
    ("x = inf\n", "bound nowhere"),
    ("class A:\n    pass\n", "ClassDef"),
    ("def f():\n    global x\n", "Global"),
    ("x = (y := 1)\n", "NamedExpr"),
    ("def f(x):\n    yield x\n", "Yield"),
    ("x = 1 +\n", "not valid Python"),
    ("x = (lambda: 0).__code__\n", "dunder"),
    ("x = (i for i in ()).gi_frame\n", "gi_frame"),
])
def test_the_audit_rejects(source, match):
    with pytest.raises(AuditError, match=match):
        audit_module("m.py", HEADER + source)


def test_the_audit_accepts_what_templates_emit():
    audit_module("m.py", HEADER + "from typing import Optional\nfrom tkgen.runtime.ops import check\nfrom tkgen.runtime.fastpath import run\n"
                 "def f(x, *, threads=128):\n    y = torch.where(x > 0, x, torch.zeros(1, dtype=torch.float32))\n"
                 "    return T.max(y, 1), st.none(), check, run, Optional, __package__, max(1, 2)\n")


# -- the typed-value rules ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name, kind, word", [
    ("class", "name", "keyword"), ("match", "name", "keyword"), ("type", "name", "keyword"), ("_", "dim", "name matching"),
    ("print", "name", "builtin"), ("len", "name", "builtin"), ("torch", "name", "generated"), ("run", "name", "generated"),
    ("tilelang", "name", "generated"), ("T", "name", "name matching"), ("T_", "dim", "generated"), ("kernel", "name", "generated"),
    ("x\n", "name", "name matching"), ("é", "name", "name matching"), ("Ab", "name", "name matching"),
    ("x" * 65, "name", "at most 64"), (3, "name", "name matching"),
])
def test_names_that_cannot_reach_code(name, kind, word):
    assert word in safety.name_problem(name, kind)


@pytest.mark.parametrize("name, kind", [("x", "name"), ("x_grad", "name"), ("T", "dim"), ("H", "dim"), ("T_tok", "dim")])
def test_names_that_can(name, kind):
    assert safety.name_problem(name, kind) is None


@pytest.mark.parametrize("text", ['a"""b', 'ends with a quote"', "back\\slash\\", "\\N{x}", 'q""""', "tab\tnew\nline"])
def test_docstring_literals_hold_their_text(text):
    assert ast.literal_eval('"""' + safety.docstring(text) + '"""') == text


def test_comments_stay_one_line():
    assert "\n" not in safety.comment("a\nimport os") and safety.comment("plain/path.yaml") == "plain/path.yaml"


def test_numbers_are_bounded():
    assert safety.int_problem(True) and safety.int_problem(0) and safety.int_problem(2 ** 31)
    assert safety.int_problem(7) is None
    assert "float's range" in safety.float_problem(10 ** 400)
    assert "NaN" in safety.float_problem(float("nan"))
    assert safety.float_problem(float("inf")) and safety.float_problem(float("inf"), allow_inf=True) is None


# -- run time ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("op, kwargs, name", [
    ("swiglu_forward", {"routed_scaling_factor": 10 ** 400}, "routed_scaling_factor"),
    ("rmsnorm_forward", {"eps": 10 ** 400}, "eps"),
])
def test_float_params_out_of_range_name_the_argument(op, kwargs, name):
    import torch
    import tkgen.ops as ops
    x = torch.randn(2, 256)
    with pytest.raises(ValueError, match=f"`{name}` must be a number within a float's range"):
        getattr(ops, op)(x, **kwargs)
