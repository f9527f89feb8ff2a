"""Every bound the audit puts on what a wheel or an ELF file can make it allocate, in one place.

A wheel is attacker-controlled data: a few hundred KB of deflate can declare gigabytes.  The
audit never holds a whole member; what it does hold is capped here, so the memory one object
costs is bounded whatever its headers say:

    retained head (HEAD_MAX) + decoded tail (TAIL_MAX) + one inflate piece (PIECE)
    + .dynstr (STRING_TABLE_IN_MEMORY, or one streamed window) + one other table (MAX_TABLE)
    + the decoded symbols

Objects are audited in parallel (one per thread), so the bound holds per object in flight.
Anything over a limit is refused as corrupt or hostile input (exit 2), never truncated.
docs/security.md states the same numbers.
"""

from __future__ import annotations

MiB = 1 << 20

MAX_WHEEL_METADATA = 1 * MiB
"""The ``*.dist-info/WHEEL`` file (the only metadata the audit reads), declared or inflated."""

MAX_JSON_DOCUMENT = 64 * MiB
"""A JSON document the merge writes into a wheel and `assemble sbom` / `assemble size` read back
whole (``sboms/*.cdx.json``, ``assembler.json``), declared or inflated: about 250 bytes per file
it lists."""

# Figures of the largest real objects seen (issue 21's survey of 11 real wheels, and torch itself):
# intel-extension-for-pytorch 2.8.0: .dynstr 40.9 MB (~142,000 dynamic symbols, .dynsym ~3.4 MB);
# torch 2.14.1+cu130 libtorch_cpu.so: .dynstr 5.2 MB, .dynsym 1.8 MB (75,766 symbols);
# libtorch_cuda.so: .dynstr 4.5 MB, .dynsym 0.6 MB. The limits leave a wide margin over them.

STRING_TABLE_IN_MEMORY = 16 * MiB
"""A ``.dynstr`` up to this size is read whole; a larger one is streamed (read forward a
window at a time, keeping only the names of the symbols and DT_NEEDED entries)."""

MAX_STRING_TABLE = 1024 * MiB
"""The dynamic string table (``DT_STRSZ`` / the ``.dynstr`` section): 25x the largest real one
(IPEX's 40.9 MB). Streamed above STRING_TABLE_IN_MEMORY, so this bounds time, not memory."""

MAX_NAME = 1 * MiB
"""One symbol name in a streamed ``.dynstr`` (the longest real mangled names are a few KB)."""

MAX_TABLE = 16 * MiB
"""Any other ELF table read whole: program and section headers, ``.dynamic``, ``.dynsym``
(16 MiB is ~700,000 symbols: 5x IPEX's ~142,000, 9x libtorch_cpu's), hash buckets and chains."""

HEAD_MAX = 64 * MiB
"""The first segment of a deflated member (symbol tables), kept once inflated."""

TAIL_MAX = 64 * MiB
"""The end of a deflated member decoded from a block boundary near it (``.dynamic``, section headers)."""

PIECE = 1 * MiB
"""One inflate step's output: the most a single ``decompress`` call may produce."""

DEFLATE_MAX_RATIO = 1032
"""Deflate cannot expand more than 1032:1 (a 258-byte match in 2 bits): a member declaring more
uncompressed bytes than that allows is corrupt."""

MAX_TORCH_HEADER = 16 * MiB
"""One shim header read from a torch wheel by ``--refresh-torch-table``."""
