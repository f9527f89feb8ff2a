"""Shared scans (check.share) give every unit the verdict and findings its own scan gives: the
example, then a generated 200-unit tree (C++ and CUDA) with every verdict and the lexer's
hard cases, each checked both ways (``--every-unit`` is the full path)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from assembler.check.share import skeleton
from tests.build_support import HERMETIC_CUDA, assemble

pytestmark = pytest.mark.integration

INSTANCE = '// generated {n}\n\n#include "launch.h"\n\n#ifndef DISABLE_{n}\ntemplate void run<{n}>();\n#endif\n'
HEADERS = {
    "launch.h": "#pragma once\n#include <torch/headeronly/core/ScalarType.h>\ntemplate <int N> void run() {}\n",
    "compat.h": "#pragma once\n#include <torch/extension.h>\n",
    "base.h": "#pragma once\n#if __BASE_FILE__\n#endif\n",
    "boom.h": "#pragma once\n#error boom in a header\n",
    "poison.h": "#pragma once\n#pragma GCC poison forbidden\n",
    "kernel.cuh": "#pragma once\n#include <torch/headeronly/macros/Macros.h>\n__global__ void k() {}\n",
}
# Units scanned on their own, or grouped where the lexer proves it safe.
SPECIAL = {
    "raw.cpp": '#include "launch.h"\nconst char* s = R"(\n#include "nope.h"\n)";\n',
    "unterminated.cpp": '#include "launch.h"\n/* never closed\n',
    "computed.cpp": '#define NAME "launch.h"\n#include NAME\n',
    "line.cpp": '#line 10 "elsewhere.cpp"\n#include "launch.h"\n',
    "separator.cpp": '#include "launch.h"\nint x = 1\'000\'000;\n',
    "trigraph.cpp": '#include "launch.h"\n// ??/\n#include "missing/one.h"\n',
    "after_comment.cpp": '#include "launch.h"\n/* a\n*/ #include "missing/two.h"\n',
    "base_a.cpp": '#include "base.h"\n',
    "base_b.cpp": '#include "base.h"\n',
    "self.cpp": '#include "self.cpp"\n',
    "error_main.cpp": '#include "launch.h"\n#error main says no\n',
    "boom_a.cpp": '#include "boom.h"\nint a;\n',
    "boom_b.cpp": '#include "boom.h"\nint b;\n',
    "poison_a.cpp": '#include "poison.h"\nint fine;\n',
    "poison_b.cpp": '#include "poison.h"\nint forbidden;\n',
    "file_if.cpp": '#define WHERE __FILE__\n#if WHERE\n#endif\n',
    "spliced.cpp": '#include \\\n"launch.h"\n',
    "comment_dir.cpp": '/* c */ #include "launch.h"\n',
    "string_hash.cpp": '#include "launch.h"\nconst char* t = "\\\n#include \\"missing/three.h\\"";\n',
}


def _tree(csrc: Path, cuda: Path) -> int:
    """200 units: instantiations, torch's unstable header, a missing header, pybind11, Python.h
    without the limited API, units with their own include order, the special cases."""
    gen = csrc / "gen"
    gen.mkdir()
    for name, text in HEADERS.items():
        (gen / name).write_text(text)
    count = 0
    for n in range(100):
        (gen / f"inst_{n}.cpp").write_text(INSTANCE.format(n=n) + f"int value_{n} = {n};\n")
    count += 100
    for n in range(20):
        (gen / f"unstable_{n}.cpp").write_text(f'#include "launch.h"\n#include "compat.h"\nint u{n};\n')
        (gen / f"missing_{n}.cpp").write_text(f'#include "launch.h"\n#include "generated/config_{n % 3}.h"\n')
    count += 40
    for n in range(5):
        (gen / f"pybind_{n}.cpp").write_text("#include <pybind11/pybind11.h>\n")
        (gen / f"python_{n}.cpp").write_text(f"#undef Py_LIMITED_API\n#include <Python.h>\nint p{n};\n")
        (gen / f"order_{n}.cpp").write_text("\n" * n + '#include "launch.h"\n')
    count += 15
    for name, text in SPECIAL.items():
        (gen / name).write_text(text)
    count += len(SPECIAL)
    for n in range(200 - count - 1):  # the rest CUDA: host and device passes
        (cuda / f"gen_{n}.cu").write_text(f'#include "kernel.cuh"\n#ifdef SLOW_{n}\n#endif\nint c{n};\n')
    (cuda / "kernel.cuh").write_text(HEADERS["kernel.cuh"])
    (cuda / "gen_unstable.cu").write_text('#include "kernel.cuh"\n#include <torch/extension.h>\n')
    return 200


def _check(ws: Path, cache: Path, *args: str) -> dict:
    result = assemble("-C", str(ws), "check", "--cuda", HERMETIC_CUDA, "--json", *args, cache=cache)
    assert result.stdout, result.stderr[-3000:]
    document = json.loads(result.stdout)
    document["deps"] = {entry["name"]: entry for entry in document["deps"]}
    return document


def _findings(report: dict) -> dict[str, dict]:
    """Every unit's verdict and findings, without what says how the scan ran."""
    return {f"{dep}:{unit['source']}": {k: v for k, v in unit.items() if k not in ("seconds", "scanned_as")}
            for dep, entry in report["deps"].items() for unit in entry["units"]}


def test_example_shared_and_full_agree(example_ws: Path, private_cache: Path) -> None:
    shared = _check(example_ws, private_cache)
    full = _check(example_ws, private_cache, "--every-unit")
    assert not any(entry["cached"] for entry in full["deps"].values())  # the other path is another key
    assert _findings(shared) == _findings(full) and len(_findings(full)) >= 2


def test_generated_tree_shared_and_full_agree(example_ws: Path, private_cache: Path) -> None:
    _check(example_ws, private_cache, "vecadd", "scalekit")  # creates the forks
    forks = example_ws / "forks"
    total = _tree(forks / "vecadd" / "csrc", forks / "scalekit" / "csrc")
    manifest = example_ws / "deps.toml"
    manifest.write_text(manifest.read_text()
                        .replace('sources = ["csrc/add_scaled.cpp"]',
                                 'sources = ["csrc/add_scaled.cpp", "csrc/gen/*.cpp"]')
                        .replace('sources = ["csrc/scale.cu"]', 'sources = ["csrc/scale.cu", "csrc/gen_*.cu"]'))

    shared = _check(example_ws, private_cache, "vecadd", "scalekit", "--preprocess-only")
    full = _check(example_ws, private_cache, "vecadd", "scalekit", "--preprocess-only", "--every-unit")
    assert len(_findings(full)) == total + 2
    assert _findings(shared) == _findings(full)
    verdicts = {unit["verdict"] for unit in _findings(full).values()}
    assert verdicts == {"CLEAN", "UNSTABLE", "INCOMPLETE", "NOT-LIMITED"}

    units = {f"{dep}:{u['source']}": u for dep, entry in shared["deps"].items() for u in entry["units"]}
    borrowed = {name for name, unit in units.items() if unit["scanned_as"] is not None}
    assert all(unit["scanned_as"] is None for unit in full["deps"]["vecadd"]["units"])
    assert len(borrowed) > 150  # the instantiations share a scan: that is the speed
    assert {f"vecadd:csrc/gen/inst_{n}.cpp" for n in range(1, 100)} <= borrowed
    assert units["vecadd:csrc/gen/inst_7.cpp"]["passes"] == ["c++"]
    assert units["scalekit:csrc/gen_3.cu"]["passes"][0] == "host"
    for name in ("raw", "unterminated", "computed", "line", "trigraph", "after_comment", "base_b", "self",
                 "poison_b", "file_if"):
        assert f"vecadd:csrc/gen/{name}.cpp" not in borrowed, name  # scanned on their own
    assert "vecadd:csrc/gen/boom_b.cpp" in borrowed and units["vecadd:csrc/gen/boom_b.cpp"]["verdict"] == "INCOMPLETE"
    # the unit's own path and line stand in the findings it borrowed
    unstable = units["vecadd:csrc/gen/unstable_4.cpp"]
    assert unstable["scanned_as"] is not None and unstable["unstable"][0]["chain"] == ["csrc/gen/unstable_4.cpp:2",
                                                                                       "csrc/gen/compat.h:2"]


@pytest.mark.parametrize(("text", "shared"), [
    (INSTANCE.format(n=1), True), ("#if 1\n#include <a.h>\n#endif\n", True), ("int x = 0x1'2;\n#include <a.h>\n", True),
    ('auto s = R"(x)";\n', False), ("/* open\n", False), ("#include A\n", False), ("#line 3\n", False),
    ("%:include <a.h>\n", False),
    ("int a = __LINE__;\nint b = __FILE__;\n", False), ("#embed <x>\n", False), ("#define X \\ \nint y;\n", False),
])
def test_skeleton_gives_up_where_the_lexer_could_misread(tmp_path: Path, text: str, shared: bool) -> None:
    unit = tmp_path / "u.cpp"
    unit.write_text(text)
    assert (skeleton(unit) is not None) is shared


def test_skeleton_leaves_out_text_only_ifdef_blocks(tmp_path: Path) -> None:
    one, two = tmp_path / "a.cpp", tmp_path / "b.cpp"
    one.write_text(INSTANCE.format(n=1))
    two.write_text(INSTANCE.format(n=2))
    assert skeleton(one) == skeleton(two) == ((3, '#include "launch.h"'),)
    two.write_text(INSTANCE.format(n=2).replace("template", '#include "more.h"\ntemplate'))
    assert skeleton(two) != skeleton(one)


def test_gcc_scan_ignores_the_text(tmp_path: Path) -> None:
    """The premise: under -M a macro in the text is not expanded (its _Pragma error never fires)."""
    unit = tmp_path / "a.cpp"
    unit.write_text('#define X _Pragma("GCC error \\"boom\\"")\nX\n')
    result = subprocess.run(["g++", "-E", "-M", "-MG", str(unit)], capture_output=True, text=True, check=False)
    assert result.returncode == 0 and "boom" not in result.stderr
