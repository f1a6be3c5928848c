"""The bit geometry of a packet: how codes of a packed element format fill integer words.

It lives in the runtime because generated references and strategies pack and unpack codes in torch at run
time (tkgen/runtime/torch_prims.py); the generator's codecs (tkgen/spec/formats.py: Packing) build the same
pieces as kernel IR. One geometry, two users.
"""
from __future__ import annotations

from dataclasses import dataclass

INT_DTYPES = {"int8": 1, "uint8": 1, "int16": 2, "uint16": 2, "int32": 4, "int64": 8}


@dataclass(frozen=True)
class Packet:
    """How `codes` codes of `width` bits fill `words` integer words of dtype `word` (one packet).

    The packet is read as one (words * word_bits)-bit integer. `lsb_first`: code j sits at bit j * width
    and word k holds bits [k * word_bits, (k + 1) * word_bits). `msb_first`: code 0 holds the top bits,
    and word 0 is the most significant word. Words are stored in native (little-endian) byte order.
    """

    codes: int
    width: int
    words: int
    word: str
    order: str               # lsb_first | msb_first

    @property
    def word_bits(self) -> int:
        return 8 * INT_DTYPES[self.word]

    @property
    def total(self) -> int:
        return self.words * self.word_bits

    def _code_span(self, j):
        off = j * self.width if self.order == "lsb_first" else self.total - (j + 1) * self.width
        return off, off + self.width

    def _word_span(self, k):
        wb = self.word_bits
        lo = k * wb if self.order == "lsb_first" else self.total - (k + 1) * wb
        return lo, lo + wb

    @staticmethod
    def _overlaps(span, others):
        """(index, right shift of that part, bit count, left shift into `span`) for each overlap."""
        lo0, hi0 = span
        out = []
        for idx, (lo1, hi1) in others:
            lo, hi = max(lo0, lo1), min(hi0, hi1)
            if lo < hi:
                out.append((idx, lo - lo1, hi - lo, lo - lo0))
        return out

    def word_pieces(self, k):
        """Storage word k as (code j, right shift of the code, bit count, left shift into the word) pieces."""
        return self._overlaps(self._word_span(k), [(j, self._code_span(j)) for j in range(self.codes)])

    def code_pieces(self, j):
        """Code j as (storage word k, right shift of the word, bit count, left shift into the code) pieces."""
        return self._overlaps(self._code_span(j), [(k, self._word_span(k)) for k in range(self.words)])

    def key(self) -> tuple:
        return (self.codes, self.width, self.words, self.word, self.order)
