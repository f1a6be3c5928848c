"""Integer compute on exponents: `exponent(v)`, `exp2(n)`, integer literals next to i32 values, amax and
amin over i32. Their IR is evaluated as the reference prints it and held to independent statements; the
type rules reject what the targets would compute differently."""
import torch

from tkgen.spec import formats as F
from tkgen.ir import prim as ir
from tkgen import registry
from tkgen.driver import validate_files
from tkgen.codegen.printers import TorchPrinter
from tkgen.runtime import torch_prims as P

LOSSLESS = (registry.specs_dir() / "quant" / "per_block_cast_lossless.yaml").read_text()


def _eval(expr, **values):
    return eval(TorchPrinter()(expr), vars(P), values)  # noqa: S307  (generated source of our own IR)


def test_exp2_of_an_integer_is_exact_for_every_integer():
    n = torch.cat([torch.arange(-400, 400), torch.tensor([-2 ** 31, -2 ** 31 + 1, 2 ** 31 - 1])])
    got = _eval(F.pow2_of_int(ir.Var("n", ir.I32)), n=n)
    # float64 powers of two rounded once to float32: subnormals down to 2^-149, 0 below, inf above 2^127
    want = torch.ldexp(torch.ones(n.shape, dtype=torch.float64), n.clamp(-1000, 1000)).float()
    assert torch.equal(got.view(torch.int32), want.view(torch.int32))


def test_exponent_is_the_biased_exponent_field():
    g = torch.Generator().manual_seed(0)
    bits = torch.cat([torch.arange(-2 ** 15, 2 ** 15, dtype=torch.int32) << 16,       # every bf16 pattern
                      torch.randint(-2 ** 31, 2 ** 31 - 1, (1 << 16,), generator=g, dtype=torch.int32)])
    x = bits.view(torch.float32)
    got = _eval(F.exponent_field(ir.Var("x", ir.F32)), x=x)
    assert torch.equal(got, (bits.to(torch.int64) >> 23) & 0xFF)
    # a power of two comes back from its exponent
    e = torch.arange(1, 255)
    assert torch.equal(_eval(F.exponent_field(F.pow2_of_int(ir.Var("n", ir.I32))), n=e - 127), e)


def _error(tmp_path, old, new):
    assert old in LOSSLESS
    p = tmp_path / "op.yaml"
    p.write_text(LOSSLESS.replace(old, new))
    errors = validate_files([p], registry.specs_dir())
    assert len(errors) == 1, errors
    return errors[0].message


def test_integer_type_rules(tmp_path):
    assert "integer value" in _error(tmp_path, "m = exp2(e - e_out)", "m = exp2(load(q))")
    assert "takes a float" in _error(tmp_path, "e = exponent(load(sf))", "e = exponent(exponent(load(sf)))")
    # `/` would be integer division in the kernel and true division in torch
    assert "divides floats" in _error(tmp_path, "e_out = max(e_max - 6, 0)", "e_out = e_max / 2")
    assert "integers take amax and amin" in _error(tmp_path, "e_max = amax(amax(e, k), r)", "e_max = sum(amax(e, k), r)")
    # only integer literals become i32 next to an i32 value
    assert "one dtype" in _error(tmp_path, "e_out = max(e_max - 6, 0)", "e_out = max(e_max - 6.0, 0)")
