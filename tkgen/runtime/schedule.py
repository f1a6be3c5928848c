"""Schedule arithmetic that generated kernel factories run when they specialize."""


def pick_block(extent: int, cap: int, multiple: int = 1) -> int:
    """The largest block size that divides `extent`, is at most `cap` and a multiple of `multiple`.

    Falls back to the whole extent when no such divisor exists (a packed axis shorter than a word).
    """
    best = None
    for b in range(multiple, min(extent, max(cap, multiple)) + 1, multiple):
        if extent % b == 0:
            best = b
    return best if best is not None else extent


def pad_pow2(extent: int) -> int:
    """The next power of two at or above `extent` (tile extent of a padded reduced axis)."""
    return 1 << max(0, (extent - 1).bit_length())
