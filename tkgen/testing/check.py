"""Run one drawn case through a kernel and the generated reference, and compare as each output declares.

Shared by the property tests and `tkgen fuzz`.
"""
from __future__ import annotations

import importlib
import json
import math

import torch

from .. import registry
from ..runtime.fastpath import allocate, in_place, run
from ..runtime.ops import check, complete, variant_of, written_in
from .inputs import build_inputs
from .strategies import with_codec

_LOWERED = set()
COUNTS_START = 1000     # integer accumulators (counts) start here in tests: a kernel must add, not overwrite


MARGIN = 256             # canary bytes before and after each output in tests (a multiple of 16: alignment)


def poisoned(op, tensors, params, byte=0xFF):
    """Outputs filled with all-ones bytes: NaN for floats, -1 for integers, never a value a kernel writes
    from valid inputs, so an element left unwritten cannot pass. (Where the reference itself gives NaN, a
    NaN meets any NaN, so run_case runs again with zero bytes.) Accumulated float outputs (sums) start at
    zero, integer ones (counts) at COUNTS_START (`accumulated_from` takes it off again); rows stored at positions
    start at zero, as the op allocates them.

    Each output lies MARGIN bytes into a larger poisoned buffer: `written_outside` finds a kernel's stores
    past either end of a tensor (a tile's padding, a packet past the last), which the tensor alone hides."""
    outs = []
    for info, o in zip(op.outputs, allocate(op, tensors, params)):
        nbytes = o.untyped_storage().nbytes()
        arena = torch.full((nbytes + 2 * MARGIN,), byte, dtype=torch.uint8, device=o.device)
        o = arena[MARGIN:MARGIN + nbytes].view(o.dtype).as_strided(o.shape, o.stride())
        o._tkgen_arena = (arena, byte)
        if info.fill is not None:     # stored at positions over the fill the op allocates
            o.fill_(info.fill)
        elif info.accumulate:       # rows stored at positions start at zero, as the op allocates them
            o.fill_(0 if o.dtype.is_floating_point or info.rows else COUNTS_START)
        elif info.padding is not None and tensors.get(info.padding) is not None and o.shape[0]:
            # the rows no position names hold what the op does not write: zeros here, as in the reference;
            # the padding rows keep the poison, which the kernel must overwrite with zeros
            o.view(torch.uint8).view(o.shape[0], -1)[tensors[info.padding].reshape(-1) >= 0] = 0
        outs.append(o)
    return tuple(outs)


def into_inputs(op, tensors, outs):
    """Outputs written in place (`into:`): each poisoned buffer takes its input's elements, and the kernel
    reads that very buffer as the input (the storage it mutates); the caller's tensors stay as they are, for
    the reference. Returns the tensors the kernel takes."""
    tensors = dict(tensors)
    for k, j in in_place(op):
        name = op.inputs[j].name
        outs[k].copy_(tensors[name])
        tensors[name] = outs[k]
    return tensors


def written_outside(outs):
    """Names of the canary margins (`poisoned`) that no longer hold their poison byte."""
    bad = []
    for k, o in enumerate(outs):
        arena, byte = getattr(o, "_tkgen_arena", (None, None))
        if arena is not None and (bool((arena[:MARGIN] != byte).any()) or bool((arena[-MARGIN:] != byte).any())):
            bad.append(k)
    return bad


def accumulated_from(info, got):
    """What a kernel added into an output that `poisoned` started at COUNTS_START."""
    return got - COUNTS_START if info.accumulate and not info.rows and not got.dtype.is_floating_point else got


def written_rows(op, pkg, tensors, params):
    """The rows a kernel writes (keep_rows), or None when it writes every row."""
    ref = importlib.import_module(pkg.__name__ + ".reference")
    tensors, params = complete(op, tensors, params)
    fn = getattr(ref, "WRITTEN_ROWS", {}).get(variant_of(op, params, tensors))
    if fn is None:
        return None
    statics = [params[p.name] for p in op.params if not p.structural]
    return fn(*[tensors[i.name] for i in op.inputs], *statics).cpu()


def compare_outputs(op, pkg, tensors, params, outs, refs, before, replay=None):
    """Every output as it declares; with keep_rows, the rows a kernel must leave untouched still hold what
    the buffer held `before` the run, byte for byte, and the other rows are compared as declared."""
    outside = written_outside(outs)
    if outside:
        raise AssertionError(f"{op.name}: the kernel wrote outside output(s) "
                             f"{', '.join(op.outputs[k].name for k in outside)} (the canary bytes around them changed)")
    rows = written_rows(op, pkg, tensors, params)
    for i, (o, got, want) in enumerate(zip(op.outputs, outs, refs)):
        exact = "bit" if isinstance(o.exact, dict) and "given" in o.exact else o.exact
        want = replay[i] if exact != o.exact else want
        got = accumulated_from(o, got)
        terms = largest_term(tensors, exact)
        if rows is None or o.row_dim is None or not got.numel():
            compare(o.name, got, want, exact, terms)
            continue
        kept, left = rows.nonzero().flatten(), (~rows).nonzero().flatten()
        pick = lambda t, idx: t.index_select(o.row_dim, idx.to(t.device))  # noqa: E731
        compare(o.name + " (rows not kept)", pick(got, left), pick(before[i], left), "bytes")
        compare(o.name, pick(got, kept), pick(want, kept), exact, terms)


def largest_term(tensors, exact):
    """For `atol_of: terms`: a bound on the magnitude of the sum's terms, the product of the largest finite
    |value| of each input that `terms` names (an absent optional input counts as 1); else None."""
    tol = exact.get("tol", {}) if isinstance(exact, dict) else {}
    if tol.get("atol_of") != "terms":
        return None
    bound = 1.0
    for name in tol["terms"]:
        t = tensors.get(name)
        if t is None:
            continue
        if t.numel():
            bound *= float(t.detach().float().abs().nan_to_num(0.0, 0.0, 0.0).max())
        else:
            bound = 0.0
    return bound


def reference_outputs(op, pkg, tensors, params, given=None):
    """The generated reference on the inputs' own device (its float32 and integer operations are exact
    IEEE operations, so the device does not change a bit; library math mirrors the device's library).

    `given`: kernel outputs that the reference takes in place of its own values (exact: {given: [...]})."""
    ref = importlib.import_module(pkg.__name__ + ".reference")
    tensors, params = complete(op, tensors, params)
    fn = ref.VARIANTS[variant_of(op, params, tensors)]
    statics = [params[p.name] for p in op.params if not p.structural]
    return fn(*[tensors[i.name] for i in op.inputs], *statics, _given=given)


def compare(name, got, want, exact, terms=None):
    """Raise AssertionError naming the first elements of `got` that differ from `want` beyond what `exact`
    allows. `terms`: for `tol` with `atol_of: terms`, the magnitude of the largest term of the sum
    (`largest_term`), which `atol` is relative to."""
    if got.shape != want.shape or got.dtype != want.dtype:
        raise AssertionError(f"output {name}: got {got.dtype}{tuple(got.shape)}, reference {want.dtype}{tuple(want.shape)}")
    if got.numel() == 0:
        return
    # logical elements only (strided layouts leave padding unwritten), in standard strides
    g = got.detach().cpu().clone(memory_format=torch.contiguous_format)
    w = want.detach().cpu().clone(memory_format=torch.contiguous_format)
    if exact in ("bit", "bytes") or exact is None:
        es = g.element_size()
        gb, wb = g.reshape(-1).view(torch.uint8), w.reshape(-1).view(torch.uint8)
        # a NaN matches a NaN whatever its sign and payload: IEEE 754 leaves both open for arithmetic
        # results, and x86 (inf * 0 -> -NaN), CUDA's cvt (0x7fff) and torch's casts each pick their own
        # (`bytes`, for copies, holds NaNs to their bits as well)
        both_nan = (_nan_mask(g) & _nan_mask(w) & (exact != "bytes")).reshape(-1, 1).expand(-1, es).reshape(-1)
        bad = ((gb != wb) & ~both_nan).nonzero().flatten()
        if bad.numel():
            first = sorted({int(b) // es for b in bad[:64]})[:5]
            flat_g, flat_w = g.reshape(-1), w.reshape(-1)
            detail = ", ".join(f"[{i}] got {_show(flat_g[i])} want {_show(flat_w[i])}" for i in first)
            raise AssertionError(f"output {name}: {len({int(b) // es for b in bad})} of {g.numel()} elements differ "
                                 f"(bit-exact required): {detail}")
        return
    if "tol" in exact:
        atol = exact["tol"]["atol"]
        if exact["tol"].get("atol_of") == "max" and w.numel():
            atol *= float(w.float().abs().nan_to_num(0.0, 0.0, 0.0).max())    # normwise
        elif exact["tol"].get("atol_of") == "terms":      # relative to the terms: sums that cancel
            if terms is None:
                raise ValueError(f"output {name}: atol_of: terms needs the largest term (largest_term)")
            atol *= terms
        # NaN where the reference has NaN (inf - inf in an overflowing sum) agrees
        torch.testing.assert_close(g.float(), w.float(), rtol=exact["tol"]["rtol"], atol=atol, equal_nan=True,
                                   msg=lambda m: f"output {name}: {m}")
        return
    if "ulp" in exact:
        # codes (ordered like their values) at most `ulp` apart, and no more than a `rate` of them differing
        dist = (order_code(g) - order_code(w)).abs().reshape(-1)
        if not g.dtype.is_floating_point:
            g, w = g.contiguous().view(torch.uint8), w.contiguous().view(torch.uint8)
        nan_g, nan_w = _nan_mask(g).reshape(-1), _nan_mask(w).reshape(-1)
        bad = (dist > exact["ulp"]) | (nan_g != nan_w)
        bad &= ~(nan_g & nan_w)
        if bool(bad.any()):
            i = int(bad.nonzero()[0])
            raise AssertionError(f"output {name}: {int(bad.sum())} of {g.numel()} elements more than "
                                 f"{exact['ulp']} ulp apart: [{i}] got {_show(g.reshape(-1)[i])} want "
                                 f"{_show(w.reshape(-1)[i])}")
        differ = int(((dist > 0) & ~(nan_g & nan_w)).sum())
        allowed = math.ceil(exact.get("rate", 1.0) * g.numel())
        if differ > allowed:
            raise AssertionError(f"output {name}: {differ} of {g.numel()} elements differ; the spec allows a "
                                 f"rate of {exact.get('rate')} ({allowed})")
        return
    raise AssertionError(f"output {name}: unsupported exactness {exact!r}")


def order_code(t: torch.Tensor) -> torch.Tensor:
    """Integers ordered like the values of a float tensor (adjacent values differ by one; -0 == +0);
    integer tensors byte by byte (packed exponent bytes: one step per byte)."""
    if not t.dtype.is_floating_point:
        return t.contiguous().view(torch.uint8).to(torch.int64)
    bits = t.element_size() * 8
    u = t.contiguous().view({8: torch.uint8, 16: torch.int16, 32: torch.int32}[bits]).to(torch.int64) & ((1 << bits) - 1)
    sign = u >> (bits - 1)
    mag = u & ((1 << (bits - 1)) - 1)
    return torch.where(sign == 1, -mag, mag)


def _nan_mask(t):
    return torch.isnan(t.float()) if t.dtype.is_floating_point else torch.zeros(t.shape, dtype=torch.bool)


def _show(v):
    if v.dtype.is_floating_point and v.dtype.itemsize == 1:
        return f"{float(v.float())} (0x{int(v.view(torch.uint8)):02x})"
    return repr(v.item())


def run_case(op_name: str, case: dict, device="cpu", arch=None):
    """Kernel vs reference on one case; raises AssertionError describing the first mismatch."""
    return check_tensors(op_name, build_inputs(case, device), dict(case["params"]), arch)


def check_tensors(op_name: str, tensors: dict, params: dict, arch=None, schedule=None):
    """Kernel vs reference on given input tensors (on their device): outputs poisoned first, compared as
    each declares (`schedule`: knobs in place of the profile's); returns (kernel outputs, reference outputs)."""
    pkg = registry.op_package(op_name)
    op = pkg.OP
    check(op, tensors, params)
    out = poisoned(op, tensors, params)
    kernel_in = into_inputs(op, tensors, out)
    before = [o.clone() for o in out]
    outs = run(op, kernel_in, params, arch=arch, out=out, schedule=schedule)
    mutated = {op.inputs[j].name: tensors[op.inputs[j].name].clone() for _, j in in_place(op)}
    refs = reference_outputs(op, pkg, tensors, params)
    for name, t in mutated.items():     # the reference returns what the op writes in place, as a new tensor
        compare(f"{name} (the reference's input)", tensors[name], t, "bytes")
    given = {n for o in op.outputs if isinstance(o.exact, dict) for n in o.exact.get("given", ())}
    replay = None
    if given:
        by_name = given_values(op, tensors, params, outs, given, arch, schedule)
        # an inference form (its given outputs not written) is held to the bits of the form that writes them:
        # that form's reference, replayed with its kernel's values (the inference form's reference has no
        # stores of them, so it could not take them)
        writer = writing_params(op, params, given)
        replay = reference_outputs(op, pkg, tensors, writer, given={n: by_name[n] for n in given})
        if writer != params:
            replay = [r if written_in(o, tensors, params) else own for o, r, own in zip(op.outputs, replay, refs)]
    compare_outputs(op, pkg, tensors, params, outs, refs, before, replay)
    if any(w.is_floating_point() and bool(torch.isnan(w.float()).any()) for w in refs):
        # the poison is NaN too: elements the reference makes NaN must also be written over zeros
        out = poisoned(op, tensors, params, byte=0)
        kernel_in = into_inputs(op, tensors, out)
        before = [o.clone() for o in out]
        again = run(op, kernel_in, params, arch=arch, out=out, schedule=schedule)
        compare_outputs(op, pkg, tensors, params, again, refs, before, replay)
    return outs, refs


def given_values(op, tensors, params, outs, given, arch=None, schedule=None):
    """The kernel's values of the outputs others are exact given. One that this variant does not write (its
    `when` is a boolean param that is false: an inference form) comes from the kernel of the variant that
    writes it, the same kernel with the stores: so the output compared is held to the bits of that one."""
    by_name = {o.name: got for o, got in zip(op.outputs, outs)}
    writer = writing_params(op, params, given)
    if writer != params:
        off = {w for w in writer if writer[w] != params.get(w)}
        again = run(op, into_inputs(op, tensors, allocate(op, tensors, params)), writer, arch=arch, schedule=schedule)
        by_name.update({o.name: got for o, got in zip(op.outputs, again) if o.name in given and o.when in off})
    return by_name


def writing_params(op, params, given):
    """`params` with each boolean param that leaves a given output unwritten (an inference form) turned on."""
    flags = {p.name: p for p in op.params if p.choices == (False, True)}
    off = {o.when for o in op.outputs if o.name in given and o.when in flags
           and not params.get(o.when, flags[o.when].default)}
    return {**params, **{w: True for w in off}} if off else params


def with_rows(op, case: dict, rows: int) -> dict:
    """The same case with `rows` rows in the op's dynamic dim: shapes re-derived, and an input held in a
    packed container re-derives its container shape from its new logical shape."""
    dims = {**case["dims"], op.dynamic_dim: rows}
    inputs, shapes = {}, {}
    for info in op.inputs:
        recipe = case["inputs"].get(info.name)
        logical = list(info.shape_fn({**dims, **case["params"]}))
        if recipe is None:
            inputs[info.name], shapes[info.name] = None, logical
            continue
        inputs[info.name], shapes[info.name] = with_codec(recipe, recipe.get("codec"), logical)
    return {**case, "dims": dims, "inputs": inputs, "shapes": shapes}


def specialization(op, case):
    dims = {**case["dims"], **case["params"]}
    statics = tuple(dims[a] for a in op.factory_args)
    dtypes = tuple(case["inputs"][i.name]["dtype"] if case["inputs"][i.name] is not None else i.dtypes[0]
                   for i in op.inputs if i.dtype_arg)
    return variant_of(op, case["params"], case["inputs"]), statics, dtypes


def cuda_archs():
    """The CUDA profiles that kernels were generated for."""
    from ..runtime.kernels import cuda_archs as generated_cuda_archs
    return generated_cuda_archs()


def lower_cuda(op_name: str, case: dict, archs=None):
    """Lower the case's specialization for each CUDA profile (default: all of them) to device source
    (cached per specialization)."""
    from ..runtime.compile import lower_source
    from ..runtime.kernels import kernel_module

    archs = cuda_archs() if archs is None else archs
    pkg = registry.op_package(op_name)
    variant, statics, dtypes = specialization(pkg.OP, case)
    sources = {}
    for arch in archs:
        key = (op_name, arch, variant, statics, dtypes)
        if key in _LOWERED:
            continue
        sources[arch] = lower_source(kernel_module(pkg, arch), variant, statics + dtypes)
        _LOWERED.add(key)
    return sources


def replay_command(op_name: str, case: dict, device: str) -> str:
    return f"tkgen fuzz {op_name} --device {device} --replay '{json.dumps(case, sort_keys=True)}'"
