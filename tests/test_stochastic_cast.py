"""`stochastic_cast` (TileKernels 2.1.0's `cast(..., stochastic_rounding=True)`): fp32 -> bf16, fp32 -> e4m3,
bf16 -> e4m3 over quads.

The generated reference is held bit for bit to an oracle written here: the hash in numpy uint32 arithmetic
and the rounding rule in float64 (floor(|x| / step), the 16 bits below it, a carry), sharing nothing with
the spec's bit arithmetic. The CPU kernel is held bit for bit to the reference (outputs poisoned first).
Then the statistics of TileKernels' test, on N = 2^20 elements per pair (docs/numerics.md): determinism,
direction bias, magnitude bias, codes adjacent to round-to-nearest-even and some differing from it, and the
rate of rounding up of one value repeated N times against the fraction it drops. Then
`per_token_cast_stochastic` (2.1.0's `per_token_cast(..., stochastic_cast=True)`): the same oracle on the
scaled values with the column-quad index, the scales of `per_token_cast`, and the same statistics of the
dequantized values."""
import numpy as np
import pytest
import torch

import tkgen.ops as ops
from tkgen.testing.check import check_tensors, compare, reference_outputs
from tkgen import registry

PAIRS = [("fp32", "bf16"), ("fp32", "e4m3"), ("bf16", "e4m3")]
TORCH = {"fp32": torch.float32, "bf16": torch.bfloat16, "e4m3": torch.float8_e4m3fn}
N = 1 << 20
STEP = {"bf16": 2.0 ** -7, "e4m3": 2.0 ** -3}           # TileKernels' bias test: 2^-mantissa bits


# -- the oracle -------------------------------------------------------------------------------------------
MULTIPLIERS = (0x5671D42B, 0x9995E499, 0xACE1B8A5, 0xE153538D)


def oracle_words(b, index):
    """The two 32-bit words of each quad of float32 bit patterns b [Q, 4] (uint32) with its index, in
    uint32 arithmetic."""
    u = np.uint32
    h = b[:, 0] * u(MULTIPLIERS[0]) + b[:, 1] * u(MULTIPLIERS[1]) + b[:, 2] * u(MULTIPLIERS[2]) \
        + b[:, 3] * u(MULTIPLIERS[3]) + (index & 0xFFFFFFFF).astype(u)
    h ^= h >> u(23)
    h *= u(0x7FEB352D)
    h ^= h >> u(16)
    out = []
    for m in (0x846CA68B, 0xD35A2D97):
        w = h * u(m)
        out.append(w ^ (w >> u(11)))
    return out


REVERSED16 = np.array([int(f"{v:016b}"[::-1], 2) for v in range(1 << 16)], dtype=np.int64)


def oracle_random_bits(b, fmt, index):
    """Each element's 16 random bits: as PTX's cvt.rs hands them to its operands, elements in memory order
    (e4m3: a pair shares a half of the word, the odd element of the pair takes it reversed)."""
    w0, w1 = (w.astype(np.int64) for w in oracle_words(b, index))
    lo, hi = w0 & 0xFFFF, w0 >> 16
    if fmt == "e4m3":
        return np.stack([lo, REVERSED16[lo], hi, REVERSED16[hi]], 1)
    return np.stack([lo, hi, w1 & 0xFFFF, w1 >> 16], 1)


def oracle_round(x32, r, fmt):
    """float32 values x32 [Q, 4] with random bits r: |x| / step in float64 (step: the format's spacing in
    |x|'s binade, or its subnormal spacing), its integer part k and the 16 bits below it f; k + 1 if f + r
    carries past 16 bits; the largest finite value for larger results and infinities, NaN for NaN, x's
    sign."""
    mant, emin, top = (7, -126, (2 - 2.0 ** -7) * 2.0 ** 127) if fmt == "bf16" else (3, -6, 448.0)
    with np.errstate(invalid="ignore"):           # signalling NaNs widen quietly
        x64 = x32.astype(np.float64)
    a = np.abs(x64)
    finite = np.isfinite(a)
    a0 = np.where(finite, a, 1.0)
    _, e = np.frexp(a0)                                  # a0 = m * 2^e with m in [0.5, 1)
    step = np.ldexp(1.0, np.maximum(e - 1, emin) - mant)
    t = a0 / step                                        # exact: a power-of-two scaling of a float32
    k = np.floor(t)
    f = np.floor((t - k) * 65536)
    v = np.minimum((k + (f + r >= 65536)) * step, top)
    v = np.where(finite, v, np.where(np.isnan(a), np.nan, top))
    v = np.where(np.isnan(v), v, np.copysign(v, x64))
    return torch.from_numpy(v.astype(np.float32)).to(TORCH[fmt])


def oracle(x, fmt, first_quad=0):
    """y of x (any float dtype, numel % 4 == 0): quads indexed from first_quad in the whole tensor."""
    x32 = x.float().reshape(-1, 4).numpy()
    r = oracle_random_bits(x32.view(np.uint32), fmt, np.arange(len(x32), dtype=np.int64) + first_quad)
    return oracle_round(x32, r, fmt).reshape(x.shape)


# -- inputs -----------------------------------------------------------------------------------------------
def f32(bits):
    return torch.tensor(bits, dtype=torch.int64).to(torch.int32).view(torch.float32)


EDGES = [0x00000000, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00000, 0x7F7FFFFF, 0xFF7FFFFF,
         0x7F7F0000, 0x7F7F0001, 0x7F7EFFFF, 0x00800000, 0x00000001, 0x807FFFFF, 0x00010000, 0x0000FFFF,
         0x3F800000, 0x3F80FFFF, 0x3F810000, 0xBF80FFFF]
E4M3_EDGES = [448.0, -448.0, 449.0, 463.99, 464.0, 479.0, 480.0, 481.0, 1e30, -1e30, 2.0 ** -9, 2.0 ** -10,
              -(2.0 ** -10), 3 * 2.0 ** -10, 2.0 ** -6, 2.0 ** -6 - 2.0 ** -20, 2.0 ** -25, 2.0 ** -26,
              7.5 * 2.0 ** -9, 15.5 * 2.0 ** -9, 1.0625, 0.99999994, 240.0, 3.4e38]


def inputs(src, seed, n=1 << 16):
    """Edges of both formats, random float32 bit patterns and normal values over many binades, shuffled into
    quads; for bf16, every code as well."""
    g = torch.Generator().manual_seed(seed)
    bits = torch.randint(-2 ** 31, 2 ** 31, (n,), generator=g, dtype=torch.int64).to(torch.int32)
    spread = torch.randn(n, generator=g) * torch.exp2(torch.randint(-30, 12, (n,), generator=g).float())
    x = torch.cat([f32(EDGES), torch.tensor(E4M3_EDGES), bits.view(torch.float32), spread])
    if src == "bf16":
        x = torch.cat([x.bfloat16(), torch.arange(1 << 16, dtype=torch.int32).to(torch.int16).view(torch.bfloat16)])
    x = x[torch.randperm(x.numel(), generator=g)]
    return x[: x.numel() // 4 * 4].contiguous()


def reference(x, dst, first_quad=0):
    pkg = registry.op_package("stochastic_cast")
    (y,) = reference_outputs(pkg.OP, pkg, {"x": x.view(-1, 4)}, {"dtype": dst, "first_quad": first_quad})
    return y.reshape(-1)


# -- bit for bit ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("src, dst", PAIRS)
def test_reference_is_the_oracle(src, dst):
    x = inputs(src, seed=1)
    compare("y", reference(x, dst), oracle(x, dst), "bit")
    compare("y", reference(x, dst, first_quad=2 ** 31 - 7), oracle(x, dst, first_quad=2 ** 31 - 7), "bit")


def test_oracle_rounding_rule_on_known_values():
    """The rule itself, on values whose outcome does not depend on the hash: exact values stay, overflow
    saturates, NaN stays NaN, the sign of zero stays."""
    x = torch.tensor([1.0, -2.0, 0.0, -0.0, 448.0, 1e30, float("inf"), float("-inf"), 2.0 ** -9, -(2.0 ** -6),
                      3.0, float("nan")])
    y = oracle(x, "e4m3").view(torch.uint8).tolist()
    assert y[:10] == [0x38, 0xC0, 0x00, 0x80, 0x7E, 0x7E, 0x7E, 0xFE, 0x01, 0x88] and y[11] & 0x7F == 0x7F
    b = oracle(f32([0x3F800000, 0x7F7F0000, 0x7F800000, 0xFF800000, 0x7F7FFFFF, 0x80000000, 0x00010000,
                    0x7FC00000]), "bf16").view(torch.int16).tolist()
    assert b[:7] == [0x3F80, 0x7F7F, 0x7F7F, 0xFF7F - 0x10000, 0x7F7F, -0x8000, 0x0001] and b[7] & 0x7FFF > 0x7F80


@pytest.mark.parametrize("src, dst", PAIRS)
def test_kernel_matches_reference(src, dst):
    x = inputs(src, seed=2)
    outs, _ = check_tensors("stochastic_cast", {"x": x.view(-1, 4)}, {"dtype": dst, "first_quad": 0})
    compare("y", outs[0].reshape(-1), oracle(x, dst), "bit")


def test_kernel_with_an_offset_quad_index():
    x = inputs("fp32", seed=3, n=4096)
    outs, _ = check_tensors("stochastic_cast", {"x": x.view(-1, 4)}, {"dtype": "bf16", "first_quad": 123457})
    compare("y", outs[0].reshape(-1), oracle(x, "bf16", first_quad=123457), "bit")


def test_arguments_are_checked():
    with pytest.raises(ValueError, match="`dtype` must be one of"):
        ops.stochastic_cast(torch.randn(2, 4), "fp32")
    with pytest.raises(TypeError, match="dtype"):
        ops.stochastic_cast(torch.randn(2, 4).to(torch.float8_e4m3fn), "bf16")
    with pytest.raises(ValueError):
        ops.stochastic_cast(torch.randn(2, 3), "bf16")
    assert ops.stochastic_cast(torch.randn(0, 4), "e4m3").shape == (0, 4)


# -- statistics -------------------------------------------------------------------------------------------
def level_rank(codes, fmt):
    """The rank of each code among the format's values in order (TileKernels' quant_level_rank)."""
    if fmt == "bf16":
        b = codes.view(torch.int16).to(torch.int64) & 0xFFFF
        mid, mag, neg = 0x7F7F, b & 0x7FFF, b >> 15
    else:
        b = codes.view(torch.uint8).to(torch.int64)
        mid, mag, neg = 0x7E, b & 0x7F, b >> 7
    return torch.where(neg == 1, mid - mag, mid + mag)


def rne(x, fmt):
    return x.float().clamp(-448.0, 448.0).to(TORCH[fmt]) if fmt == "e4m3" else x.float().to(TORCH[fmt])


@pytest.mark.parametrize("src, dst", PAIRS)
def test_statistics(src, dst):
    g = torch.Generator().manual_seed(70321000223)
    x = (torch.randn(N, generator=g) * 8).to(TORCH[src])      # inside the e4m3 range: no saturation
    y = ops.stochastic_cast(x.view(-1, 4), dst).reshape(-1)
    assert torch.equal(y.view(torch.uint8), ops.stochastic_cast(x.view(-1, 4), dst).reshape(-1).view(torch.uint8))
    xf, yf = x.double(), y.double()
    # direction: as many results below x as above it (check_bias)
    below, same = int((yf < xf).sum()), int((yf == xf).sum())
    assert abs((below + same / 2) / N - 0.5) < 10 / N ** 0.5
    # magnitude: the mean error, relative to the mean magnitude
    assert abs(float((yf - xf).mean())) <= 10 * STEP[dst] * float(xf.abs().mean()) / N ** 0.5
    # each result is the value next to x on one side: at most one level from round-to-nearest-even
    near = rne(x, dst)
    gap = (level_rank(y, dst) - level_rank(near, dst)).abs()
    assert int(gap.max()) <= 1
    assert int((gap == 1).sum()) > 0


@pytest.mark.parametrize("src, dst, value, p", [
    ("fp32", "bf16", 1 + 19661 * 2.0 ** -23, 19661 / 65536),       # drops 19661 / 2^16 of a bf16 step
    ("fp32", "e4m3", -(1 + 19661 * 2.0 ** -19), 19661 / 65536),    # the top 16 of the 20 bits it drops
    ("bf16", "e4m3", 1 + 5 * 2.0 ** -7, 5 / 16),
    ("fp32", "e4m3", 3 * 2.0 ** -10, 0.5),                         # 1.5 * 2^-9: between e4m3 subnormals
])
def test_rounds_up_at_the_rate_of_what_it_drops(src, dst, value, p):
    x = torch.full((N,), value, dtype=TORCH[src])
    y = ops.stochastic_cast(x.view(-1, 4), dst).reshape(-1)
    levels = torch.unique(y.double().abs())
    assert levels.numel() == 2 and levels[0] < abs(value) < levels[1]
    assert int(torch.unique(level_rank(y, dst)).diff().abs().max()) == 1      # the two neighbours of x
    up = float((y.double().abs() == levels[1]).double().mean())
    # e4m3's pairs of elements share their random bits (one of them reversed): N / 2 independent draws
    draws = N / 2 if dst == "e4m3" else N
    assert abs(up - p) < 6 * (p * (1 - p) / draws) ** 0.5


# -- per_token_cast(..., stochastic_cast=True) ------------------------------------------------------------
def oracle_inv(x, group, scale):
    """The quantization multiplier of each group, by TileKernels' rules: 448 / a (a = max(amax, 1e-4)), a
    power of two 2^-ceil(log2(a / 448)), or 1 / e4m3(max(a, 448 * 2^-9) / 448)."""
    a = x.float().reshape(x.shape[0], -1, group).abs().amax(-1).clamp(min=1e-4)
    t448 = torch.tensor(448.0)
    if scale == "fp32":
        return t448 / a
    if scale == "e4m3":
        return torch.tensor(1.0) / (a.clamp(min=448 * 2.0 ** -9) / t448).to(torch.float8_e4m3fn).float()
    m, e = torch.frexp((a / t448).double())
    e = torch.where(m == 0.5, e - 1, e)                  # ceil(log2): a power of two is its own bin
    return torch.ldexp(torch.ones_like(a, dtype=torch.float64), -e).float()


def oracle_per_token(x, group, scale):
    T, H = x.shape
    v = (x.float().reshape(T, -1, group) * oracle_inv(x, group, scale)[..., None]).reshape(T, H)
    v32 = v.reshape(-1, 4).numpy()
    column_quad = np.arange(len(v32), dtype=np.int64) % (H // 4)      # the index inside the row
    return oracle_round(v32, oracle_random_bits(v32.view(np.uint32), "e4m3", column_quad), "e4m3").reshape(T, H)


def token_inputs(T, H, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(T, H, generator=g) * torch.exp2(torch.randint(-20, 20, (T, 1), generator=g).float())
    x[1] = 0.0                                                          # a zero row: the amax floor
    x[2, :5] = torch.tensor([-0.0, 2.0 ** -140, 3e38, -3e38, 1.0])      # subnormal, huge, -0
    return x.to(dtype)


@pytest.mark.parametrize("dtype, group, scale, sf_layout", [
    (torch.bfloat16, 128, "fp32", "row"), (torch.float32, 32, "ue8m0", "col"), (torch.bfloat16, 16, "e4m3", "row"),
    (torch.float32, 64, "pow2", "row")])
def test_per_token_cast_stochastic_bit_for_bit(dtype, group, scale, sf_layout):
    x = token_inputs(7, 384, dtype, seed=group)
    params = {"group": group, "scale": scale, "sf_layout": sf_layout}
    (q, sf), (q_ref, _) = check_tensors("per_token_cast_stochastic", {"x": x}, params)    # kernel vs reference
    compare("q", q_ref, oracle_per_token(x, group, scale), "bit")
    if group != 16:                                       # the scales are those of the round-to-nearest cast
        compare("sf", sf, ops.per_token_cast(x, "e4m3", group, scale, sf_layout)[1], "bit")
    else:                                                 # e4m3 scales: e4m3(max(a, 448 * 2^-9) / 448)
        a = x.float().reshape(7, -1, group).abs().amax(-1).clamp(min=448 * 2.0 ** -9)
        compare("sf", sf, (a / torch.tensor(448.0)).to(torch.float8_e4m3fn), "bit")


def test_per_token_cast_stochastic_statistics():
    g = torch.Generator().manual_seed(70208163137)
    x = torch.randn(256, 4096, generator=g).bfloat16()       # N = 2^20 elements
    q, sf = ops.per_token_cast_stochastic(x, 128)
    q_rne, sf_rne = ops.per_token_cast(x, "e4m3", 128)
    compare("sf", sf, sf_rne, "bit")
    assert torch.equal(q.view(torch.uint8), ops.per_token_cast_stochastic(x, 128)[0].view(torch.uint8))
    deq = (q.float().reshape(256, 32, 128) * sf[..., None]).reshape(256, 4096).double()
    ref = x.double()
    below, same = int((deq < ref).sum()), int((deq == ref).sum())
    assert abs((below + same / 2) / N - 0.5) < 10 / N ** 0.5
    assert abs(float((deq - ref).mean())) / float(ref.abs().mean()) < 10 * STEP["e4m3"] / N ** 0.5
    gap = (level_rank(q, "e4m3") - level_rank(q_rne, "e4m3")).abs()
    assert int(gap.max()) <= 1 and int((gap == 1).sum()) > 0


def test_type_rules(tmp_path):
    from tkgen.driver import validate_files
    spec = (registry.specs_dir() / "quant" / "stochastic_cast.yaml").read_text()

    def error(old, new):
        assert old in spec
        p = tmp_path / "op.yaml"
        p.write_text(spec.replace(old, new))
        errors = validate_files([p], registry.specs_dir())
        assert len(errors) == 1, errors
        return errors[0].message
    assert "drops at least 16 bits" in error("stochastic_round(dtype, xf, r)", "stochastic_round(fp32, xf, r)")
    assert "i32 random bits" in error("stochastic_round(dtype, xf, r)", "stochastic_round(dtype, xf, xf)")
    assert "takes a float32" in error("bits(take(load(x), l, 0))", "bits(iota(l))")
    assert "takes an i32" in error("- y = stochastic_round(dtype, xf, r)", "- y = from_bits(xf)")
    assert "power-of-two integer literal up to 64" in error("reverse_bits(half, 16)", "reverse_bits(half, 12)")
    assert "takes an integer" in error("reverse_bits(half, 16)", "reverse_bits(to_f32(half), 16)")


@pytest.mark.parametrize("dtype, n", [("i32", 8), ("i32", 16), ("i32", 32), ("i64", 16), ("i64", 64)])
def test_reverse_bits_against_a_string_reversal(dtype, n):
    from tkgen.spec import expr as E
    from tkgen.ir import prim as ir
    from tkgen.codegen.printers import TorchPrinter
    from tkgen.runtime import torch_prims as P
    from tkgen.lower.stages.elementwise import ReverseBits

    class Args:                      # the builder's part the function uses: its operand, as a variable
        def elementwise(self, idx, node, axes):
            return ir.Var("x", dtype)
    node = E.Call("reverse_bits", (E.Name("x", 0), E.Num(n, 0)), 0)
    e = ReverseBits().build(Args(), 0, node, set())
    width = 32 if dtype == "i32" else 64
    g = torch.Generator().manual_seed(n)
    x = torch.randint(-2 ** 62, 2 ** 62, (4096,), generator=g)
    x = P._wrap_i32(x) if dtype == "i32" else x
    got = eval(TorchPrinter()(e), vars(P), {"x": x})  # noqa: S307  (our own IR, printed)
    want = [int(f"{v & ((1 << n) - 1):0{n}b}"[::-1], 2) for v in x.tolist()]
    want = [w - (1 << width) if w >> (width - 1) else w for w in want]       # as a signed value
    assert got.tolist() == want
