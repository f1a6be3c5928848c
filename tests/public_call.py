"""The public call (`tkgen.ops.<op>`, the eager fast path of runtime.fastpath) against the checked `run` on
one drawn case at several row counts: the same outputs bit for bit, and one specialization for them all.
The property tests (tests/test_properties.py) run it on their first cases, whose kernels they compile."""
import tkgen.ops as ops
from tkgen import registry
from tkgen.runtime.fastpath import run, site_of
from tkgen.testing import check as C
from tkgen.testing.inputs import build_inputs


def same_outputs(op, tensors, params, got, want):
    """Bit for bit, in the same layout; rows a kernel leaves untouched (keep_rows) hold garbage in both."""
    assert len(got) == len(want)
    rows = C.written_rows(op, registry.op_package(op.name), tensors, params)
    for info, g, w in zip(op.outputs, got, want):
        assert g.stride() == w.stride() or g.numel() <= 1, info.name
        if rows is not None and info.row_dim is not None and g.numel():
            kept = rows.nonzero().flatten()
            g, w = g.index_select(info.row_dim, kept), w.index_select(info.row_dim, kept)
        C.compare(info.name, g, w, "bit")


def public_call_matches_run(name, case):
    """The case at its own row count, then at 0, 1 and 5 rows (where the op has a dynamic dim)."""
    op = registry.op_package(name).OP
    fn = getattr(ops, name)
    sizes = []
    for rows in (case["dims"][op.dynamic_dim], 0, 1, 5) if op.dynamic_dim else (None,):
        c = case if rows is None else C.with_rows(op, case, rows)
        tensors, params = build_inputs(c, "cpu"), dict(c["params"])
        # both calls mutate the inputs their outputs are written into (`into:`): each gets its own copy
        want = run(op, {n: t if t is None else t.clone() for n, t in tensors.items()}, params)
        got = fn(**tensors, **params)
        got = () if got is None else got if isinstance(got, tuple) else (got,)
        returned = iter(got)
        # an output `returned_with` an input absent from the call is not returned: not compared
        got = tuple(tensors[o.into] if o.into else want[i] if o.returned_with and tensors[o.returned_with] is None
                    else next(returned) for i, o in enumerate(op.outputs))
        assert next(returned, None) is None, "more outputs than the op returns"
        same_outputs(op, tensors, params, got, want)
        sizes.append(len(site_of(op).specializations))
    assert len(set(sizes)) == 1, f"a new specialization per row count: {sizes}"
