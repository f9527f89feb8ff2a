"""The gate sees the whole wheel (issue 28): a library shipped in the same wheel and found through
RUNPATH/RPATH ``$ORIGIN``, as the loader finds it, is part of the load scope; and a torch symbol
the named torch exports from no library is UNRESOLVED, naming where it was expected. Objects are
built here with the real g++: one shared library plus one extension that needs it."""

from __future__ import annotations

import subprocess
import sysconfig
from pathlib import Path

import pytest

from assembler.audit import audit_paths
from assembler.audit.gate import NOT_EXPORTED, NOWHERE, CheckKind, Verdict, findings
from tests.audit_fixtures.build import make_wheel

HELPER = 'extern "C" int helper_fn(int x) { return x + 1; }\n'
EXTENSION = """\
#include <Python.h>
extern "C" int helper_fn(int x);
{extra_decl}
extern "C" int launch(int x) {{ return helper_fn(x){extra_call}; }}
static struct PyModuleDef module = {{PyModuleDef_HEAD_INIT, "ops", nullptr, -1, nullptr}};
PyMODINIT_FUNC PyInit_ops(void) {{ return PyModule_Create(&module); }}
"""


def _build(out: Path, runpath: str, *, missing: bool = False, rpath_tag: bool = False) -> tuple[Path, Path]:
    """libhelper.so (soname libhelper.so) and ops.abi3.so needing it with ``runpath``."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "helper.cpp").write_text(HELPER)
    extra_decl = 'extern "C" int never_defined_fn(int x);' if missing else ""
    (out / "ops.cpp").write_text(EXTENSION.format(extra_decl=extra_decl,
                                                  extra_call=" + never_defined_fn(x)" if missing else ""))
    helper, ops = out / "libhelper.so", out / "ops.abi3.so"
    subprocess.run(["g++", "-shared", "-fPIC", "-Wl,-soname,libhelper.so", str(out / "helper.cpp"), "-o", str(helper)],
                   check=True, capture_output=True)
    tag = "-Wl,--disable-new-dtags" if rpath_tag else "-Wl,--enable-new-dtags"
    subprocess.run(["g++", "-shared", "-fPIC", "-DPy_LIMITED_API=0x03090000", f"-I{sysconfig.get_paths()['include']}",
                    str(out / "ops.cpp"), "-o", str(ops), f"-L{out}", "-Wl,--no-as-needed", "-lhelper", tag,
                    f"-Wl,-rpath,{runpath}"],
                   check=True, capture_output=True)
    return helper, ops


def _object(report_path: Path, name: str):  # type: ignore[no-untyped-def]
    report = audit_paths([report_path])[0]
    return report, next(e for e in report.extensions if e.path == name)


@pytest.mark.parametrize("rpath_tag", [False, True], ids=["RUNPATH", "RPATH"])
def test_a_library_shipped_beside_the_extension_is_in_its_load_scope(tmp_path: Path, rpath_tag: bool) -> None:
    helper, ops = _build(tmp_path / "objs", "$ORIGIN/../pkg.libs", rpath_tag=rpath_tag)
    wheel = make_wheel(tmp_path / "pkg-1.0-cp39-abi3-linux_x86_64.whl",
                       {"pkg/ops.abi3.so": ops, "pkg.libs/libhelper.so": helper})
    report, ext = _object(wheel, "pkg/ops.abi3.so")
    assert ext.unjudged_imports is None and ext.unresolved == {}, (ext.unjudged_imports, ext.unresolved)
    assert not [f for f in findings(report, CheckKind.ALL) if f.verdict == Verdict.UNRESOLVED]


@pytest.mark.integration
def test_a_symbol_the_shipped_library_lacks_is_unresolved(tmp_path: Path) -> None:
    """Claimed missing only with every library of the tree known whole: torch's from a real torch/lib."""
    from assembler.toolchain.torchenv import ensure_build_env

    helper, ops = _build(tmp_path / "objs", "$ORIGIN", missing=True)
    wheel = make_wheel(tmp_path / "pkg-1.0-cp39-abi3-linux_x86_64.whl",
                       {"pkg/ops.abi3.so": ops, "pkg/libhelper.so": helper})
    report = audit_paths([wheel], torch_lib=ensure_build_env("2.13.0").torch_dir / "lib")[0]
    ext = next(e for e in report.extensions if e.path == "pkg/ops.abi3.so")
    assert ext.unresolved == {"never_defined_fn": NOWHERE}, (ext.unresolved, ext.unjudged_imports)
    _, shim_only = _object(wheel, "pkg/ops.abi3.so")  # torch's tables with shim symbols only: nothing claimed
    assert shim_only.unresolved == {} and shim_only.unjudged_imports is not None


def test_a_runpath_that_misses_the_shipped_library_leaves_it_unjudged(tmp_path: Path) -> None:
    """The loader would not find it there, so neither does the audit: nothing is claimed."""
    helper, ops = _build(tmp_path / "objs", "$ORIGIN/elsewhere")
    wheel = make_wheel(tmp_path / "pkg-1.0-cp39-abi3-linux_x86_64.whl",
                       {"pkg/ops.abi3.so": ops, "pkg/libhelper.so": helper})
    _, ext = _object(wheel, "pkg/ops.abi3.so")
    assert ext.unjudged_imports is not None and "libhelper.so is not on this machine" in ext.unjudged_imports


def test_a_directory_is_read_as_the_loader_would(tmp_path: Path) -> None:
    helper, ops = _build(tmp_path / "objs", "$ORIGIN/../lib")
    tree = tmp_path / "tree"
    (tree / "pkg").mkdir(parents=True)
    (tree / "lib").mkdir()
    (tree / "pkg" / "ops.abi3.so").write_bytes(ops.read_bytes())
    (tree / "lib" / "libhelper.so").write_bytes(helper.read_bytes())
    _, ext = _object(tree, "pkg/ops.abi3.so")
    assert ext.unjudged_imports is None and ext.unresolved == {}


@pytest.mark.integration
def test_a_torch_symbol_the_named_torch_does_not_export_is_unresolved(tmp_path: Path) -> None:
    """As torchrl's ``_torchrl`` on torch 2.13.0 (``torch::autograd::_wrap_outputs``): the object
    links libtorch_cpu.so, which is there, but no library of that torch exports the symbol."""
    from assembler.toolchain.torchenv import ensure_build_env

    torch_lib = ensure_build_env("2.13.0").torch_dir / "lib"
    (tmp_path / "gone.cpp").write_text(
        "namespace torch { namespace autograd { int removed_in_this_release(int); } }\n"
        'extern "C" int launch(int x) { return torch::autograd::removed_in_this_release(x); }\n')
    gone = tmp_path / "gone.so"
    subprocess.run(["g++", "-shared", "-fPIC", str(tmp_path / "gone.cpp"), "-o", str(gone), f"-L{torch_lib}",
                    "-Wl,--no-as-needed", "-ltorch_cpu"], check=True, capture_output=True)
    report = audit_paths([gone], torch_lib=torch_lib)[0]
    (ext,) = report.extensions
    symbol = "_ZN5torch8autograd23removed_in_this_releaseEi"
    assert ext.unresolved.get(symbol, "").startswith(NOT_EXPORTED + "2.13.0"), ext.unresolved
    assert "libtorch_cpu.so" in ext.unresolved[symbol]
    lines = [f.line for f in findings(report, CheckKind.TORCH) if f.verdict == Verdict.UNRESOLVED]
    assert lines and "does not export" in lines[0] and "removed_in_this_release" in lines[0], lines
    # without a real torch/lib (shim tables only) nothing is claimed about a C++ name
    assert symbol not in audit_paths([gone])[0].extensions[0].unresolved
