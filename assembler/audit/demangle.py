"""C++ names for mangled symbols, where a person reads them (findings, verify's diagnosis).

A module of its own, below ``gate`` and ``classify``, so that both can name symbols readably."""

from __future__ import annotations

from functools import cache
from types import ModuleType


@cache
def _demangler() -> ModuleType:
    """cxxfilt, imported only once a symbol needs demangling (most wheels never do)."""
    import cxxfilt

    module: ModuleType = cxxfilt
    return module


def demangle(name: str) -> str:
    """C++ name for a mangled symbol; the symbol itself when it is not one (or cannot be demangled)."""
    if not name.startswith("_Z"):
        return name
    try:
        return str(_demangler().demangle(name))
    except _demangler().Error:
        return name
