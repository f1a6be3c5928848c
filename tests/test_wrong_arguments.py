"""Every public function of tkgen.ops, tkgen.compat.tilekernels(_v1) and tkgen.nn.functional, given one wrong
argument (its first tensor of a wrong dtype, or of a wrong rank), raises TypeError or ValueError naming that
argument: no AssertionError, no raw error from deep inside. The calls are built from each function's
signature (tkgen.ops: from its OpInfo), the other arguments from a small table by name."""
import inspect

import pytest
import torch

import tkgen.compat.tilekernels as tk
import tkgen.compat.tilekernels_v1 as tk1
import tkgen.nn.functional as F
import tkgen.ops as ops
from test_compat import V1, V2, _module
from tkgen import registry
from tkgen.runtime.ops import TORCH_DTYPES

WRONG = torch.complex64          # no function takes it

# the other arguments, by parameter name: valid values, so that only the first argument is wrong
T, H = 4, 128
ARGS = {"fmt": "e4m3", "num_per_channels": 128, "num_per_tokens": 128, "x_block_size": (1, 128), "eps": 1e-6,
        "num_topk": 2, "num_experts": 8, "num_expanded_tokens": 0, "alignment": 16, "hc": 4, "mhc_mult": 4,
        "dtype": torch.bfloat16, "num_groups": 0, "n": 8, "num_ep_ranks": 1, "tp_rank": 0, "num_tp_ranks": 1,
        "routed_scaling_factor": 1.0, "use_shared_as_routed": False, "num_shared_experts": 0, "ep_rank": 0,
        "num_topk_groups": 0, "scoring_func": "sigmoid", "clamp_value": 1.0, "beta1": 0.9, "num_aux_topk": 2,
        "num_topk_sum": 2, "mhc_post_mult_value": 2.0, "mhc_pre_eps": 1e-6, "mhc_norm_eps": 1e-6,
        "normalized_shape": H, "block_size": (128, 128), "x_block_size_out": (1, 128)}
# per function: arguments in place of the table's (a tensor where the name alone does not tell its shape)
BF = dict(dtype=torch.bfloat16)
OVERRIDES = {
    "quant.swiglu_forward": {"fmt": "bf16"},
    "quant.swiglu_backward": {"fmt": "bf16", "act_x_grad": torch.zeros(T, H, **BF)},
    "engram.engram_gate_bwd": {"hidden_states": torch.zeros(T, 4, H, **BF), "kv": torch.zeros(T, 5, H, **BF)},
    "engram.engram_gate_fwd": {"kv": torch.zeros(T, 5, H, **BF)},
    "moe.expand_to_fused": {"token_topk_to_pos": torch.arange(T, dtype=torch.int32).view(T, 1),
                            "pos_to_expert": torch.zeros(T, dtype=torch.int32)},
    "moe.expand_to_fused_with_sf": {"token_topk_to_pos": torch.arange(T, dtype=torch.int32).view(T, 1),
                                    "pos_to_expert": torch.zeros(T, dtype=torch.int32)},
    "moe.group_count": {"num_groups": 4}, "moe.inplace_unique_group_indices": {"num_groups": 4},
    "engram.grad_w_reduce": {"grad_weight_hidden": torch.zeros(4, H), "grad_weight_embed": torch.zeros(4, H)},
}
# whose first argument is a pair (codes, scales): the codes wrong
PAIRS = {"quant.cast_back", "quant.per_token_cast_back", "quant.per_block_cast_lossless",
         "quant.swiglu_backward_and_per_token_cast", "moe.expand_to_fused_with_sf"}
ANY_RANK = {"quant.cast"}          # x.to(dtype) of any shape, a scalar too
NO_TENSOR = {"rand.randn", "rand.set_seed", "rand.randn_like"}     # torch.randn's arguments: any dtype


def compat_functions():
    for root, names, release in ((tk, V2, "2.1.0"), (tk1, V1, "1.0")):
        for path, fns in names.items():
            for name in fns:
                fn = getattr(_module(root, path), name)
                if inspect.isclass(fn) or "not built in tkgen yet" in (fn.__doc__ or "") or \
                        f"{path}.{name}" in NO_TENSOR:
                    continue
                yield pytest.param(f"{path}.{name}", fn, id=f"{release}-{path}.{name}")
    for name in sorted(vars(F)):
        fn = vars(F)[name]
        if not name.startswith("_") and inspect.isfunction(fn) and fn.__module__ == F.__name__:
            yield pytest.param(name, fn, id=f"nn.functional.{name}")
    for name in sorted(F.__dir__()):                  # the generated functions
        if name not in vars(F):
            yield pytest.param(name, getattr(F, name), id=f"nn.functional.{name}")


def _required(fn):
    return [p for p in inspect.signature(fn).parameters.values()
            if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]


def _names(message, arg):
    return f"`{arg}`" in message or f"{arg} must" in message


@pytest.mark.parametrize("label, fn", list(compat_functions()))
@pytest.mark.parametrize("wrong", ["dtype", "rank"])
def test_compat_and_functional_name_a_wrong_first_argument(label, fn, wrong):
    if wrong == "rank" and label in ANY_RANK:
        pytest.skip("any rank is right")
    params = _required(fn)
    first, rest = params[0].name, params[1:]
    over = OVERRIDES.get(label, {})
    bad = torch.zeros(T, H, dtype=WRONG) if wrong == "dtype" else torch.zeros((), dtype=torch.bfloat16)
    if label in PAIRS:
        bad = (bad, torch.ones(T, 1))
    args = [bad] + [over.get(p.name, ARGS.get(p.name, torch.zeros(T, H, **BF))) for p in rest]
    with pytest.raises((TypeError, ValueError)) as e:
        fn(*args)
    assert _names(str(e.value), first), f"{label}: {type(e.value).__name__}: {e.value}"


def op_functions():
    for name in sorted(registry.op_modules()):
        yield pytest.param(name, id=name)


@pytest.mark.parametrize("name", list(op_functions()))
@pytest.mark.parametrize("wrong", ["dtype", "rank"])
def test_every_op_names_a_wrong_first_tensor(name, wrong):
    fn = getattr(ops, name)
    info = registry.op_package(name).OP
    first = info.inputs[0]
    rank = len(first.shape)
    if wrong == "dtype":
        bad = torch.zeros((2,) * rank, dtype=WRONG)
    else:
        dt = TORCH_DTYPES[first.dtypes[0]] if first.dtypes else torch.float32
        bad = torch.zeros((2,) * (rank + 1), dtype=dt)
    params = {p.name: p for p in info.params}
    args = []
    for p in _required(fn)[1:]:
        if p.name in params:
            q = params[p.name]
            args.append(q.choices[0] if q.choices else 1.0 if q.kind == "float" else 1)
        else:                            # another tensor: any of its dtypes, checked after the first
            other = next(i for i in info.inputs if i.name == p.name)
            dt = TORCH_DTYPES[other.dtypes[0]] if other.dtypes else torch.float32
            args.append(torch.zeros((2,) * len(other.shape), dtype=dt))
    with pytest.raises((TypeError, ValueError)) as e:
        fn(bad, *args)
    assert f"`{first.name}`" in str(e.value), f"{name}: {type(e.value).__name__}: {e.value}"
