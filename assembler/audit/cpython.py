"""CPython limited API use of one shared object, checked against the wheel's abi3 tag.

Data: abi3info (the limited API and stable ABI as CPython's ``Misc/stable_abi.toml`` lists
them, with the version that added each symbol).  Rules as in abi3audit: every non-local
dynamic symbol named ``Py*`` / ``_Py*`` other than a module entry point must be in the limited
API; the newest one used is the minimum Python.  (abi3audit also reads ``.symtab``; for a
linked shared object its non-local symbols are the ``.dynsym`` ones, since hidden symbols are
made local by the linker.)
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from assembler.audit.elf import DynSymbol

PyVersion = tuple[int, int]
ENTRY_POINTS = ("PyInit_", "PyInitU_", "PyModExport_", "PyModExportU_")


@dataclass(frozen=True)
class CPythonFindings:
    violations: tuple[str, ...]  # non-limited CPython symbols
    min_python: str | None
    min_python_symbols: tuple[str, ...]
    newer_than_tag: dict[str, str]  # limited-API symbols added after the wheel's abi3 floor


@cache
def limited_api() -> dict[str, PyVersion]:
    """Every limited-API function and data symbol, with the Python version that added it."""
    import abi3info

    table = {}
    for item in (*abi3info.FUNCTIONS.values(), *abi3info.DATAS.values()):
        table[item.symbol.name] = (item.added.major, item.added.minor)
    return table


@cache
def describe_source() -> str:
    """Names abi3info and its version (read from its dist-info: importlib.metadata costs 50 ms)."""
    import abi3info

    site = Path(abi3info.__file__).resolve().parent.parent
    found = sorted(site.glob("abi3info-*.dist-info"))
    version = found[-1].name.removesuffix(".dist-info").split("-", 1)[1] if found else "(version unknown)"
    return f"abi3info {version} (CPython Misc/stable_abi.toml)"


def is_entry_point(name: str) -> bool:
    return name.startswith(ENTRY_POINTS)


def format_py(v: PyVersion) -> str:
    return f"{v[0]}.{v[1]}"


def classify_cpython(symbols: Iterable[DynSymbol], floor: PyVersion | None) -> CPythonFindings:
    """Limited-API findings for one object; ``floor`` is the wheel's abi3 version (cp38-abi3 -> 3.8)."""
    table = limited_api()
    violations: set[str] = set()
    used: dict[str, PyVersion] = {}
    for sym in symbols:
        if sym.local or not sym.name.startswith(("Py", "_Py")) or is_entry_point(sym.name):
            continue
        added = table.get(sym.name)
        if added is None:
            violations.add(sym.name)
        else:
            used[sym.name] = added
    best = max(used.values(), default=None)
    return CPythonFindings(
        violations=tuple(sorted(violations)),
        min_python=format_py(best) if best else None,
        min_python_symbols=tuple(sorted(n for n, v in used.items() if v == best)),
        newer_than_tag={n: format_py(v) for n, v in sorted(used.items()) if floor is not None and v > floor},
    )
