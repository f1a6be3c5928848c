"""Schedule arithmetic that generated kernel factories run when they specialize."""

import functools
import itertools

_BYTES = {"float64": 8, "int64": 8, "float32": 4, "int32": 4, "uint32": 4, "bfloat16": 2, "float16": 2, "uint16": 2,
          "int16": 2, "float8_e4m3fn": 1, "float8_e5m2": 1, "uint8": 1, "int8": 1}


def pick_block(extent: int, cap: int, multiple: int = 1, whole_if_fits: int = 0) -> int:
    """The block size of an `auto` axis: a divisor of `extent`, at most `cap`, a multiple of `multiple`;
    with `whole_if_fits`, the whole extent padded to a power of two where that is at most `cap` (an axis
    that blocks would each redo a row's reduction for; the kernel guards the padding).

    Powers of two come first: a tile of 5 groups of 128 left TileLang a thread layout where each thread
    held a whole group and read it alone (9x slower on an H200 than 4 groups). The largest other divisor
    is the fallback, and the whole extent when none fits (a packed axis shorter than a word).
    """
    if whole_if_fits and pad_pow2(extent) <= cap:
        return pad_pow2(extent)       # unpadded, 33 slots left TileLang a mask fragment on 33 of 64 threads
    fits = [b for b in range(multiple, min(extent, max(cap, multiple)) + 1, multiple) if extent % b == 0]
    pow2 = [b for b in fits if b & (b - 1) == 0]
    return max(pow2 or fits or [extent])


def fit_rows(block: int, tile_elems: int, row_elems: int, multiple: int = 1) -> int:
    """Rows per tile: `block` (the knob), fewer where one row's whole axes already fill the tile budget
    (a row of 7168 channels held whole leaves room for one row, not the four a group of 128 takes), but
    a multiple of `multiple` and never below it: where an output packs `multiple` rows into one word
    (UE8M0 scales of four row groups per int32), a block stores whole words, so it must hold their rows."""
    rows = max(1, min(block, tile_elems // max(row_elems, 1)))
    return max(multiple, rows // multiple * multiple)


def fit_threads(threads: int, tile: int, tile_elems: int) -> int:
    """Threads of a block: the knob, except for a tile larger than the budget `tile_elems` (a row held
    whole that is wider than it), which gets threads in proportion (powers of two, at most 1024), so that
    each thread holds what it would in a tile within the budget rather than spill."""
    while threads < 1024 and tile > tile_elems:
        threads, tile_elems = threads * 2, tile_elems * 2
    return threads


def pad_pow2(extent: int) -> int:
    """The next power of two at or above `extent` (tile extent of a padded reduced axis)."""
    return 1 << max(0, (extent - 1).bit_length())


def tree_levels(extent: int) -> int:
    """The levels of a pairwise tree over `extent` elements (its offsets 2^(L-1) .. 1): the bits of
    extent - 1, at least 1 (a static loop of no iterations is not built)."""
    return max(1, (extent - 1).bit_length())


def vector_granule(dtype: str, last: int) -> int:
    """The elements a kernel loads at once from a strided input of `dtype` whose last dim is `last`: 16
    bytes' worth, at most the largest power of two dividing `last` (as in a contiguous tensor of that
    shape). The factories assume (`T.assume`) that every stride of such an input is a multiple of it, and
    the runtime refuses a view whose strides are not (tkgen/runtime/ops.py: strides_aligned)."""
    return min(max(16 // _BYTES[dtype], 1), last & -last) if last else 1


def bank_pad(dtype: str) -> int:
    """Elements that pad a shared-memory row by 16 bytes: rows start in different banks and 16-byte
    vectors stay aligned."""
    return 16 // _BYTES[dtype]


def f32_bits(value: float) -> int:
    """The bits of a float param rounded to float32 (nearest even), for kernels that take it by its bits."""
    import struct
    return struct.unpack("<I", struct.pack("<f", value))[0]


def specialize(factory, *choices):
    """A variant's kernel factory: a factory shared by several variants (tkgen/codegen/merge_variants.py) with the
    params that tell them apart bound; it takes what the variant's own factory would (sizes, params,
    dtypes, and the knobs as keywords)."""
    return functools.partial(factory, *choices)


def specialized(prefix: str, factory, *axes) -> dict:
    """{prefix + variant name: `specialize(factory, ...)`} for every variant of a shared factory, where they
    are the product of its axes, in the order of the variant's name: a str is a fixed part of the name
    (not an argument); a tuple, an argument's choices, each named by its value (booleans in lower case);
    a dict, an argument's choices by their part of the name ("" for none); a list, the choices of several
    adjacent arguments that go together (an optional input and one given with it), each a tuple (part of
    the name, the arguments' values...). The generator writes this in place of a line per variant where it
    binds the same names to the same arguments."""
    table = {}
    choices = [((a, ()),) if isinstance(a, str) else tuple((k, (v,)) for k, v in a.items()) if isinstance(a, dict)
               else tuple((c[0], tuple(c[1:])) for c in a) if isinstance(a, list) else
               tuple((str(c).lower() if isinstance(c, bool) else str(c), (c,)) for c in a) for a in axes]
    for combo in itertools.product(*choices):
        name = "_".join(part for part, _ in combo if part) or "base"
        table[prefix + name] = specialize(factory, *(c for _, values in combo for c in values))
    return table


def variant_names(*axes) -> tuple:
    """Every variant's name, in the order of spec.variants(): the product of the axes (a structural
    param's values; ("", "with_<name>") for an optional input or param), the non-empty parts joined by "_".
    A generated module writes its variants' names as their axes (the generator checks they agree)."""
    return tuple("_".join(part for part in combo if part) or "base" for combo in itertools.product(*axes))
