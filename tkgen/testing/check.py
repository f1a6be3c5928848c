"""Run one drawn case through a kernel and the generated reference, and compare as each output declares.

Shared by the property tests and `tkgen fuzz`.
"""
from __future__ import annotations

import importlib
import json

import torch

from .. import registry
from ..runtime.ops import allocate, check, run, variant_of
from .inputs import build_inputs

_LOWERED = set()


def poisoned(op, tensors, params):
    """Outputs filled with all-ones bytes: NaN for floats, -1 for integers, never a value a kernel writes
    from valid inputs, so an element left unwritten cannot pass."""
    outs = allocate(op, tensors, params)
    for o in outs:
        o.untyped_storage().fill_(0xFF)       # the whole buffer, padding of strided layouts included
    return outs


def reference_outputs(op, pkg, tensors, params):
    """The generated reference on the inputs' own device (its float32 and integer operations are exact
    IEEE operations, so the device does not change a bit)."""
    ref = importlib.import_module(pkg.__name__ + ".reference")
    fn = ref.VARIANTS[variant_of(op, params)]
    statics = [params[p.name] for p in op.params if not p.structural]
    return fn(*[tensors[i.name] for i in op.inputs], *statics)


def compare(name, got, want, exact):
    if got.shape != want.shape or got.dtype != want.dtype:
        raise AssertionError(f"output {name}: got {got.dtype}{tuple(got.shape)}, reference {want.dtype}{tuple(want.shape)}")
    if got.numel() == 0:
        return
    # logical elements only (strided layouts leave padding unwritten), in standard strides
    g = got.detach().cpu().clone(memory_format=torch.contiguous_format)
    w = want.detach().cpu().clone(memory_format=torch.contiguous_format)
    if exact == "bit" or exact is None:
        gb, wb = g.reshape(-1).view(torch.uint8), w.reshape(-1).view(torch.uint8)
        bad = (gb != wb).nonzero().flatten()
        if bad.numel():
            es = g.element_size()
            first = sorted({int(b) // es for b in bad[:64]})[:5]
            flat_g, flat_w = g.reshape(-1), w.reshape(-1)
            detail = ", ".join(f"[{i}] got {_show(flat_g[i])} want {_show(flat_w[i])}" for i in first)
            raise AssertionError(f"output {name}: {len({int(b) // es for b in bad})} of {g.numel()} elements differ "
                                 f"(bit-exact required): {detail}")
        return
    if "tol" in exact:
        torch.testing.assert_close(g.float(), w.float(), rtol=exact["tol"]["rtol"], atol=exact["tol"]["atol"],
                                   msg=lambda m: f"output {name}: {m}")
        return
    raise AssertionError(f"output {name}: unsupported exactness {exact!r}")


def _show(v):
    if v.dtype.is_floating_point and v.dtype.itemsize == 1:
        return f"{float(v.float())} (0x{int(v.view(torch.uint8)):02x})"
    return repr(v.item())


def run_case(op_name: str, case: dict, device="cpu", arch=None):
    """Kernel vs reference on one case; raises AssertionError describing the first mismatch."""
    pkg = registry.op_package(op_name)
    op = pkg.OP
    tensors = build_inputs(case, device)
    params = dict(case["params"])
    check(op, tensors, params)
    outs = run(op, tensors, params, arch=arch, out=poisoned(op, tensors, params))
    refs = reference_outputs(op, pkg, tensors, params)
    for o, got, want in zip(op.outputs, outs, refs):
        compare(o.name, got, want, o.exact)
    return outs, refs


def specialization(op, case):
    dims = {**case["dims"], **case["params"]}
    statics = tuple(dims[a] for a in op.factory_args)
    dtypes = tuple(case["inputs"][i.name]["dtype"] for i in op.inputs if len(i.dtypes) > 1)
    return variant_of(op, case["params"]), statics, dtypes


def lower_cuda(op_name: str, case: dict, archs=("sm90", "sm100")):
    """Lower the case's specialization for each CUDA profile to device source (cached per specialization)."""
    from ..runtime.compile import lower_source

    pkg = registry.op_package(op_name)
    variant, statics, dtypes = specialization(pkg.OP, case)
    sources = {}
    for arch in archs:
        key = (op_name, arch, variant, statics, dtypes)
        if key in _LOWERED:
            continue
        module = importlib.import_module(f"{pkg.__name__}.kernel_{arch}")
        sources[arch] = lower_source(module, getattr(module, f"build_{variant}"), statics + dtypes)
        _LOWERED.add(key)
    return sources


def replay_command(op_name: str, case: dict, device: str) -> str:
    return f"tkgen fuzz {op_name} --device {device} --replay '{json.dumps(case, sort_keys=True)}'"
