"""migration/package_imports.py: the package's import of its extension module still finds it
once the bundle's install rules move both (issue 27: FlashKDA's and normkit's hand-made
relative import). Cases are our own files; the example's end-to-end test imports the result."""

from __future__ import annotations

from assembler.migration.package_imports import extension_names, relative_imports
from assembler.wheel.merge import install_rules

SETUP = ('from setuptools import setup\nfrom torch.utils.cpp_extension import CUDAExtension\n'
         'setup(ext_modules=[CUDAExtension(name="mykernels_C", sources=["a.cu"]), '
         'CUDAExtension("mykernels.ops._ops", ["b.cu"])])\n')


def _place(files: list[str], install: dict[str, str]) -> dict[str, str]:
    rules = install_rules(install)
    return {path: target for path in files for rule in rules if (target := rule.target(path)) is not None}


def test_extension_names_are_read_from_setup_py() -> None:
    assert extension_names(SETUP) == ["mykernels_C", "mykernels.ops._ops"]
    assert extension_names("setup(\n") == []


def test_a_top_level_module_moved_into_the_package_is_imported_relative() -> None:
    init = "import torch\nfrom mykernels_C import fwd as _fwd, size  # the kernels\n\n\ndef go():\n    return _fwd()\n"
    payload = ["mykernels/__init__.py", "mykernels_C.abi3.so"]
    place = _place(payload, {"mykernels/**": "vendor/third_party/", "mykernels_C*.so": "vendor/third_party/mykernels/"})
    edits = relative_imports({"mykernels/__init__.py": init}, ["mykernels_C"], place)
    assert edits.texts == {"mykernels/__init__.py": init.replace("from mykernels_C import", "from .mykernels_C import")}
    assert edits.made == 1 and not edits.declined


def test_a_package_moved_below_another_imports_its_own_module_relative() -> None:
    init = "from mykernels import _C\nfrom mykernels.ops import _ops\nfrom mykernels.util import helper\n"
    util = "from mykernels import _C\n"
    payload = ["mykernels/__init__.py", "mykernels/util.py", "mykernels/_C.abi3.so", "mykernels/ops/_ops.abi3.so"]
    place = _place(payload, {"mykernels/**": "bundle_pkg/"})
    edits = relative_imports({"mykernels/__init__.py": init, "mykernels/util.py": util},
                             ["mykernels._C", "mykernels.ops._ops"], place)
    assert edits.texts["mykernels/__init__.py"] == "from . import _C\nfrom .ops import _ops\nfrom .util import helper\n"
    assert edits.texts["mykernels/util.py"] == "from . import _C\n"


def test_what_does_not_move_is_left_alone() -> None:
    init = "from mykernels_C import fwd\n"
    place = _place(["mykernels/__init__.py", "mykernels_C.abi3.so"], {"**": ""})
    edits = relative_imports({"mykernels/__init__.py": init}, ["mykernels_C"], place)
    assert edits.texts == {} and edits.made == 0 and not edits.declined


def test_forms_without_a_relative_spelling_are_reported_at_their_line() -> None:
    init = "import torch\nimport mykernels_C\n\nfwd = mykernels_C.fwd\n"
    place = _place(["mykernels/__init__.py", "mykernels_C.abi3.so"],
                   {"mykernels/**": "vendor/", "mykernels_C*.so": "other/"})
    edits = relative_imports({"mykernels/__init__.py": init}, ["mykernels_C"], place)
    assert edits.texts == {}
    [(path, line, reason)] = edits.declined
    assert (path, line) == ("mykernels/__init__.py", 2) and "import mykernels_C" in reason


def test_a_module_landing_outside_the_package_is_reported_not_guessed() -> None:
    init = "from mykernels_C import fwd\n"
    place = _place(["mykernels/__init__.py", "mykernels_C.abi3.so"],
                   {"mykernels/**": "vendor/", "mykernels_C*.so": "other/"})
    edits = relative_imports({"mykernels/__init__.py": init}, ["mykernels_C"], place)
    assert edits.texts == {} and edits.declined[0][1] == 1 and "other.mykernels_C" in edits.declined[0][2]


def test_moved_modules_says_when_nothing_needs_reading() -> None:
    from assembler.migration.package_imports import moved_modules

    payload = ["mykernels/__init__.py", "mykernels/util.py"]
    assert moved_modules(payload, ["mykernels_C"], _place([*payload, "mykernels_C.abi3.so"], {"**": ""})) == {}
    relocated = _place([*payload, "mykernels_C.abi3.so"], {"mykernels/**": "vendor/", "mykernels_C*.so": "vendor/"})
    assert moved_modules(payload, ["mykernels_C"], relocated) == {
        "mykernels": "vendor.mykernels", "mykernels.util": "vendor.mykernels.util", "mykernels_C": "vendor.mykernels_C"}
