"""What upstream declares it needs: the torch and CUDA floors in its build files. After a
rebase, a floor that moved is a warning naming the file and the line (a kernel library that
raises its torch floor past the bundle's torch-target no longer builds against it)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from assembler.git.history import files_at
from assembler.git.process import GitView

# Top-level build files and, per file, the patterns that declare a floor: (kind, regex with
# the version as group 1). Simple on purpose: they find the usual declarations, not every one.
_TORCH_REQ = re.compile(r"""["']torch\s*(?:>=|~=|==|>)\s*([0-9]+(?:\.[0-9]+)+)""")
_CUDA_CHECK = re.compile(r"""(?i)cuda.*?(?:VERSION_LESS|VERSION_GREATER_EQUAL|<|>=)\s*(?:Version\s*\(\s*)?"""
                         r"""["']?([0-9]+\.[0-9]+(?:\.[0-9]+)?)""")
PATTERNS: dict[str, list[tuple[str, re.Pattern[str]]]] = {
    "setup.py": [("torch", _TORCH_REQ), ("CUDA", _CUDA_CHECK)],
    "pyproject.toml": [("torch", _TORCH_REQ)],
    "CMakeLists.txt": [
        ("torch", re.compile(r"(?i)find_package\s*\(\s*Torch\s+([0-9]+(?:\.[0-9]+)+)")),
        ("CUDA", re.compile(r"(?i)find_package\s*\(\s*CUDAToolkit\s+([0-9]+(?:\.[0-9]+)+)")),
        ("CUDA", _CUDA_CHECK),
    ],
}


@dataclass(frozen=True)
class Floor:
    kind: str  # "torch" or "CUDA"
    version: str
    file: str
    line: int
    text: str

    def key(self) -> tuple[int, ...]:
        return tuple(int(part) for part in self.version.split("."))


def declared(view: GitView, commit: str) -> dict[str, Floor]:
    """The highest torch and CUDA floor each kind declares in ``commit``'s build files."""
    floors: dict[str, Floor] = {}
    for name, text in files_at(view, commit, list(PATTERNS)).items():
        for number, line in enumerate(text.splitlines(), start=1):
            if line.lstrip().startswith("#"):
                continue
            for kind, pattern in PATTERNS[name]:
                match = pattern.search(line)
                if match:
                    floor = Floor(kind, match.group(1), name, number, line.strip())
                    if kind not in floors or floor.key() > floors[kind].key():
                        floors[kind] = floor
    return floors


def floor_warnings(view: GitView, old: str, new: str, torch_target: str | None) -> list[str]:
    """One line per floor that changed between ``old`` and ``new`` (upstream commits)."""
    before, after = declared(view, old), declared(view, new)
    warnings = []
    for kind, floor in after.items():
        was = before.get(kind)
        if was is not None and was.version == floor.version:
            continue
        previously = f"was {was.version} in {was.file}:{was.line}" if was else "not declared before"
        line = f"upstream's {kind} floor is now {floor.version} ({floor.file}:{floor.line}: {floor.text}; {previously})"
        if (kind == "torch" and torch_target
                and floor.key() > tuple(int(p) for p in torch_target.split(".") if p.isdigit())):
            line += f"; deps.toml's torch-target is {torch_target}"
        warnings.append(line)
    return warnings
