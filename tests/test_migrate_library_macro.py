"""A project's own name for TORCH_LIBRARY (vLLM's FA2 registers through
``#define TORCH_LIBRARY_EXPAND(NAME, MODULE) TORCH_LIBRARY(NAME, MODULE)``, for the
macro-expanded extension name): its blocks are converted like TORCH_LIBRARY's (impls boxed, an
impl with a dispatch key moved to an impl block), and the macro stays as written, its definition
made stable by the torch-library rewrite. Our own code, written the way that tree is."""

from __future__ import annotations

from pathlib import Path

from assembler.check.lexer import blank_comments_and_strings
from assembler.migration.assess import _definition_body, _signature
from assembler.migration.registration import Library, convert_libraries, library_wrappers

HEADER = ("#pragma once\n#include <torch/library.h>\n"
          "#define TORCH_LIBRARY_EXPAND(NAME, MODULE) TORCH_LIBRARY(NAME, MODULE)\n")
SOURCE = """#include "registration.h"

at::Tensor scaled(const at::Tensor& x, double factor) {
  return x;
}

TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, ops) {
  ops.def("scaled(Tensor x, float factor) -> Tensor");
  ops.impl("scaled", torch::kCUDA, make_pytorch_shim(&scaled));
}
"""


def _convert(files: dict[Path, str]) -> tuple[dict[Path, Library], list[tuple[Path, int, str]]]:
    codes = {path: blank_comments_and_strings(text) for path, text in files.items()}
    active = {path: set(range(1, text.count("\n") + 2)) for path, text in files.items()}
    return convert_libraries(files, codes, active, lambda name: _signature(codes, name),
                             lambda name: _definition_body(codes, name))


def test_a_projects_own_torch_library_macro_is_a_library_block() -> None:
    header, source = Path("csrc/registration.h"), Path("csrc/api.cpp")
    assert library_wrappers([HEADER]) == {"TORCH_LIBRARY_EXPAND"}
    found, declined = _convert({header: HEADER, source: SOURCE})
    assert declined == [] and source in found
    library = found[source]
    edited = SOURCE
    for edit in sorted(library.edits, key=lambda e: e.start, reverse=True):
        edited = edited[:edit.start] + edit.text + edited[edit.end:]
    assert "TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, ops) {" in edited  # the project's macro stays
    assert "STABLE_TORCH_LIBRARY_IMPL(TORCH_EXTENSION_NAME, CUDA, ops)" in edited
    assert "TORCH_BOX(&scaled)" in edited and "make_pytorch_shim" not in edited


def test_only_a_plain_spelling_of_torch_library_is_a_wrapper() -> None:
    assert library_wrappers(["#define LIB(a, b) TORCH_LIBRARY(b, a)\n#define X(a, b) foo(a, b)\n"]) == frozenset()
