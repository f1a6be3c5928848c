"""The eager fast path (runtime.fastpath): the same errors once a class is cached, and the dispatcher only
where something traces or a gradient is needed. That the public call gives the checked `run`'s outputs with
one specialization per shape class whatever the row count is checked by every op's property test on its
first cases (tests/public_call.py), on the kernels it compiles for them."""
import pytest
import torch

import tkgen.ops as ops
from tkgen.runtime.fastpath import eager


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
