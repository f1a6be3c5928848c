"""The eager fast path (runtime.fastpath): the same outputs as the checked `run`, one specialization per
shape class whatever the row count, the same errors once a class is cached, and the dispatcher only where
something traces or a gradient is needed."""
import importlib

import pytest
import torch
from hypothesis import given, settings

import tkgen.ops as ops
from tkgen import registry
from tkgen.runtime.fastpath import eager
from tkgen.runtime.fastpath import run, site_of
from tkgen.testing import check as C
from tkgen.testing.inputs import build_inputs

from conftest import op_names


def _same(op, tensors, params, got, want):
    """Bit for bit, in the same layout; rows a kernel leaves untouched (keep_rows) hold garbage in both."""
    assert len(got) == len(want)
    rows = C.written_rows(op, registry.op_package(op.name), tensors, params)
    for info, g, w in zip(op.outputs, got, want):
        assert g.stride() == w.stride() or g.numel() <= 1, info.name
        if rows is not None and info.row_dim is not None and g.numel():
            kept = rows.nonzero().flatten()
            g, w = g.index_select(info.row_dim, kept), w.index_select(info.row_dim, kept)
        C.compare(info.name, g, w, "bit")


@pytest.mark.parametrize("name", op_names())
def test_public_call_matches_run_at_every_row_count(name):
    op = registry.op_package(name).OP
    fn = getattr(ops, name)

    @settings(max_examples=3)
    @given(importlib.import_module(registry.op_package(name).__name__ + ".strategies").cases())
    def prop(case):
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
            _same(op, tensors, params, got, want)
            sizes.append(len(site_of(op).specializations))
        assert len(set(sizes)) == 1, f"a new specialization per row count: {sizes}"
    prop()


def test_errors_are_the_same_once_a_class_is_cached():
    x = torch.zeros(4, 256, dtype=torch.bfloat16)
    ops.per_token_cast(x)
    with pytest.raises(ValueError, match="`x` must be contiguous"):
        ops.per_token_cast(torch.zeros(4, 512, dtype=torch.bfloat16)[:, ::2])
    w = torch.ones(4)
    ops.swiglu_forward(torch.zeros(4, 256), weights=w)
    with pytest.raises(ValueError, match=r"argument `weights` must have shape \[T\] = \(6,\), got \(4,\)"):
        ops.swiglu_forward(torch.zeros(6, 256), weights=w)
    ops.topk_gate(torch.zeros(3, 16), 2)
    with pytest.raises(ValueError, match=r"`k` must be an integer in \[1, 16\]; got 17"):
        ops.topk_gate(torch.zeros(3, 16), 17)
    ops.per_channel_cast(torch.zeros(4, 64), transpose=True)
    with pytest.raises(ValueError, match="transpose"):
        ops.per_channel_cast(torch.zeros(4, 64), transpose=1)     # True == 1, but only a bool is a bool


def _dispatched(fn):
    """Whether a call went through the torch.library dispatcher (its op shows up in the profiler)."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        fn()
    return any(e.name.startswith("tkgen::") for e in prof.events())


def test_dispatcher_only_where_needed():
    x = torch.randn(4, 128)
    assert not _dispatched(lambda: ops.per_token_cast(x))
    assert _dispatched(lambda: ops.per_token_cast(x.clone().requires_grad_()))
    with torch.no_grad():
        assert not _dispatched(lambda: ops.per_token_cast(x.clone().requires_grad_()))
    with torch.device("cpu"):        # a torch-function mode is active
        assert _dispatched(lambda: ops.per_token_cast(x))


def test_eager_predicate():
    from torch._subclasses.fake_tensor import FakeTensorMode
    x = torch.randn(2, 2)
    assert eager(x, None)
    assert not eager(x, [1.0])                                   # not a tensor: the full check names it
    assert not eager(x.requires_grad_())
    with FakeTensorMode():
        assert not eager(torch.empty(2))
    seen = []
    torch.func.vmap(lambda t: (seen.append(eager(t)), t)[1])(torch.zeros(3, 2))
    assert seen == [False]


def test_backward_runs_the_generated_kernel_without_the_dispatcher():
    import tkgen.nn.functional as F
    x = torch.randn(4, 128, requires_grad=True)
    w = torch.randn(128, requires_grad=True)
    y = F.rms_norm(x, (128,), w)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        y.sum().backward()
    names = {e.name for e in prof.events()}
    assert "tkgen::rmsnorm_backward" not in names and x.grad is not None and w.grad is not None
