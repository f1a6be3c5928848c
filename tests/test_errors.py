"""Bad tensors and params raise before any launch, naming the argument and the rule."""
import pytest
import torch

import tkgen.ops as ops


def test_per_token_cast_dtype():
    with pytest.raises(TypeError, match=r"`x` must have dtype torch.bfloat16 or torch.float32, got torch.float16"):
        ops.per_token_cast(torch.zeros(4, 128, dtype=torch.float16))


def test_per_token_cast_not_a_tensor():
    with pytest.raises(TypeError, match="`x` must be a torch.Tensor"):
        ops.per_token_cast([[1.0] * 128])


def test_per_token_cast_rank():
    with pytest.raises(ValueError, match="`x` must have rank 2"):
        ops.per_token_cast(torch.zeros(4, 2, 64, dtype=torch.bfloat16))


def test_per_token_cast_contiguity():
    x = torch.zeros(256, 4, dtype=torch.bfloat16).t()
    with pytest.raises(ValueError, match="`x` must be contiguous"):
        ops.per_token_cast(x)


def test_per_token_cast_group_rule():
    x = torch.zeros(4, 96, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match=r"requirement `H % group == 0`"):
        ops.per_token_cast(x, group=64)
    with pytest.raises(ValueError, match=r"`group` must be one of 32, 64, 128, H \(= 96 here\); got 100"):
        ops.per_token_cast(x, group=100)


def test_per_token_cast_format_and_scale_names():
    x = torch.zeros(4, 128, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="`fmt` must be one of 'e4m3', 'e5m2'"):
        ops.per_token_cast(x, fmt="e3m4")
    with pytest.raises(ValueError, match="`scale` must be one of"):
        ops.per_token_cast(x, scale="fp16")


def test_topk_gate_k_range_and_dtype():
    s = torch.zeros(3, 16)
    with pytest.raises(ValueError, match=r"`k` must be an integer in \[1, 16\]; got 17"):
        ops.topk_gate(s, 17)
    with pytest.raises(ValueError, match=r"`k` must be an integer in \[1, 16\]; got 0"):
        ops.topk_gate(s, 0)
    with pytest.raises(TypeError, match="`scores` must have dtype torch.float32"):
        ops.topk_gate(s.double(), 2)


def test_topk_gate_size_bound():
    with pytest.raises(ValueError, match="size E must be between 1 and 512, got 513"):
        ops.topk_gate(torch.zeros(2, 513), 2)


def test_unsupported_device():
    with pytest.raises(ValueError, match="expected a cpu or cuda tensor"):
        ops.topk_gate(torch.zeros(2, 8, device="meta"), 2)


def test_unknown_op():
    with pytest.raises(AttributeError, match="no operator 'nope'"):
        ops.nope


def test_swiglu_backward_and_per_token_cast_params():
    q = torch.zeros(2, 256, dtype=torch.float8_e4m3fn)
    sf, g = torch.ones(2, 2), torch.zeros(2, 128, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match=r"`clamp` must be a number or None; got 'none'"):
        ops.swiglu_backward_and_per_token_cast(q, sf, g, 128, clamp="none")
    with pytest.raises(ValueError, match=r"requirement `scale != 'ue8m0' or H / group % 4 == 0`"):
        ops.swiglu_backward_and_per_token_cast(q, sf, g, 128, scale="ue8m0")     # a word would straddle a | b
    with pytest.raises(TypeError, match=r"`q` holds e4m3 codes and must have dtype torch.float8_e4m3fn"):
        ops.swiglu_backward_and_per_token_cast(q.float(), sf, g, 128)


def _recompile_topk_gate(monkeypatch, capsys):
    """A call of topk_gate whose kernel is built afresh (the in-process caches emptied) and made to take
    0.3 s, past a lowered announcement threshold; its stderr."""
    from tkgen.runtime import compile as C
    s = torch.zeros(2, 16)
    ops.topk_gate(s, 2)                                    # compiled (or read from the disk cache) once
    capsys.readouterr()
    monkeypatch.setattr(C, "_CACHE", {})
    monkeypatch.delitem(ops.topk_gate.__globals__["OP"].__dict__, "_site")
    monkeypatch.setattr(C, "ANNOUNCE_AFTER", 0.05)
    build = C.build
    monkeypatch.setattr(C, "build", lambda *a, **k: (__import__("time").sleep(0.3), build(*a, **k))[1])
    ops.topk_gate(s, 2)
    return capsys.readouterr().err


def test_a_first_call_that_compiles_says_so_once(monkeypatch, capsys):
    monkeypatch.delenv("TKGEN_QUIET", raising=False)
    err = _recompile_topk_gate(monkeypatch, capsys).splitlines()
    assert len(err) == 2, err
    assert err[0].startswith("tkgen: compiling topk_gate (base, 16, 2) for cpu: a first call") and "TKGEN_QUIET" in err[0]
    assert err[1].startswith("tkgen: compiled topk_gate (base, 16, 2) for cpu in ") and err[1].endswith(" s")
    ops.topk_gate(torch.zeros(5, 16), 2)                  # the same specialization: silent
    assert capsys.readouterr().err == ""


def test_tkgen_quiet_silences_the_compile_line(monkeypatch, capsys):
    monkeypatch.setenv("TKGEN_QUIET", "1")
    assert _recompile_topk_gate(monkeypatch, capsys) == ""


def test_a_choice_named_by_a_dim_is_accepted_where_it_is_listed():
    """group="H" (listed by `tkgen show` and by the error above) means one scale per row: the size of H,
    on the fast path, through the dispatcher (an input that requires grad) and under torch.compile."""
    x = torch.randn(4, 96, dtype=torch.bfloat16)
    want = ops.per_token_cast(x, group=96)
    for got in (ops.per_token_cast(x, group="H"), ops.per_token_cast(x, group="H"),       # built, then fast
                torch.compile(lambda t: ops.per_token_cast(t, group="H"), fullgraph=True, backend="eager")(x)):
        assert got[1].shape == (4, 1)
        assert torch.equal(got[0].view(torch.uint8), want[0].view(torch.uint8)) and torch.equal(got[1], want[1])
    xf = x.float().requires_grad_()
    assert torch.equal(ops.per_token_cast(xf, group="H")[1], ops.per_token_cast(x.float(), group=96)[1])
    q, sf = want
    assert torch.equal(ops.cast_back(q, sf, "e4m3", block="H"), ops.cast_back(q, sf, "e4m3", block=96))
    with pytest.raises(ValueError, match=r"`group` must be one of 32, 64, 128, H \(= 96 here\); got 'T'"):
        ops.per_token_cast(x, group="T")
