"""migration/setup_py.py: a setuptools dependency's setup.py asks for abi3 (issue 27: FlashKDA's
person added py_limited_api by hand). Every case is a setup.py of ours, written the old way; the
edited text is built for real by setuptools in the migrate end-to-end tests."""

from __future__ import annotations

import ast
import json
import subprocess
import textwrap
from pathlib import Path

import pytest

from assembler.migration.setup_py import extensions, limit_setup_py
from tests.build_support import assemble, example_copy

OLD_WAY = textwrap.dedent('''\
    import os
    from setuptools import setup
    from torch.utils.cpp_extension import BuildExtension, CUDAExtension

    def extensions():
        return [
            CUDAExtension(
                name="mykernels_C",
                sources=["csrc/api.cpp", "csrc/kernel.cu"],
                extra_compile_args={"cxx": ["-O3"], "nvcc": ["-O3"]},
            )
        ]

    setup(
        name="mykernels",
        ext_modules=extensions(),
        cmdclass={"build_ext": BuildExtension},
    )
    ''')


def _keywords(text: str, name: str) -> list[dict[str, str]]:
    calls = [n for n in ast.walk(ast.parse(text)) if isinstance(n, ast.Call)
             and getattr(n.func, "id", getattr(n.func, "attr", None)) == name]
    return [{k.arg or "**": ast.unparse(k.value) for k in call.keywords} for call in calls]


def test_each_extension_and_setup_ask_for_abi3_in_their_own_layout() -> None:
    edit = limit_setup_py(OLD_WAY, "3.9")
    assert edit.text is not None and edit.extensions == [7] and edit.setup_line == 14 and not edit.declined
    [extension] = _keywords(edit.text, "CUDAExtension")
    [setup] = _keywords(edit.text, "setup")
    assert extension["py_limited_api"] == "True"
    assert ast.literal_eval(setup["options"]) == {"bdist_wheel": {"py_limited_api": "cp39"}}
    # every line it had is still there, in order; the new ones sit at the arguments' indentation
    added = [line for line in edit.text.splitlines() if line not in OLD_WAY.splitlines()]
    assert added == ["            py_limited_api=True,", '    options={"bdist_wheel": {"py_limited_api": "cp39"}},']


def test_one_line_calls_and_the_bundles_python_abi() -> None:
    text = ('from setuptools import setup\nfrom torch.utils import cpp_extension as ce\n'
            'setup(name="k", ext_modules=[ce.CppExtension("k._C", ["a.cpp"])])\n')
    edit = limit_setup_py(text, "3.10")
    assert edit.text == ('from setuptools import setup\nfrom torch.utils import cpp_extension as ce\n'
                         'setup(name="k", ext_modules=[ce.CppExtension("k._C", ["a.cpp"], py_limited_api=True)], '
                         'options={"bdist_wheel": {"py_limited_api": "cp310"}})\n')


def test_a_second_run_changes_nothing() -> None:
    once = limit_setup_py(OLD_WAY, "3.9").text
    assert once is not None
    again = limit_setup_py(once, "3.9")
    assert again.text is None and not again.declined


def test_what_cannot_be_edited_safely_is_declined_at_its_line() -> None:
    text = textwrap.dedent('''\
        from setuptools import setup, Extension
        common = {"py_limited_api": False}
        setup(
            name="k",
            ext_modules=[Extension("k._C", ["a.cpp"], **common)],
            options={"build_ext": {"parallel": 2}},
        )
        ''')
    edit = limit_setup_py(text, "3.9")
    assert edit.text is None
    assert [line for line, _ in edit.declined] == [3, 5]
    assert all("by hand" in reason for _, reason in edit.declined)


def test_each_extension_is_compiled_with_the_torch_target_version_unless_it_names_it() -> None:
    """QuTLASS's migration added TORCH_TARGET_VERSION to its setup.py by hand: upstream's own
    build then compiles against the same torch floor as assemble's. A define_macros list gets
    the entry, a call without one gets the keyword, one that names the macro already (in its
    flags) is left, and define_macros that are not a list literal are declined at their line."""
    text = textwrap.dedent("""\
        from setuptools import setup
        from torch.utils.cpp_extension import CUDAExtension
        setup(name="q", ext_modules=[
            CUDAExtension(
                name="q._C",
                sources=["a.cu"],
                define_macros=[("TARGET_CUDA_ARCH", str(cc))],
            ),
            CUDAExtension("q._D", ["b.cu"]),
            CUDAExtension("q._E", ["b.cu"], define_macros=[]),
            CUDAExtension("q._F", ["b.cu"], define_macros=MACROS),
            CUDAExtension("q._G", ["b.cu"], extra_compile_args=["-DTORCH_TARGET_VERSION=0x020B000000000000"]),
        ])
        """)
    edit = limit_setup_py(text, "3.9", "2.11")
    assert edit.text is not None and edit.targeted == [4, 9, 10]
    entry = '("TORCH_TARGET_VERSION", "0x020B000000000000")'
    assert f'define_macros=[("TARGET_CUDA_ARCH", str(cc)), {entry}],' in edit.text
    assert f'CUDAExtension("q._D", ["b.cu"], define_macros=[{entry}], py_limited_api=True),' in edit.text
    assert f'CUDAExtension("q._E", ["b.cu"], define_macros=[{entry}], py_limited_api=True),' in edit.text
    assert edit.text.count("TORCH_TARGET_VERSION") == 4  # three added, _G's own
    assert edit.declined == [(11, f"CUDAExtension(...) sets its define_macros otherwise: add {entry} to them by "
                                  "hand (the build's torch floor)")]
    again = limit_setup_py(edit.text, "3.9", "2.11")
    assert again.text is None and again.targeted == []
    assert limit_setup_py(text, "3.9").targeted == []  # without a target, as before


def test_text_that_is_not_python_is_declined_not_raised() -> None:
    edit = limit_setup_py("setup(\n", "3.9")
    assert edit.text is None and edit.declined and edit.declined[0][1].startswith("setup.py does not parse")


def test_non_ascii_before_the_call_keeps_its_offsets() -> None:
    text = 'from setuptools import setup\nsetup(name="k", description="naïve — ünïcode")\n'
    edit = limit_setup_py(text, "3.9")
    assert edit.text == ('from setuptools import setup\nsetup(name="k", description="naïve — ünïcode", '
                         'options={"bdist_wheel": {"py_limited_api": "cp39"}})\n')


def test_extension_names_and_sources_are_read_only_when_literal() -> None:
    text = textwrap.dedent('''\
        from torch.utils.cpp_extension import CppExtension, CUDAExtension
        SRC = ["b.cpp"]
        exts = [CUDAExtension(name="a._C", sources=["csrc/a.cpp", "csrc/k.cu"]),
                CppExtension("b._C", SRC),
                CppExtension("c._C", ["c.cpp"])]
        ''')
    assert extensions(text) == [("a._C", ["csrc/a.cpp", "csrc/k.cu"]), ("b._C", None), ("c._C", ["c.cpp"])]
    assert extensions('CppExtension(NAME, ["a.cpp"])\n') == [(None, ["a.cpp"])]  # a name that is not literal
    assert extensions("def broken(:\n") == []


SETUP_OF_ATTNKIT = textwrap.dedent('''\
    from setuptools import setup
    from torch.utils.cpp_extension import BuildExtension, CppExtension

    setup(
        name="attnkit",
        ext_modules=[CppExtension(name="attnkit._attnkit_C", sources=[{sources}])],
        cmdclass={{"build_ext": BuildExtension}},
    )
    ''')


# a pybind11 module too (QuTLASS's shape): one op the library defines already, one it does not
PYBIND11_OF_ATTNKIT = """
#include <torch/extension.h>

namespace attnkit {
at::Tensor same(const at::Tensor& x) { return x; }
}  // namespace attnkit

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("attention", &attnkit::attention, "attention");
  m.def("same", &attnkit::same, "same");
}
"""


@pytest.mark.integration
def test_a_setup_py_assemble_does_not_build_asks_for_abi3_when_it_compiles_only_migrated_units(
        tmp_path: Path, private_cache: Path) -> None:
    """attnkit is built by the helper from its recipe's list; the setup.py upstream ships with
    (QuTLASS's shape) gets the limited-api commit when its extension compiles only the recipe's
    units, and none when it also compiles a file the migration does not cover. Either way a
    pybind11 module that setup.py compiles keeps a PyInit for that build (QuTLASS's qutlass._CUDA
    was no longer importable), under the name setup.py gives it: TORCH_EXTENSION_NAME is only
    defined by torch's BuildExtension, and the PyInit is compiled (proven) in assemble's build too."""
    ws = example_copy(tmp_path / "ws") / "migrate"
    assert assemble("-C", str(ws), "checkout", "attnkit", cache=private_cache).returncode == 0
    fork = ws / "forks" / "attnkit"
    with (fork / "csrc" / "attnkit.cpp").open("a") as source:
        source.write(PYBIND11_OF_ATTNKIT)

    def commit_setup_py(sources: str) -> None:
        (fork / "setup.py").write_text(SETUP_OF_ATTNKIT.format(sources=sources))
        subprocess.run(["git", "add", "setup.py", "csrc"], cwd=fork, check=True)
        subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "setup.py"], cwd=fork,
                       check=True)

    commit_setup_py('"csrc/attnkit.cpp", "csrc/legacy.cpp"')  # compiles more than the recipe: a dry run
    uncovered = assemble("-C", str(ws), "migrate", "attnkit", "--dry-run", "--no-check", cache=private_cache)
    assert uncovered.returncode == 0, uncovered.stderr[-3000:]
    assert "limited API (abi3)" not in uncovered.stdout
    assert '+STABLE_TORCH_LIBRARY_FRAGMENT(attnkit, m) {\n+  m.def("same(Tensor x) -> Tensor");\n }' in uncovered.stdout
    assert '+  m.def("attention(' not in uncovered.stdout  # the library's own
    assert "+// _attnkit_C: the module the project's own setup.py builds from this file." in uncovered.stdout

    commit_setup_py('"csrc/attnkit.cpp"')  # only the recipe's unit: migrated for real, every file proven
    covered = assemble("-C", str(ws), "migrate", "attnkit", "--json", "--no-check", cache=private_cache)
    assert covered.returncode == 0, covered.stderr[-3000:]
    report = json.loads(covered.stdout)
    steps = {step["step"]: step for step in report["steps"]}
    assert steps["limited-api"]["made"] == {"py-limited-api": 2, "torch-target-version": 1}
    assert ('ext_modules=[CppExtension(name="attnkit._attnkit_C", sources=["csrc/attnkit.cpp"], '
            'define_macros=[("TORCH_TARGET_VERSION", "0x020A000000000000")], py_limited_api=True)],'
            in (fork / "setup.py").read_text())
    assert "csrc/attnkit.cpp" in report["proof"]["proven_files"] and report["proof"]["not_committed"] == []
    source = (fork / "csrc" / "attnkit.cpp").read_text()
    assert '    "def same(x):\\n"' in source and '    "def attention(' in source  # both stay importable
    assert 'extern "C" PyObject* ASSEMBLE_PYINIT(_attnkit_C)(void) {' in source
