"""The autograd formula of an op whose spec has a `backward:` block, as data for the op template.

A forward spec names the op that computes its gradients and says where each of that op's inputs comes
from: a forward input, a forward output, the gradient reaching a forward output (`grad(out)`), or the first
present of several (`[residual_out, x]`). What the backward reads is what the forward saves: the inferred
save list is the forward tensors named there, nothing else. `grads` says which backward output is the
gradient of which forward input.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional

from . import expr as E
from .safety import listing, short


@dataclass
class AutogradPlan:
    backward_op: str
    saved: List[str]                 # forward tensors kept for the backward, in order
    args: List[str]                  # Python sources of the backward custom op's arguments
    grads: List[str]                 # per forward custom-op argument: the gradient source or None
    function: Optional[str]          # the name under tkgen.nn.functional
    returns: List[int]               # indices of the outputs the functional returns
    public_args: List[str]
    call_args: List[str]
    dtype_refs: List[str]            # inputs with a gradient that are not saved: only their dtype is kept


def _source(spec, text, saved, path, err):
    """A backward argument's source: forward names (saved), grad(output), or a list (first present)."""
    if isinstance(text, list):
        parts = [_source(spec, t, saved, path + (i,), err) for i, t in enumerate(text)]
        out = parts[-1]
        for p in reversed(parts[:-1]):
            out = f"_present({p}, {out})"
        return out
    try:
        node = E.parse(text)
    except E.ExprError as e:
        raise err(path, f"{e.message} in {short(text)}") from None
    if isinstance(node, E.Call) and node.fn == "grad" and len(node.args) == 1 and isinstance(node.args[0], E.Name):
        name = node.args[0].id
        if name not in spec.outputs:
            raise err(path, f"grad({name}): {name!r} is not an output of {spec.name}; outputs are "
                            f"{listing(spec.outputs)}")
        i = list(spec.outputs).index(name)
        t = spec.outputs[name]
        grad = f"_contiguous(grads[{i}])"
        if t.when in spec.params:          # written only when a boolean param is true (an optional one is given)
            return f"({grad} if {t.when}{' is not None' if spec.params[t.when].optional else ''} else None)"
        return f"(None if {t.when} is None else {grad})" if t.when else grad
    if isinstance(node, E.Name) and node.id in spec.tensors:
        if node.id not in saved:
            saved.append(node.id)
        return node.id
    raise err(path, f"expected a forward input or output, grad(output), or a list of them; found {short(text)}")


def plan(catalog, spec) -> Optional[AutogradPlan]:
    bw = spec.backward
    if not bw:
        return None
    doc = spec.doc_ref
    err = lambda path, msg: doc.error(("backward",) + tuple(path), msg)  # noqa: E731
    key_err = lambda path, msg: doc.key_error(("backward",) + tuple(path), msg)  # noqa: E731 - a bad key
    if bw["op"] not in catalog.ops:
        raise err(("op",), f"unknown op {short(bw['op'])}; ops are {listing(sorted(catalog.ops))}")
    back = catalog.ops[bw["op"]]
    for op in (spec, back):
        if any(t.into for t in op.outputs.values()):
            raise err(("op",), f"{op.name} writes an output in place (`into:`), which autograd does not take")
    saved: List[str] = []
    args = {}                  # by name; the call is in the backward op's order (OpSpec.call_order)
    for name, t in back.inputs.items():
        if name not in bw["inputs"]:
            if not t.optional:
                raise err(("inputs",), f"{back.name}'s input {name!r} needs a source")
            args[name] = "None"
            continue
        src = _source(spec, bw["inputs"][name], saved, ("inputs", name), err)
        args[name] = src
    for name in bw["inputs"]:
        if name not in back.inputs:
            raise key_err(("inputs", name), f"{back.name} has no input {name!r}; it has {listing(back.inputs)}")
    # inputs typed like another input take that input's dtype (a bf16 gradient of an fp32 output, ...)
    for name, t in back.inputs.items():
        if t.like:
            args[name] = f"_like({args[name]}, {args[t.like]})"
    pmap = dict(bw.get("params", {}))
    for name in pmap:
        if name not in back.params:
            raise key_err(("params", name), f"{back.name} has no param {name!r}; it has {listing(back.params) or 'none'}")
    for name, p in back.params.items():
        src = pmap.get(name, name if name in spec.params else None)
        if src is not None and src not in spec.params:
            raise err(("params", name), f"{src!r} is not a param of {spec.name}")
        args[name] = src if src is not None else repr(p.default)
    args = [args[n] for n in back.call_order()]
    grads, dtype_refs = [], []
    outs = list(back.outputs)
    for name in spec.call_order():
        g = bw["grads"].get(name)
        if g is None:
            grads.append("None")
        elif g not in back.outputs:
            raise err(("grads", name), f"{back.name} has no output {g!r}; it has {listing(back.outputs)}")
        else:
            # an input the backward does not read is not saved: its gradient needs only its dtype
            ref = name if name in saved or name in spec.params else f"ctx.dtypes[{name!r}]"
            if ref != name:
                dtype_refs.append(name)
            grads.append(f"_grad_like(res[{outs.index(g)}], {ref})")
    for name in bw["grads"]:
        if name not in spec.inputs:
            raise key_err(("grads", name), f"{name!r} is not an input of {spec.name}; inputs are {listing(spec.inputs)}")
    fn = bw.get("function")
    for i, o in enumerate(bw.get("returns", ())):
        if o not in spec.outputs:
            raise err(("returns", i), f"{o!r} is not an output of {spec.name}; outputs are {listing(spec.outputs)}")
    returns = [list(spec.outputs).index(o) for o in bw.get("returns", list(spec.outputs))]
    return AutogradPlan(back.name, saved, args, grads, fn, returns, [], [], dtype_refs)
