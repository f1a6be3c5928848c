"""The memory a kernel's tiles take, bounded by the profile's `max_tile_bytes` (issue 26, item 3).

On the C target every tile is a thread-private array on the stack: a tile of 4096 tokens x 8 x 256 experts
held whole (about 75 MB) overflowed it and the process died (exit 139). A profile that sets
`max_tile_bytes` bounds the bytes of all tiles a block holds at once (buffers in registers, local or shared
memory; one-element scalars are left out):

- `validate` (and `generate`) evaluate the tiles' bytes at the sizes the spec names (tkgen/spec/checks.py:
  `admitted_sizes` without the dims' max: each dim at its min and test values, an unbounded dim also at min + 7
  and 4096) and reject a schedule whose tiles pass the bound there, naming the bytes, the sizes and the
  bound;
- where larger sizes the spec admits (a dim's max, or a dim with none) may pass it, the kernel factory checks
  the bound when it specializes, before anything is compiled or launched: a `ValueError`, not a crash.

The sum of the buffers is an upper bound on the stack a C kernel takes (the compiler may keep fewer of them).
"""
from __future__ import annotations

import functools
from collections.abc import Mapping

from ..ir import kernel as kir
from ..ir import prim as ir
from ..runtime import schedule as R
from ..spec import expr as E
from ..spec.formats import ITEMSIZE
from ..spec.signature import storage
from .passes import register

_BYTES = {ir.F32: 4, ir.I32: 4, ir.U32: 4, ir.F64: 8, ir.I64: 8, ir.BOOL: 1}

# the schedule arithmetic the factory runs (tkgen/runtime/schedule.py), beside the constant functions
_FUNCS = {
    "pick_block": functools.lru_cache(maxsize=4096)(R.pick_block),
    "pad_pow2": R.pad_pow2, "fit_rows": R.fit_rows, "fit_threads": R.fit_threads,
}


def buffer_bytes(catalog, arch, b: kir.Buffer) -> int:
    if b.dtype == ir.RAW:
        return ITEMSIZE.get(storage(catalog, arch, b.elem), 4)
    return _BYTES.get(b.dtype, 4)


def tiles_bytes(module: kir.Module, kernel: kir.Kernel, catalog, arch) -> E.Node:
    """The bytes of every tile `kernel` holds, as a size expression over the factory's names (`B_<axis>`
    for an axis held in blocks, `N_<axis>` for one held whole)."""
    tiles = dict(kernel.tiles)
    # a buffer a pipelined loop copies into is held once per stage (tkgen/schedule/pipelined.py)
    versions = {c.buf.name: st.stages for st in kir.statements(kernel.body) if isinstance(st, kir.Loop)
                and st.kind == "pipelined" for c in st.body if isinstance(c, kir.Copy) and not c.store}
    total = None
    for b in sorted(kir.buffers(kernel.body).values(), key=lambda b: b.name):
        if b.scope == "var" or not b.axes:
            continue
        size = E.Num(buffer_bytes(catalog, arch, b) * versions.get(b.name, 1))
        for a in b.axes:
            held = tiles.get(a)
            blocked = held is not None and held.block is not None
            size = E.Binary("*", size, E.Name(ir.block_name(a) if blocked else ir.extent_name(a)))
        total = size if total is None else E.Binary("+", total, size)
    return total if total is not None else E.Num(0)


class _Sizes(Mapping):
    """The factory's names over some sizes: a name bound to a size expression (`B_h` to its `pick_block`
    call) is evaluated where it is read."""

    def __init__(self, names):
        self.names, self.values = names, {}

    def __contains__(self, name):
        return name in self.names

    def __getitem__(self, name):
        if name not in self.values:         # each name evaluated once (a tile's sizes read its blocks often)
            v = self.names[name]
            self.values[name] = evaluate(v, self) if isinstance(v, E.Node) else v
        return self.values[name]

    def __iter__(self):
        return iter(self.names)

    def __len__(self):
        return len(self.names)


def evaluate(node, env):
    """A size expression's value, with the schedule's functions (tkgen/runtime/schedule.py) as the factory
    runs them."""
    return E.evaluate(node, env if isinstance(env, _Sizes) else _Sizes(env), _FUNCS)


def _env(module, kernel, sizes):
    """Names of the factory (`N_<axis>`, `B_<axis>`, knobs) over `sizes` (dims and params by name)."""
    env = dict(sizes)
    env.update({n: v for n, v in module.knobs})
    env.update({ir.block_name(a): t.block for a, t in kernel.tiles if t.block is not None})
    env.update({ir.extent_name(a): ax.extent for a, ax in module.axes.items()})
    return env


def _names(node, env, seen=None):
    """The dims and params a size expression depends on, through the factory's names."""
    seen = set() if seen is None else seen
    for n in E.names(node):
        v = env.get(n)
        if isinstance(v, E.Node) and n not in seen:
            seen.add(n)
            yield from _names(v, env, seen)
        elif not ir.is_axis_size(n):
            yield n


def check_tile_bytes(module: kir.Module, catalog, arch) -> kir.Module:
    """`module` with the factory's check of the bound where sizes the spec admits may pass it; a ValueError
    naming the tiles' size where the sizes the spec names pass it (see the module docstring)."""
    bound = getattr(arch, "max_tile_bytes", None)
    if not bound:
        return module
    checks = []
    for kernel in module.kernels:
        total = tiles_bytes(module, kernel, catalog, arch)
        depends = set(_names(total, _env(module, kernel, {})))
        past = _past(module, kernel, total, module.samples.named, bound)
        if past is not None:
            size, sizes = past
            shown = ", ".join(f"{n} = {sizes[n]}" for n in sorted(depends & set(sizes)))
            raise ValueError(f"the tiles of a block take {size} bytes{' at ' + shown if shown else ''}, more than "
                             f"the {arch.name} profile's max_tile_bytes ({bound}); hold fewer elements per block "
                             f"(smaller blocks, `stream:`) or lower the sizes")
        if module.samples.dynamic in depends:
            continue        # the factory knows the static sizes only (tiles over the rows are blocks of them)
        if module.samples.unbounded & depends or \
                _past(module, kernel, total, module.samples.extreme, bound) is not None:
            checks.append((E.Binary("<=", total, E.Num(bound)),
                           f"{module.op}: at these sizes the tiles of a block would take more than {bound} bytes, "
                           f"the {arch.name} profile's max_tile_bytes"))
    return module.replace(checks=module.checks + tuple(checks)) if checks else module


def _past(module, kernel, total, samples, bound):
    """(bytes, sizes) of the first of `samples` at which the tiles take more than `bound`, else None."""
    for sample in samples:
        sizes = dict(sample)
        try:
            size = evaluate(total, _env(module, kernel, sizes))
        except (KeyError, ValueError, ArithmeticError, TypeError):
            continue          # a size the samples do not give
        if size > bound:
            return size, sizes
    return None


@register("check_tile_bytes")
def tile_bytes_pass(module: kir.Module, ctx) -> kir.Module:
    """Where the profile bounds a block's tile bytes (`max_tile_bytes`): an error where the sizes the spec
    names pass it, a factory check where larger sizes it admits may."""
    return check_tile_bytes(module, ctx.catalog, ctx.arch)
