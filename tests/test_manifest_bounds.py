"""A deps.toml shaped to make the parser quadratic (one dotted key of 40,000 parts, a header of
100,000, thousands of nested arrays) is refused before any parser runs, naming its line. The
real CLI runs in a process of its own under CPU and memory limits the test sets: a regression
dies of the limit and the test fails, no clock is read."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

CPU_SECONDS = 20
MEMORY_BYTES = 1 << 30

SHAPES = {
    "dotted key": "[bundle]\n" + "a" + ".b" * 40_000 + " = 1\n",
    "header": "[bundle]\nname = 'x'\n[" + ".".join(["deps"] * 100_000) + "]\n",
    "nested arrays": "[bundle]\nx = " + "[" * 50_000 + "]" * 50_000 + "\n",
    "nested inline tables": "[bundle]\nx = " + "{a = " * 20_000 + "1" + "}" * 20_000 + "\n",
}


def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_CPU, (CPU_SECONDS, CPU_SECONDS))
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_BYTES, MEMORY_BYTES))


@pytest.mark.parametrize("shape", list(SHAPES))
def test_a_pathological_key_is_refused_before_parsing(tmp_path: Path, shape: str) -> None:
    (tmp_path / "deps.toml").write_text(SHAPES[shape])
    result = subprocess.run([sys.executable, "-m", "assembler", "-C", str(tmp_path), "deps"], capture_output=True,
                            text=True,
                            preexec_fn=_limited, env={**os.environ, "ASSEMBLE_CACHE": str(tmp_path / "cache")},
                            timeout=300)
    assert result.returncode == 2, (result.returncode, result.stderr[-2000:])
    line = 3 if shape == "header" else 2
    assert f"deps.toml:{line}:" in result.stderr and "Traceback" not in result.stderr, result.stderr[-2000:]


def test_dots_in_strings_comments_and_numbers_are_not_key_parts(tmp_path: Path) -> None:
    from assembler.manifest.load import MAX_KEY_PARTS, _bound_shape

    many = ".".join("x" * 3 for _ in range(MAX_KEY_PARTS * 2))
    text = (f'name = "{many}"\n# {many}\nlit = \'{many}\'\nmulti = """\n{many}\n"""\n'
            f"floats = [{', '.join(['1.5'] * 500)}]\n")
    _bound_shape(tmp_path / "deps.toml", text)  # no error
