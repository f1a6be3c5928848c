"""Schedules: the data that says how a naive kernel-IR module runs on a target, and the passes that apply it.

A schedule is resolved in layers, each overriding the one before (`resolve`): the profile's `threads`, the
spec's `default` block, the spec's block for the arch, then the profile's `tuned[<op>]` written by `tkgen
tune`. `apply` then runs the profile's pipeline of passes (tkgen/schedule/passes.py: the default list of
each backend, or the profile's `passes:`), each a named rewrite registered in its own module:

1. `plan_tiles` (tiles.py): how each axis is held (whole, padded to a power of two, split across blocks)
   and the factory's knobs (`threads`, `block_<axis>`, `tile_elems`);
2. `guard_out_of_range` (guards.py): where a tile reaches past its axis (the rows of a last partial
   block, padding), tensors are neither read nor written, and what a reduction over that axis reads there
   is its neutral value; `mask_nan_reductions`: on targets whose max does not skip NaN, max-type
   reductions read a copy with NaNs replaced by the neutral value;
3. `stage_transposed_stores` (stores.py): a store whose innermost storage dim is not the tile's innermost
   axis goes through shared memory; `inline_stored`: a computed value that is only stored is computed
   where it is stored;
4. `read_fold_sources` (fold_sources.py): an ordered fold of a value that is a function of loads
   computes each element where it is added; `replan_tiles` (tiles.py): the blocks sized again for the
   tiles left;
5. `stream` (stream.py), for the axes of `stream:`: the statements over such an axis run in a loop over
   its chunks; `place_gemm` (CUDA: T.gemm) or `expand_gemm` (the ordered loop) (gemm.py);
6. `go_persistent` (persistent.py), where the schedule says `persistent: true`; `scan_rows`
   (row_scans.py): prefixes along the rows in two launches; `zero_padding_rows` (padding_rows.py);
7. `fuse` (loops.py): consecutive elementwise statements over the same axes share one loop;
   on CUDA `recompute_index_values` (index_values.py: a tile of index arithmetic computed in its readers),
   `share_broadcasts` (broadcasts.py: a tile that loops of several wider shapes read is shared),
   `coalesce_widening_loads` and `unroll_fetching_loops`; `vector_knobs`;
8. `index_tiles` (tile_indices.py): the global index of a tiled axis written out, the grid declared;
9. `check_tile_bytes` (tile_bytes.py): the profile's bound on a block's tile bytes.
"""
from __future__ import annotations

import contextlib
import contextvars

from ..ir import kernel as kir
from ..spec.signature import storage
from . import passes as PS

_VERIFY = contextvars.ContextVar("tkgen_verify", default=False)


@contextlib.contextmanager
def verifying(on: bool = True):
    """Within it, `apply` checks the module after every pass (tkgen/ir/verify.py)."""
    token = _VERIFY.set(on)
    try:
        yield
    finally:
        _VERIFY.reset(token)


def resolve(spec, arch) -> dict:
    """Profile defaults, then the spec's default schedule, then its block for this arch, then tuned data.
    A later layer's `passes` replaces the pipeline; its `pass_params` set parameters one by one."""
    sched = {"threads": arch.threads}
    for layer in (spec.schedule.get("default", {}), spec.schedule.get(arch.name, {}),
                  arch.tuned.get(spec.name, {})):
        for k, v in layer.items():
            if k == "pass_params":       # by pass, then by parameter
                v = {name: {**sched.get(k, {}).get(name, {}), **params} for name, params in v.items()}
            sched[k] = {**sched.get(k, {}), **v} if isinstance(v, dict) else v
    return sched



def apply(module: kir.Module, catalog, arch, sched, verify=None, trace=None) -> kir.Module:
    """The module rewritten for `arch` under schedule `sched` by the profile's pipeline of passes (see the
    module docstring). `verify`: check the module after every pass (default: on within `verifying()`);
    `trace`: a passes.Trace that collects the module after each pass."""
    ctx = PS.Context(catalog, arch, sched, naive=module)
    return PS.run(module, ctx, verify=_VERIFY.get() if verify is None else verify, trace=trace)


def bank_pad_elems(catalog, arch, elem) -> int:
    from ..spec.formats import ITEMSIZE
    return 16 // ITEMSIZE[storage(catalog, arch, elem)]

