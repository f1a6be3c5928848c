"""The conventions of tkgen's own API (docs/api-conventions.md): dtypes as torch.dtype or their names, a
scale block as `scale_block=(rows, cols)` in every op that has one, torch.nn.functional's arguments where
it has the function (rms_norm)."""
import inspect

import pytest
import torch

import tkgen.nn.functional as F
import tkgen.ops as ops
from tkgen import registry

x = torch.randn(130, 256, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)


def _equal(a, b):
    a, b = (a if isinstance(a, tuple) else (a,)), (b if isinstance(b, tuple) else (b,))
    assert len(a) == len(b) and all(s.dtype == t.dtype and torch.equal(s.view(torch.uint8), t.view(torch.uint8))
                                    for s, t in zip(a, b))


def test_formats_as_torch_dtypes():
    _equal(ops.per_token_cast(x, torch.float8_e4m3fn, scale=torch.float32), ops.per_token_cast(x, "e4m3"))
    _equal(ops.per_token_cast(x, torch.float8_e5m2), ops.per_token_cast(x, "e5m2"))
    q, sf = ops.per_token_cast(x)
    _equal(ops.cast_back(q, sf, torch.float8_e4m3fn, out=torch.float32), ops.cast_back(q, sf, "e4m3", out="fp32"))
    with pytest.raises(ValueError, match=r"`fmt` must be one of 'e4m3', 'e5m2', 'e2m1', 'e5m6'; got torch.float64"):
        ops.per_token_cast(x, torch.float64)
    # a dtype that names a format the op does not take: the check names the format
    with pytest.raises(ValueError, match=r"`fmt` must be one of 'e4m3', 'e5m2', 'e2m1', 'e5m6'; got 'fp16'"):
        ops.per_token_cast(x, torch.float16)


def test_scale_blocks_given_one_way():
    _equal(ops.per_token_cast(x, scale_block=(1, 64)), ops.per_token_cast(x, group=64))
    _equal(ops.per_channel_cast(x, scale_block=(32, 1)), ops.per_channel_cast(x, group_tokens=32))
    _equal(ops.per_block_cast(x, scale_block=(32, 128)), ops.per_block_cast(x, block_rows=32, block_cols=128))
    q, sf = ops.per_block_cast(x)
    _equal(ops.cast_back(q, sf, "e4m3", scale_block=(128, 128)), ops.cast_back(q, sf, "e4m3", 128, block_rows=128))
    with pytest.raises(ValueError, match=r"per_token_cast: `scale_block` must be \(1, cols\), two integers; got \(2, 64\)"):
        ops.per_token_cast(x, scale_block=(2, 64))
    with pytest.raises(ValueError, match=r"per_channel_cast: `scale_block` must be \(rows, 1\)"):
        ops.per_channel_cast(x, scale_block=128)


def test_every_op_with_a_scale_block_takes_scale_block():
    from tkgen.codegen.generate import BLOCK_COLS, BLOCK_ROWS
    for name in registry.op_modules():
        params = inspect.signature(getattr(ops, name)).parameters
        sides = [p for n, p in params.items() if n in BLOCK_ROWS + BLOCK_COLS]
        if sides and all(p.default is not inspect.Parameter.empty for p in sides):
            assert params["scale_block"].kind is inspect.Parameter.KEYWORD_ONLY, name
        else:       # swiglu_backward_and_per_token_cast: its `group` is a required argument
            assert "scale_block" not in params, name


def test_rms_norm_takes_torch_arguments():
    want = list(inspect.signature(torch.nn.functional.rms_norm).parameters)
    assert list(inspect.signature(F.rms_norm).parameters)[:len(want)] == want
    w = torch.randn(256).to(torch.bfloat16)
    got = F.rms_norm(x.reshape(2, 65, 256), (256,), w, 1e-6)
    assert got.shape == (2, 65, 256)
    torch.testing.assert_close(got.reshape(130, 256), torch.nn.functional.rms_norm(x, (256,), w, 1e-6))
    _equal(F.rms_norm(x, 256, w), F.rms_norm(x, (256,), w, torch.finfo(torch.bfloat16).eps))   # torch's default eps
    with pytest.raises(ValueError, match=r"normalized_shape must be \(256,\), got \(130, 256\)"):
        F.rms_norm(x, (130, 256), w)


def test_the_generator_and_the_runtime_agree_on_format_names(catalog):
    from tkgen.codegen.generate import FORMAT_NAMES
    from tkgen.runtime import format_names
    from tkgen.runtime.conventions import FORMAT_OF_DTYPE
    assert FORMAT_NAMES is format_names.FORMAT_NAMES        # one table (tkgen/runtime/format_names.py)
    assert set(FORMAT_OF_DTYPE.values()) | {"e2m1"} == FORMAT_NAMES     # e2m1: where torch has float4_e2m1fn_x2
    assert {str(d).removeprefix("torch."): f for d, f in FORMAT_OF_DTYPE.items()}.items() <= \
        format_names.FORMAT_OF_TORCH_NAME.items()
    assert FORMAT_NAMES <= set(catalog.elements)           # each an element format of the specs
