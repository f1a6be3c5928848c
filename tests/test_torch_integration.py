"""The ops as torch.library custom ops: fake implementations, torch.compile(fullgraph=True), row counts."""
import torch

import tkgen.ops as ops


def test_custom_ops_are_registered():
    ops.per_token_cast, ops.topk_gate  # noqa: B018  (importing registers them)
    assert hasattr(torch.ops.tkgen, "per_token_cast") and hasattr(torch.ops.tkgen, "topk_gate")


def test_torch_compile_fullgraph():
    def f(x, scores):
        q, sf = ops.per_token_cast(x, "e4m3", 64, "pow2")
        idx = ops.topk_gate(scores, 4)
        return q.float() * sf.repeat_interleave(64, dim=1), idx

    x = torch.randn(6, 128, dtype=torch.bfloat16)
    s = torch.randn(6, 16)
    want = f(x, s)
    got = torch.compile(f, fullgraph=True)(x, s)   # the default (inductor) backend
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


def test_fake_tensor_shapes():
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode():
        x = torch.empty(5, 256, dtype=torch.bfloat16)
        q, sf = torch.ops.tkgen.per_token_cast(x, "e4m3", 128, "ue8m0", "row")
        assert q.shape == (5, 256) and q.dtype == torch.float8_e4m3fn
        assert sf.shape == (5, 1) and sf.dtype == torch.int32


def test_one_kernel_serves_every_row_count():
    from tkgen.runtime import compile as C
    x = torch.randn(3, 64)
    ops.per_token_cast(x, group=32)
    n = len(C._CACHE)
    for rows in (1, 7, 130):
        ops.per_token_cast(torch.randn(rows, 64), group=32)
    assert len(C._CACHE) == n


def test_fake_shapes_of_row_blocks_layouts_and_copies():
    from torch._subclasses.fake_tensor import FakeTensorMode
    ops.per_channel_cast, ops.per_block_cast, ops.batched_transpose  # noqa: B018  (importing registers them)
    with FakeTensorMode():
        x = torch.empty(130, 256, dtype=torch.bfloat16)
        q, sf = torch.ops.tkgen.per_channel_cast(x, "e4m3", 32, "ue8m0", True)
        assert q.shape == (256, 130) and q.dtype == torch.float8_e4m3fn
        assert sf.shape == (5, 64) and sf.dtype == torch.int32
        q, sf = torch.ops.tkgen.per_block_cast(x, "e4m3", 128, 128, "fp32")
        assert q.shape == (130, 256) and sf.shape == (2, 2)
        out = torch.ops.tkgen.batched_transpose(torch.empty(3, 130, 64, dtype=torch.float8_e4m3fn))
        assert out.shape == (3, 64, 130) and out.dtype == torch.float8_e4m3fn


def test_boolean_params_are_checked():
    import pytest
    x = torch.randn(4, 64)
    with pytest.raises(ValueError, match="transpose"):
        ops.per_channel_cast(x, transpose=1)
    q, _ = ops.per_channel_cast(x, group_tokens=32, transpose=True)
    assert q.shape == (64, 4)
