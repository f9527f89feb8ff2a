"""Which compiler and CMake options a recipe may pass, as data: an allow-list of option
*shapes*. A recipe's flags change how a unit compiles (optimisation, warnings, code generation);
never what is compiled, where output goes, which program runs, or whether the compiler compiles
at all (``-dumpversion``, ``--version``, ``-###`` print and exit, so a scan would see nothing).
A deny-list cannot keep up with every driver option; a shape that is not listed here is refused.

The values inside an allowed shape never hold ``;``, ``$``, ``@``, quotes or spaces, so CMake list
splitting (``-O2;-B/evil/``) and variable references (``-${EMPTY}B/evil/``) cannot turn one
allowed option into another."""

from __future__ import annotations

import re
from typing import Literal

Compiler = Literal["c++", "nvcc"]

# Options another key owns: the recipe says them there, where assemble can check them.
FLAG_OWNERS = (
    (re.compile(r"--?std(=.*)?"), "cxx-std / cuda-std"),
    (re.compile(r"-[DU].*|--(un)?define-macro(=.*)?"), "defines"),
    (re.compile(r"-I.*|-isystem.*|-iquote.*|-idirafter.*|--include-path(=.*)?|--system-include(=.*)?"), "include-dirs"),
    (re.compile(r"-l(?!ineinfo$).*|-L.*|--library(-path)?(=.*)?|-Wl,.*|-Xlinker(=.*)?|--linker-options(=.*)?"),
     "libraries"),
    (re.compile(r"-gencode(=.*)?|--generate-code(=.*)?|-arch(=.*)?|--gpu-architecture(=.*)?|-code(=.*)?|--gpu-code(=.*)?"),
     "cuda-archs (and ptx)"),
)

# nvcc options whose value is a separate token: CMake de-duplicates repeated tokens, so the
# recipe writes them joined (-Xptxas=-v, -Xcompiler=-fopenmp).
JOINED_FLAGS = ("-Xcompiler", "--compiler-options", "-Xptxas", "--ptxas-options", "-Xnvlink", "--nvlink-options",
                "-Xarchive", "--archive-options", "-Xfatbin", "--fatbin-options", "-maxrregcount", "--maxrregcount",
                "--threads", "-t", "-split-compile", "--split-compile")

_VALUE = r"[A-Za-z0-9_.,+:=-]*"  # never ; $ @ / quotes or spaces

# g++ / clang++: optimisation, debug info, -f and -m code generation, warnings.
_CXX_SHAPE = re.compile(
    r"-O[0-3sgz]?|-Ofast"
    r"|-g(?:[0-3]|gdb[0-3]?|dwarf(?:-[2-5])?|column-info|no-column-info)?"
    rf"|-f(?:no-)?(?P<f>[A-Za-z0-9][A-Za-z0-9+_.-]*)(?:={_VALUE})?"
    r"|-f(?:file|debug|macro)-prefix-map=[A-Za-z0-9_.,+:=/-]+"
    rf"|-m(?:no-)?[A-Za-z0-9][A-Za-z0-9+_.-]*(?:={_VALUE})?"
    r"|-W(?:no-)?(?!p$|a$|l$)[a-z0-9][a-z0-9+_.=-]*"  # a comma never matches: -Wl, -Wa, -Wp, stay out
    r"|-w|-pthread|-pedantic(?:-errors)?"
)
# -f options that are modes, other programs or files rather than code generation: -fpreprocessed
# and -fdirectives-only change what the preprocessor reads, -fsyntax-only what the build writes.
_CXX_F_REFUSED = re.compile(
    r"preprocessed|directives-only|syntax-only|plugin.*|dump.*|profile.*|auto-profile.*|callgraph-info.*|stack-usage"
    r"|save-optimization-record.*|opt-info.*|diagnostics-(?:format|generate-patch|parseable-fixits|plain-output).*"
    r"|compare-debug.*|self-test.*|use-ld.*|module-mapper.*|modules.*|deps-.*|wpa.*|ltrans.*|resolution.*|record-.*"
    r"|working-directory|pch-.*|lto-.*|ld-path.*|build-id.*|checking.*|report-bug|time-report.*"
)

# nvcc: its long and short spellings, bare or with a value.
_NVCC_BARE = frozenset({
    "--use_fast_math", "-use_fast_math", "--expt-relaxed-constexpr", "-expt-relaxed-constexpr",
    "--expt-extended-lambda", "-expt-extended-lambda", "--extended-lambda", "-extended-lambda",
    "-lineinfo", "--generate-line-info", "-G", "--device-debug", "-g", "--debug", "-O0", "-O1", "-O2", "-O3",
    "--resource-usage", "-res-usage", "--restrict", "-restrict", "--extra-device-vectorization",
    "-extra-device-vectorization", "--disable-warnings", "-w", "--display-error-number", "-err-no",
    "--no-display-error-number", "-no-err-no", "--source-in-ptx", "-src-in-ptx", "--allow-unsupported-compiler",
    "-allow-unsupported-compiler", "-Wreorder", "--Wreorder", "-Wno-deprecated-gpu-targets",
    "--Wno-deprecated-gpu-targets", "-Wno-deprecated-declarations", "--Wno-deprecated-declarations",
    "-Wext-lambda-captures-this", "--Wext-lambda-captures-this",
})
_NVCC_VALUED = re.compile(
    r"(?:--?(?:ftz|prec-div|prec-sqrt|fmad|maxrregcount|threads|t|split-compile|diag-suppress|diag-error|diag-warn"
    r"|Werror|default-stream|relocatable-device-code|rdc|static-global-template-stub|compress-mode|optimize|dopt"
    r"|frandom-seed|Wno-.+|W[a-z-]+))=(?P<value>[A-Za-z0-9_.,+-]+)"
)
_NVCC_PASS_THROUGH = re.compile(
    r"(?P<to>-Xcompiler|--compiler-options|-Xptxas|--ptxas-options|-Xnvlink|--nvlink-options|-Xfatbin|--fatbin-options"
    r"|-Xcudafe|--cudafe-options)=(?P<value>.+)"
)
# What ptxas, nvlink, fatbinary and cudafe++ may be told: option shapes without files.
_TOOL_OPTION = re.compile(r"--?(?P<name>[A-Za-z][A-Za-z0-9_-]*)(?:=[A-Za-z0-9_.,+-]*)?")
_TOOL_REFUSED = re.compile(r"o|output.*|options-file|optf|input.*|.*file.*|.*dir.*|keep.*|save.*|preproc.*"
                           r"|host-compiler")
_CMAKE_OK = frozenset({
    "CMAKE_CXX_STANDARD", "CMAKE_CUDA_STANDARD", "CMAKE_CXX_EXTENSIONS", "CMAKE_CUDA_EXTENSIONS",
    "CMAKE_POSITION_INDEPENDENT_CODE", "CMAKE_VERBOSE_MAKEFILE", "CMAKE_EXPORT_COMPILE_COMMANDS",
    "CMAKE_CUDA_SEPARABLE_COMPILATION", "CMAKE_INTERPROCEDURAL_OPTIMIZATION", "CMAKE_CXX_VISIBILITY_PRESET",
    "CMAKE_CUDA_VISIBILITY_PRESET", "CMAKE_VISIBILITY_INLINES_HIDDEN",
})
_CMAKE_DEFINE = re.compile(r"-D(?P<name>[A-Za-z_][A-Za-z0-9_.-]*)"
                           r"(?::(?:BOOL|STRING|PATH|FILEPATH|INTERNAL))?=(?P<value>.*)")
_CMAKE_OTHER = re.compile(r"-Wno-dev|-Wdev|-Wno-deprecated|-Wdeprecated|-Werror=(?:dev|deprecated)"
                          r"|-Wno-error=(?:dev|deprecated)"
                          r"|--warn-uninitialized|--log-level=(?:ERROR|WARNING|NOTICE|STATUS|VERBOSE|DEBUG|TRACE)")


def flag_owner(flag: str) -> str | None:
    """The recipe key that says what ``flag`` says (``-std=`` is cxx-std's), or None."""
    return next((owner for pattern, owner in FLAG_OWNERS if pattern.fullmatch(flag)), None)


def cxx_flag_allowed(flag: str) -> bool:
    """Whether ``flag`` is a g++ option shape that changes only how a unit compiles."""
    match = _CXX_SHAPE.fullmatch(flag)
    return match is not None and not (match["f"] and _CXX_F_REFUSED.fullmatch(match["f"]))


def flag_allowed(flag: str, compiler: Compiler) -> bool:
    """Whether a recipe may pass ``flag`` (one token) to ``compiler``: an allowed shape, not
    another key's option. nvcc's -Xcompiler values pass g++'s test, each of them."""
    if flag_owner(flag) is not None:
        return False
    if compiler == "c++":
        return cxx_flag_allowed(flag)
    if flag in _NVCC_BARE or _NVCC_VALUED.fullmatch(flag):
        return True
    through = _NVCC_PASS_THROUGH.fullmatch(flag)
    if through is None:
        return False
    values = through["value"].split(",")
    if through["to"] in ("-Xcompiler", "--compiler-options"):
        return all(value and flag_owner(value) is None and cxx_flag_allowed(value) for value in values)
    for value in values:
        option = _TOOL_OPTION.fullmatch(value)
        if option is None or _TOOL_REFUSED.fullmatch(option["name"]):
            return False
    return True


def cmake_arg_problem(arg: str) -> tuple[str, str] | None:
    """Why a recipe may not pass ``arg`` to CMake, with the fix; None when it may. Only cache
    definitions of the project's own options (``-DNAME=VALUE``) and CMake's warning switches:
    never another generator, toolchain, compiler, script or flag variable that assemble sets."""
    if _CMAKE_OTHER.fullmatch(arg):
        return None
    match = _CMAKE_DEFINE.fullmatch(arg)
    if match is None:
        return ("is not a -DNAME=VALUE definition or a CMake warning switch",
                'write cache definitions only, e.g. cmake-args = ["-DMY_OPTION=ON"]')
    name, value = match["name"], match["value"]
    if name.startswith("CMAKE_") and name not in _CMAKE_OK:
        owner = ("cuda-archs" if "ARCHITECTURES" in name
                 else "the recipe's own keys (assemble sets compilers, flags and paths)")
        return (f"sets {name}, which assemble controls", f"remove it; use {owner}")
    if "$" in value or "\n" in value or "\r" in value:
        return ("holds a CMake variable reference or a line break in its value", "write the value literally")
    return None
