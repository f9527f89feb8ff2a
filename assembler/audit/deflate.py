"""Read the end of a raw deflate stream without inflating everything before it.

A wheel member is one raw deflate stream, and an ELF file keeps what an audit needs at both
ends: the symbol tables in the first percent, the ``.dynamic`` section and the section headers
in the last few.  Inflating a 300 MB CUDA extension to reach its end costs about a second, so
the tail is decoded from a deflate block boundary found near the end instead:

1. Candidate boundaries are found with whole-buffer integer arithmetic (no per-bit Python loop):
   a dynamic-Huffman block header must have a complete code-length code, which a bit-sliced
   Kraft sum checks at every bit position at once; stored blocks are found by their LEN/NLEN
   pair.  Each candidate is then tried with zlib, which rejects false starts within bytes.
2. The stream is decoded from the boundary to its end, so every byte's offset is known from
   the member's uncompressed size; a start that does not end the stream exactly is rejected.
3. The 32 KiB history before the boundary is unknown.  The same bits are decoded twice, with the
   history preset to all 0x00 and to all 0xFF: a byte that comes (through any chain of copies)
   from the history differs between the two, so a byte that agrees is a literal of this stream
   and proven right.  Needed bytes that differ mean: start further back.  Once the two decodes
   agree on a whole 32 KiB window they can no longer diverge, and the second one stops.

Callers still cross-check what they read (the ELF reader matches section headers against the
program headers and ``.dynamic``) and fall back to inflating from the start when anything
does not fit.
"""

from __future__ import annotations

import itertools
import re
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

WINDOW = 32768
_HISTORY_A = bytes(WINDOW)
_HISTORY_B = b"\xff" * WINDOW
_NONZERO = re.compile(rb"[^\x00]")
_SCAN_BYTES = 16384  # bytes of compressed data examined per candidate-mask computation
_SEARCH_BYTES = 1 << 18  # compressed bytes searched for a boundary before backing off
_PROBE_BYTES = 2048  # compressed bytes zlib gets to reject a false start cheaply
_FEED_BYTES = 1 << 18  # compressed bytes fed to the decoders per step


def _dynamic_header_mask(x: int, nbits: int) -> int:
    """Bit k is set when a dynamic-Huffman block header starting at bit k of ``x`` is plausible.

    Checks BTYPE=2, HLIT<=29, HDIST<=29 and that the 4..19 code-length-code lengths form a
    complete prefix code (zlib rejects anything else), evaluated for all k in parallel: every
    header field becomes a shifted copy of ``x`` and the Kraft sum is added bit-sliced.
    """
    m = ~(x >> 1) & (x >> 2)
    m &= ~((x >> 4) & (x >> 5) & (x >> 6) & (x >> 7))
    m &= ~((x >> 9) & (x >> 10) & (x >> 11) & (x >> 12))
    m &= (1 << nbits) - 1
    hclen = [x >> (13 + i) for i in range(4)]
    not_hclen = [~h for h in hclen]
    at_least = [0] * 16  # at_least[t]: HCLEN >= t
    acc = 0
    for t in range(15, -1, -1):
        eq = m
        for i in range(4):
            eq &= hclen[i] if (t >> i) & 1 else not_hclen[i]
        acc |= eq
        at_least[t] = acc
    total = [0] * 8  # Kraft sum in units of 2**-7, bit-sliced; overflow past 255 is sticky
    overflow = 0
    for j in range(19):
        present = m if j < 4 else at_least[j - 3]
        base = 17 + 3 * j
        b0, b1, b2 = (x >> base) & present, (x >> (base + 1)) & present, (x >> (base + 2)) & present
        n0, n1, n2 = present & ~b0, present & ~b1, present & ~b2
        # a code of length L adds 2**(7-L): plane 7-L of the one-hot addend
        addend = (b0 & b1 & b2, n0 & b1 & b2, b0 & n1 & b2, n0 & n1 & b2, b0 & b1 & n2, n0 & b1 & n2, b0 & n1 & n2, 0)
        carry = 0
        for k in range(8):
            a, v = total[k], addend[k]
            t = a ^ v
            total[k] = t ^ carry
            carry = (a & v) | (t & carry)
        overflow |= carry
    result = m & total[7] & ~overflow
    for k in range(7):
        result &= ~total[k]
    return result


def _stored_len_mask(x: int, nbytes: int) -> int:
    """Bit 8*i is set when bytes i..i+3 of ``x`` hold a stored block's LEN and its complement NLEN."""
    z = x ^ (x >> 16)
    z &= z >> 1
    z &= z >> 2
    z &= z >> 4
    z &= z >> 8
    return z & (((1 << (8 * nbytes)) - 1) // 255)


def _set_bits(mask: int, nbytes: int) -> Iterator[int]:
    raw = mask.to_bytes(nbytes + 8, "little")
    for match in _NONZERO.finditer(raw):
        i, byte = match.start(), raw[match.start()]
        for k in range(8):
            if (byte >> k) & 1:
                yield 8 * i + k


def block_candidates(data: bytes, start: int) -> Iterator[int]:
    """Bit offsets at or after byte ``start`` of ``data`` where a deflate block may begin, ascending."""
    for lo in range(start, len(data), _SCAN_BYTES):
        n = min(_SCAN_BYTES, len(data) - lo)
        x = int.from_bytes(data[lo : lo + n + 80], "little")
        found = set(_set_bits(_dynamic_header_mask(x, 8 * n), n))
        for len_bit in _set_bits(_stored_len_mask(x, n), n):
            # The 3 header bits (BFINAL, BTYPE=00) end at most 7 padding bits before LEN.
            for bit in range(max(0, len_bit - 10), len_bit - 2):
                if (x >> (bit + 1)) & 3 == 0:
                    found.add(bit)
        for bit in sorted(found):
            yield 8 * lo + bit


def _shifted(data: bytes, bit: int, end: int | None = None) -> bytes:
    """``data`` from bit offset ``bit`` (to byte ``end``) realigned so that bit becomes bit 0."""
    first, shift = divmod(bit, 8)
    chunk = data[first:end]
    if not shift:
        return chunk
    return (int.from_bytes(chunk, "little") >> shift).to_bytes(len(chunk), "little")


def _probe(data: bytes, bit: int) -> bool:
    """Cheap rejection of a false block start: zlib must accept the first few KiB."""
    decoder = zlib.decompressobj(-15, zdict=_HISTORY_A)
    try:
        decoder.decompress(_shifted(data, bit, bit // 8 + _PROBE_BYTES + 1), 1 << 20)
    except zlib.error:
        return False
    return True


@dataclass(frozen=True)
class Tail:
    """The last ``len(data)`` bytes of a member, proven independent of the unknown history."""

    offset: int  # uncompressed offset of data[0] within the member
    data: bytes


class _FalseStart(Exception):
    """The candidate was not a block boundary after all."""


def _chunks(data: bytes, bit: int) -> Iterator[bytes]:
    """``data`` from bit offset ``bit`` on, realigned to bit 0, in feed-sized chunks (no whole copy)."""
    first, shift = divmod(bit, 8)
    for lo in range(first, len(data), _FEED_BYTES):
        n = min(_FEED_BYTES, len(data) - lo)
        if shift:
            chunk = data[lo : lo + n + 1]  # the next byte supplies this chunk's top bits
            yield (int.from_bytes(chunk, "little") >> shift).to_bytes(len(chunk), "little")[:n]
        else:
            yield data[lo : lo + n]


def _pieces(decoder: zlib._Decompress, chunks: Iterable[bytes]) -> Iterator[bytes]:
    """Decoder output in pieces of at most 1 MiB (highly compressed runs stay bounded)."""
    for chunk in chunks:
        yield decoder.decompress(chunk, 1 << 20)
        while decoder.unconsumed_tail and not decoder.eof:
            yield decoder.decompress(decoder.unconsumed_tail, 1 << 20)
        if decoder.eof:
            return


def _decode_tail(data: bytes, bit: int, size: int, keep: int) -> Tail | None:
    """Decode from block start ``bit`` to the end of the stream; keep the last ``keep`` bytes.

    Raises _FalseStart when ``bit`` is no boundary (zlib error, or the stream does not end
    exactly at the end of ``data``); returns None when the boundary is real but starts too late
    or bytes inside the kept range still depend on the unknown history.
    """
    mine, theirs = itertools.tee(_chunks(data, bit))
    first = zlib.decompressobj(-15, zdict=_HISTORY_A)
    second = zlib.decompressobj(-15, zdict=_HISTORY_B)
    others: Iterator[bytes] | None = _pieces(second, theirs)
    pieces: list[bytes] = []
    kept = produced = 0
    last_diff = -1  # index (in decoded order) of the last byte seen to depend on the history
    try:
        for out in _pieces(first, mine):
            if others is not None:
                other = next(others)
                if other != out:
                    last_diff = produced + _last_difference(out, other)
                elif produced + len(out) - last_diff > WINDOW:
                    others = None  # a whole window agrees: all later output is history-free
            produced += len(out)
            if produced > size:
                raise _FalseStart
            pieces.append(out)
            kept += len(out)
            while kept - len(pieces[0]) >= keep:
                kept -= len(pieces.pop(0))
    except zlib.error as error:
        raise _FalseStart from error
    if not first.eof or len(first.unused_data) + len(first.unconsumed_tail) > 1:
        raise _FalseStart
    if produced < keep:
        return None
    begin = size - produced  # uncompressed offset of the first decoded byte
    if begin + last_diff >= size - keep:
        return None
    pieces[0] = pieces[0][kept - keep :]
    return Tail(offset=size - keep, data=b"".join(pieces))


def _last_difference(a: bytes, b: bytes) -> int:
    """Index of the last byte where equal-length ``a`` and ``b`` differ (they do differ)."""
    lo, hi = 0, len(a)  # invariant: the last difference lies in a[lo:hi]
    while hi - lo > 64:
        mid = (lo + hi) // 2
        if a[mid:hi] != b[mid:hi]:
            lo = mid
        else:
            hi = mid
    return next(i for i in range(hi - 1, lo - 1, -1) if a[i] != b[i])


def read_tail(
    read_compressed: Callable[[int, int], bytes], compressed_size: int, size: int, need_from: int, budget: int
) -> Tail | None:
    """Decode member bytes ``[need_from, size)`` from near the end of its deflate stream.

    ``read_compressed(offset, length)`` returns raw compressed bytes of the member.  The search
    starts a little before where the needed bytes are expected to be compressed and moves back
    (doubling) until a block boundary far enough before them is found; it gives up (None) once
    more than ``budget`` compressed bytes would have to be decoded.
    """
    keep = size - need_from
    ratio = compressed_size / max(size, 1)
    back = min(compressed_size, int(keep * ratio * 0.6) + 4 * WINDOW)
    while back <= budget:
        data = read_compressed(compressed_size - back, back)
        for bit in block_candidates(data, 0):
            if bit >= 8 * _SEARCH_BYTES:
                break  # no usable boundary near here (fixed-Huffman blocks only?): look further back
            if not _probe(data, bit):
                continue
            try:
                tail = _decode_tail(data, bit, size, keep)
            except _FalseStart:
                continue
            if tail is not None:
                return tail
            break  # a real boundary, but too late: look further back
        if back >= compressed_size:
            return None
        back = min(compressed_size, back * 2)
    return None
