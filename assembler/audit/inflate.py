"""The raw-deflate inflater that streams wheel members for `audit` and `size`.

zlib-ng (the ``zlib-ng`` wheel) and ISA-L (``isal``) inflate a member about 1.6-2x as fast as
CPython's zlib here, with the same streaming API (``decompress(data, max_length)``,
``unconsumed_tail``, ``eof``), so the audit's bounded, piecewise reads stay as they are.
zlib-ng comes first: it is zlib's own code made faster (the same answers, call for call), and
unlike ISA-L it costs nothing per decoder (ISA-L is 4x zlib's cost for the 4-byte peeks that
tell ELF members by content, which therefore always use zlib). CPython's zlib is the fallback
that is always there. libdeflate (``deflate``) is faster still on a whole buffer, but only on
a whole buffer: it would hold each member whole in memory, which the audit never does.
``ASSEMBLE_INFLATER=zlib-ng|isal|zlib`` picks one (``benchmarks/inflate.py`` runs each side by
side). The decoder of a tail found from a block boundary (:mod:`assembler.audit.deflate`)
stays on zlib: it needs ``zdict`` semantics the others mirror but this code has only proven
with zlib.
"""

from __future__ import annotations

import os
import zlib
from functools import cache
from types import ModuleType
from typing import Any

CHOICES = ("zlib-ng", "isal", "zlib")


def _module(name: str) -> ModuleType | None:
    try:
        if name == "isal":
            from isal import isal_zlib  # type: ignore[import-not-found, unused-ignore]

            found: ModuleType = isal_zlib  # typed here: the module's own types are not
            return found
        if name == "zlib-ng":
            from zlib_ng import zlib_ng  # type: ignore[import-not-found, unused-ignore]

            found_ng: ModuleType = zlib_ng
            return found_ng
    except ImportError:
        return None
    return zlib


@cache
def backend() -> tuple[str, ModuleType]:
    """(name, module) of the inflater in use: ASSEMBLE_INFLATER's when set and installed, else
    the fastest installed."""
    wanted = os.environ.get("ASSEMBLE_INFLATER", "").strip().lower()
    for name in ((wanted,) if wanted in CHOICES else ()) + CHOICES:
        module = _module(name)
        if module is not None:
            return name, module
    return "zlib", zlib


def decompressobj() -> Any:
    """A raw-deflate (wbits -15) streaming decoder."""
    return backend()[1].decompressobj(-15)


def errors() -> tuple[type[Exception], ...]:
    """What the decoder in use raises on corrupt data."""
    return (zlib.error, backend()[1].error)
