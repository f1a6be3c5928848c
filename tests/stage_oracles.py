"""Independent oracles of the stage additions (tests/stage_specs/), run in a subprocess by
tests/test_stage_additions.py with TKGEN_SPECS and TKGEN_GENERATED naming a tree generated from them:
each op's CPU kernel against formulas written here in plain Python and torch, not against the generated
reference (the property test holds kernel and reference to each other, bit for bit)."""
import math
import struct
import sys

import torch

from tkgen import ops
from tkgen.runtime import libm

I64, I32 = 2 ** 64, 2 ** 32


def wrap(v, bits):
    v &= (1 << bits) - 1
    return v - (1 << bits) if v >> (bits - 1) else v


def f32(v):
    return struct.unpack("<f", struct.pack("<f", v))[0]


def same_bits(got, want, what):
    got, want = got.contiguous(), want.contiguous().to(got.dtype)
    if got.dtype.is_floating_point:
        nan = torch.isnan(got) & torch.isnan(want)
        ok = (got.view(torch.int32 if got.element_size() == 4 else torch.int16) ==
              want.view(torch.int32 if got.element_size() == 4 else torch.int16)) | nan
    else:
        ok = got == want
    assert bool(ok.all()), f"{what}: {int((~ok).sum())} elements differ, e.g. got {got[~ok][:4]} want {want[~ok][:4]}"


def int_mix():
    g = torch.Generator().manual_seed(1)
    a = torch.randint(-2 ** 62, 2 ** 62, (6, 5), generator=g)
    a[0, :2] = torch.tensor([-2 ** 63, 2 ** 63 - 1])
    b = torch.randint(-3, 4, (6, 5), generator=g, dtype=torch.int32)
    b[0, :3] = torch.tensor([-1, -1, 0], dtype=torch.int32)
    b[1, 0] = -2 ** 31
    for sh in (3, 40):
        q, r, m, top, w = ops.int_mix(a, b, sh=sh)
        for (t, h), x in zip(torch.cartesian_prod(torch.arange(6), torch.arange(5)).tolist(), a.flatten().tolist()):
            y = int(b[t, h])
            want_q = 0 if y == 0 else wrap(-x, 64) if y == -1 else x // y
            want_r = 0 if y in (0, -1) else x % y
            assert int(q[t, h]) == want_q and int(r[t, h]) == want_r, (x, y, int(q[t, h]), int(r[t, h]))
            want_m = ((wrap(y << (sh % 32), 32) ^ (y >> 1)) & 0xFF) | (h << 8)
            assert int(m[t, h]) == want_m, (y, sh, int(m[t, h]), want_m)
            assert int(w[t, h]) == wrap(~x, 32)
        for t in range(6):
            assert int(top[t]) == max(wrap(int(a[t, h]) * 3 + h, 64) for h in range(5))


def float_mix():
    g = torch.Generator().manual_seed(2)
    x = torch.randn(5, 7, generator=g) * 3
    x[0] = torch.tensor([-1.0, -0.0, 0.0, float("inf"), float("nan"), -2.0, 1e-30])
    w = torch.randn(7, generator=g)
    lg, f, s, i = ops.float_mix(x, w)
    with torch.no_grad():
        want_l = torch.where(x > -1, libm.log1pf(x), -torch.inf)
        same_bits(lg, want_l, "l")
        # on the CPU, fma is the exact product plus the addend rounded to float64, then to float32
        same_bits(f, (x.double() * w.double() + (x * 0.5).double()).float(), "f")
        n = x * 1000.0
        trunc = [0 if math.isnan(v) else 2 ** 31 - 1 if v >= 2 ** 31 else -2 ** 31 if v < -2 ** 31 else int(v)
                 for v in n.flatten().tolist()]
        div7 = torch.tensor([float(v // 7) for v in trunc], dtype=torch.float32).reshape(x.shape)
        same_bits(s, x[:, :, None] * torch.arange(3, dtype=torch.float32) + div7[:, :, None], "s")
        assert torch.equal(i, (torch.arange(5)[:, None] + 100 * torch.arange(3)).to(torch.int32))


def folds():
    g = torch.Generator().manual_seed(3)
    x = torch.randn(11, 7, generator=g) * torch.exp2(torch.randint(-20, 20, (11, 7), generator=g).float())
    n = torch.randint(-100000, 100000, (11, 7), generator=g)
    s, p, c, q, bits = ops.folds(x, n)
    for t in range(11):
        acc, prod = -0.0, 1.0
        for h in range(7):
            acc = f32(acc + float(x[t, h]))
            prod = f32(prod * float(x[t, 6 - h]))
        same_bits(s[t:t + 1], torch.tensor([acc]), f"s[{t}]")
        same_bits(p[t:t + 1], torch.tensor([prod]), f"p[{t}]")
        want = 3
        for h in range(7):
            want = wrap(want * int(n[t, h]), 64)
        assert int(q[t]) == want
        xor, ior, iand = 0, 7, -2
        for h in range(7):
            xor, ior, iand = xor ^ int(n[t, h]), ior | int(n[t, h]), iand & int(n[t, h])
        assert int(bits[t]) == wrap(xor + ior * 3 + iand * 5, 64)
    e = libm.expf(x)
    for blk in range(3):
        for h in range(7):
            acc = 0.0
            for r in range(4):
                if blk * 4 + r < 11:            # the last block has three rows
                    acc = f32(acc + float(e[blk * 4 + r, h]))
            same_bits(c[blk, h:h + 1], torch.tensor([acc]), f"c[{blk}, {h}]")


def gathers():
    g = torch.Generator().manual_seed(4)
    s = torch.randint(-3, 4, (6, 9), generator=g).float()
    s[0, :4] = torch.tensor([float("nan"), -0.0, 0.0, float("inf")])
    ids = torch.randint(-1000, 1000, (9,), generator=g)
    pick = torch.randint(-2, 11, (6, 3), generator=g, dtype=torch.int32)
    idx, val, w, gid, anyv = ops.gathers(s, ids, pick)
    for t in range(6):
        row = s[t].tolist()
        key = [(0 if math.isnan(v) else 1, -(0.0 if math.isnan(v) else v), e) for e, v in enumerate(row)]
        want = [e for _, _, e in sorted(key)[:3]]
        assert idx[t].tolist() == want, (row, idx[t].tolist(), want)
        same_bits(val[t], s[t, want], f"val[{t}]")
        assert gid[t].tolist() == ids[want].tolist()
        same_bits(anyv[t], torch.tensor([row[p] if 0 <= p < 9 else 0.0 for p in pick[t].tolist()]), f"anyv[{t}]")


def segs():
    g = torch.Generator().manual_seed(5)
    x = torch.randn(4, 2, 5, generator=g)
    kv = torch.randn(4, 3, 5, generator=g).to(torch.bfloat16)
    packed = torch.randn(4, 13, generator=g)
    out, ab, cs, vcopy = ops.segs(x, kv, packed)
    same_bits(out, x * kv[:, :2].float() + kv[:, 2:].float(), "out")
    same_bits(ab, packed[:, :5] - packed[:, 5:10], "ab")
    same_bits(cs, ((0.0 + packed[:, 10]) + packed[:, 11]) + packed[:, 12], "cs")
    assert torch.equal(vcopy.view(torch.int16), kv[:, 2].contiguous().view(torch.int16))


def products():
    """The ordered sums of products, from +0.0 in ascending k, each product and sum rounded (K = 5 streams in
    chunks of 1 on the C target, K = 24 in chunks of 4)."""
    g = torch.Generator().manual_seed(6)
    for t, k, n in ((7, 5, 3), (4, 24, 8)):
        x, w = torch.randn(t, k, generator=g), torch.randn(k, n, generator=g)
        x[1, 2] = -0.0
        y, z = ops.products(x, w)
        e = libm.expf(x / 8)
        for got, a, what in ((y, x, "y"), (z, e, "z")):
            acc = torch.zeros(t, n)
            for i in range(k):
                acc = acc + a[:, i:i + 1] * w[i][None, :]
            same_bits(got, acc, what)


if __name__ == "__main__":
    for name in sys.argv[1:]:
        globals()[name]()
        print(name, "ok")
