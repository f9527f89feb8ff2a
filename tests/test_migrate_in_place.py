"""A kernel that only its registration calls is made boxable where it is declared, in every
file that declares it, as people migrating by hand do (FA2's mha_fwd_kvcache: ``at::Tensor &q``
-> by value, ``int`` -> ``int64_t``, ``const float`` -> ``const double``, a ``const at::Tensor &``
the body copies into -> ``at::Tensor &``); a kernel another function calls keeps its signature
and is boxed through a wrapper. The compile proof keeps files that declare one function
together (migrate._linked), gives a file the standard header its dropped include gave, and
compiles a CUDA unit for one architecture. Our own code, written the way that tree is."""

from __future__ import annotations

from pathlib import Path

from assembler.check.lexer import blank_comments_and_strings
from assembler.migration.assess import _definition_body, _signature
from assembler.migration.migrate import ORIGINAL, FileRun, _linked
from assembler.migration.registration import Library, convert_libraries

SIGNATURE = """std::vector<at::Tensor>
fwd_cache(at::Tensor &q,   // batch x seqlen x heads x dim
          const at::Tensor &k,
          const at::Tensor &kcache,
          std::optional<at::Tensor> &out_, // written when given
          std::optional<const at::Tensor> &leftpad_k_,
          const float softmax_scale,
          int window_left,
          bool is_causal)"""
PROTOTYPES = ("#include <torch/library.h>\n" + SIGNATURE + """;
TORCH_LIBRARY(cachekit, ops) {
    ops.def("fwd_cache(Tensor! q, Tensor k, Tensor kcache, Tensor!? out, Tensor? leftpad_k, float s, int w, "
            "bool c) -> Tensor[]");
    ops.impl("fwd_cache", torch::kCUDA, make_pytorch_shim(&fwd_cache));
}
""")
DEFINITION = SIGNATURE + """ {
    kcache.copy_(k);
    return {q};
}
"""
BOXED = """fwd_cache(at::Tensor q,   // batch x seqlen x heads x dim
          const at::Tensor &k,
          at::Tensor &kcache,
          std::optional<at::Tensor> out_, // written when given
          const std::optional<at::Tensor> &leftpad_k_,
          const double softmax_scale,
          int64_t window_left,
          bool is_causal)"""


def _convert(files: dict[Path, str]) -> tuple[dict[Path, Library], list[tuple[Path, int, str]]]:
    codes = {path: blank_comments_and_strings(text) for path, text in files.items()}
    active = {path: set(range(1, text.count("\n") + 2)) for path, text in files.items()}
    return convert_libraries(files, codes, active, lambda name: _signature(codes, name),
                             lambda name: _definition_body(codes, name))


def _edited(text: str, library: Library) -> str:
    for edit in sorted(library.edits, key=lambda e: e.start, reverse=True):
        text = text[:edit.start] + edit.text + text[edit.end:]
    return text


def test_a_kernel_only_its_registration_calls_is_made_boxable_where_declared() -> None:
    torch_lib, api = Path("csrc/torch_lib.cpp"), Path("csrc/api.cpp")
    found, declined = _convert({torch_lib: PROTOTYPES, api: DEFINITION})
    assert declined == []
    registered, defined = _edited(PROTOTYPES, found[torch_lib]), _edited(DEFINITION, found[api])
    assert BOXED + ";" in registered and BOXED + " {" in defined  # the comments and the layout stay
    assert "TORCH_BOX(&fwd_cache)" in registered and "_boxed" not in registered  # no wrapper
    # kcache is written (copy_ into it): marked in the schema; q and out were already (Tensor!)
    assert found[torch_lib].schemas == ["fwd_cache(Tensor! q, Tensor k, Tensor(a!) kcache, Tensor!? out, "
                                        "Tensor? leftpad_k, float s, int w, bool c) -> Tensor[]"]
    assert found[api].schemas == [] and found[api].signatures and found[torch_lib].signatures


def test_a_kernel_another_function_calls_keeps_its_signature() -> None:
    torch_lib, api = Path("csrc/torch_lib.cpp"), Path("csrc/api.cpp")
    caller = DEFINITION + ("std::vector<at::Tensor> twice(at::Tensor& q) {\n"
                           "  return fwd_cache(q, q, q, o, l, 1.f, 0, 1);\n}\n")
    found, declined = _convert({torch_lib: PROTOTYPES, api: caller})
    assert declined == [] and api not in found
    registered = _edited(PROTOTYPES, found[torch_lib])
    assert "fwd_cache(at::Tensor &q," in registered and "TORCH_BOX(&fwd_cache_boxed)" in registered


def _run(*texts: str) -> FileRun:
    return FileRun(list(texts), [], None)  # type: ignore[arg-type]  # the final state is not read


def test_files_declaring_one_function_are_committed_together(tmp_path: Path) -> None:
    """flash_api.cpp's rewrite did not compile: flash_api_torch_lib.cpp, whose prototypes of its
    kernels changed too, is left as it is (each would compile, the two would not link); a file
    whose declarations did not change keeps its rewrite."""
    api, lib, other = tmp_path / "api.cpp", tmp_path / "lib.cpp", tmp_path / "other.cpp"
    old_lib = "std::vector<at::Tensor> fwd(at::Tensor &q, int w);\n"
    old_other = "void helper(int n) { TORCH_CHECK(n > 0); }\n"
    saved = {api: DEFINITION.encode(), lib: old_lib.encode(), other: old_other.encode()}
    options: dict[Path, list[tuple[str, FileRun | None]]] = {
        api: [("keep", _run(DEFINITION, DEFINITION.replace("at::Tensor", "torch::stable::Tensor"))), (ORIGINAL, None)],
        lib: [("keep", _run(old_lib, "std::vector<torch::stable::Tensor> fwd_cache(torch::stable::Tensor q, "
                                     "int64_t w);\n")), (ORIGINAL, None)],
        other: [("keep", _run(old_other, "void helper(int n) { STD_TORCH_CHECK(n > 0); }\n")), (ORIGINAL, None)],
    }
    level = {api: 1, lib: 0, other: 0}  # api.cpp withheld by its compile
    assert _linked(options, level, saved) == []  # lib.cpp declares fwd, not fwd_cache: nothing shared
    new_lib = "std::vector<torch::stable::Tensor> fwd_cache(torch::stable::Tensor q, int64_t w);\n"
    options[lib] = [("keep", _run(old_lib.replace("fwd", "fwd_cache"), new_lib)), (ORIGINAL, None)]
    saved[lib] = old_lib.replace("fwd", "fwd_cache").encode()
    assert _linked(options, level, saved) == [(lib, "fwd_cache", api)]
    assert level == {api: 1, lib: 1, other: 0}


def test_a_const_optional_the_body_writes_through_is_taken_by_value() -> None:
    """FA2's sparse forward copies into ``out_.value()`` of a ``const std::optional<at::Tensor>&``."""
    from assembler.migration.registration import _in_place_parameter

    written = "if (out_.has_value()) { out_.value().copy_(o); }"
    assert _in_place_parameter("const std::optional<at::Tensor> &out_", written) == ("std::optional<at::Tensor> out_",
                                                                                     True)
    assert _in_place_parameter("const std::optional<at::Tensor> &bias", "auto b = bias.value();") == (None, False)


def test_a_standard_name_the_dropped_header_gave_gets_its_header() -> None:
    """FA2's launch template dropped c10/cuda/CUDAException.h; utils.h, read after it, used
    std::optional (and hardware_info.h stderr) through it: the proof gives the file <optional>."""
    from assembler.migration.migrate import _std_header, _with_include
    from assembler.migration.proof import CompileError
    from assembler.migration.rewrite import FileRewrite

    nvcc = CompileError("src/utils.h:303", 'namespace "std" has no member "optional"', None, 303)
    gcc = CompileError("src/a.h:2", "'stderr' was not declared in this scope", None, 2)
    other = CompileError("src/a.h:3", "'Flash_fwd_params' was not declared in this scope", None, 3)
    assert _std_header([other, nvcc]) == "optional" and _std_header([gcc]) == "cstdio" and _std_header([other]) is None
    before = '#pragma once\n#include <c10/cuda/CUDAException.h>\n#include "utils.h"\nvoid f();\n'
    after = '#pragma once\n#include <cuda_runtime_api.h>\n#include "utils.h"\nvoid g();\n'
    run = FileRun([before, before, after, after], [], FileRewrite(after, [True] * 5))
    made = _with_include(run, "optional", 1)
    assert made.texts[:2] == [before, before]  # the registration step's text is the file as it was
    assert made.texts[2] == made.texts[3] == ('#pragma once\n#include <optional>\n#include <cuda_runtime_api.h>\n'
                                              '#include "utils.h"\nvoid g();\n')
    assert made.final.text == made.texts[3] and len(made.final.active) == 6


def test_a_kernel_a_left_out_pybind11_module_binds_is_made_boxable_too() -> None:
    """FA2's PYBIND11_MODULE (behind FLASHATTENTION_DISABLE_PYBIND) binds mha_fwd, which its torch
    library does not register: made boxable like the registered kernels; the module, which the
    build leaves out, stays as it is."""
    torch_lib, api = Path("csrc/torch_lib.cpp"), Path("csrc/api.cpp")
    plain = ("std::vector<at::Tensor> fwd_plain(at::Tensor &q, const float scale) { return {q}; }\n"
             "#ifndef NO_PYBIND\n#include <torch/python.h>\nPYBIND11_MODULE(NAME, m) {\n"
             '  m.def("fwd", &ns::fwd_plain, "Forward");\n}\n#endif\n')
    files = {torch_lib: PROTOTYPES, api: DEFINITION + plain}
    codes = {path: blank_comments_and_strings(text) for path, text in files.items()}
    active = {path: set(range(1, text.count("\n") + 2)) for path, text in files.items()}
    module_lines = {DEFINITION.count("\n") + number for number in range(3, 8)}  # #include .. #endif
    active[api] -= module_lines
    found, declined = convert_libraries(files, codes, active, lambda name: _signature(codes, name),
                                        lambda name: _definition_body(codes, name))
    assert declined == []
    defined = _edited(files[api], found[api])
    assert "fwd_plain(at::Tensor q, const double scale) {" in defined
    assert '  m.def("fwd", &ns::fwd_plain, "Forward");' in defined
    active[api] |= module_lines  # a module the build compiles: the pybind11 step's, not this one's
    found, _ = convert_libraries(files, codes, active, lambda name: _signature(codes, name),
                                 lambda name: _definition_body(codes, name))
    assert "fwd_plain(at::Tensor &q, const float scale)" in _edited(files[api], found[api])


def test_the_shim_header_nothing_uses_any_more_is_no_longer_included(tmp_path: Path) -> None:
    """FA2's flash_api_torch_lib.cpp registered through vLLM's make_pytorch_shim (pytorch_shim.h):
    once TORCH_BOX boxes every kernel, the include goes and the header is left as it is (FA3's
    sources in the same tree still include it), unless a unit of the build includes it."""
    from assembler.migration.migrate import _unused_headers
    from assembler.migration.rewrite import FileRewrite

    shim = "#pragma once\n#include <torch/library.h>\ntemplate <typename R, typename... A>\n" \
           "auto make_pytorch_shim(R (*f)(A...)) { return f; }\n"
    torch_lib, api, header = tmp_path / "torch_lib.cpp", tmp_path / "api.cpp", tmp_path / "common" / "pytorch_shim.h"
    registering = PROTOTYPES.replace("#include <torch/library.h>\n",
                                     '#include <torch/library.h>\n#include "common/pytorch_shim.h"  // the shim\n')
    found, declined = _convert({torch_lib: registering, api: DEFINITION, header: shim})
    assert declined == [] and found[torch_lib].unused == [header]
    assert "pytorch_shim.h" not in _edited(registering, found[torch_lib])
    files = {path: FileRewrite(text, []) for path, text in ((torch_lib, registering), (api, DEFINITION),
                                                           (header, shim))}
    (tmp_path / "other.cpp").write_text('#include "common/pytorch_shim.h"\n')
    units = [torch_lib, api]  # the build's sources
    assert _unused_headers(found, files, units) == [header]
    assert _unused_headers(found, files, [*units, tmp_path / "other.cpp"]) == []


def test_a_cuda_units_proof_compiles_for_its_newest_architecture() -> None:
    from assembler.migration.proof import proof_archs

    assert proof_archs(("9.0a", "10.0a")) == ("10.0a",) and proof_archs(("8.0", "12.0a", "9.0a")) == ("12.0a",)
    assert proof_archs(("10.0a",)) == ("10.0a",) and proof_archs(()) == ()
