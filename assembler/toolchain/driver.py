"""A link-time stand-in for the CUDA driver library (``libcuda.so``) where the toolkit has none.

A full CUDA installation ships ``lib64/stubs/libcuda.so``: a library with the driver's soname
(``libcuda.so.1``) and every driver API symbol, so that code calling the driver directly links on
a machine without a GPU driver, and the real driver provides the symbols at run time. NVIDIA's
PyPI wheels, of which the hermetic toolkit is made, ship no such stub, so a build that links the
driver (CMake's ``CUDA::cuda_driver``, as vLLM's FlashAttention does; ``-lcuda`` in a setup.py)
cannot link there. This makes the same kind of stub from the toolkit's own ``cuda.h``: one empty
definition per function it declares, under each spelling its macros select (``cuMemAlloc_v2``,
the per-thread-stream ``_ptsz``/``_ptds`` forms, the unversioned names), with the driver's soname.
The symbols matter: a linker that drops unused libraries (``--as-needed``, this compiler's
default) keeps ``DT_NEEDED libcuda.so.1`` only when the stub defines what the objects call. The
stub is never installed: the module loads the real driver by its soname."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from assembler.errors import ToolchainError
from assembler.fsutil import atomic_write_if_changed, refuse_links

DRIVER_SONAME = "libcuda.so.1"
# Where a full toolkit keeps NVIDIA's own stub.
STUB_PLACES = ("lib64/stubs/libcuda.so", "lib/stubs/libcuda.so", "targets/x86_64-linux/lib/stubs/libcuda.so")
# cuda.h's macros choose a function's exported name; each set of defines is one spelling.
SPELLINGS = ((), ("-DCUDA_API_PER_THREAD_DEFAULT_STREAM",), ("-D__CUDA_API_VERSION_INTERNAL",))
_DECLARATION = re.compile(r"\bCUresult\s+(?:__attribute__\s*\(\([^)]*\)\)\s*)?(cu[A-Za-z0-9_]+)\s*\(")


def toolkit_stub(root: Path) -> Path | None:
    """NVIDIA's own stub in the toolkit at ``root``, if it has one."""
    return next((root / place for place in STUB_PLACES if (root / place).is_file()), None)


def driver_functions(root: Path, compiler: str) -> list[str]:
    """Every driver API function the toolkit's cuda.h declares, under every spelling, sorted."""
    names: set[str] = set()
    for defines in SPELLINGS:
        result = subprocess.run([compiler, "-E", "-P", "-x", "c", *defines, "-I", str(root / "include"), "-"],
                                input="#include <cuda.h>\n", capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise ToolchainError(f"cannot read the driver API from {root / 'include' / 'cuda.h'}: "
                                 f"{result.stderr.strip()[:300]}",
                                 hint="the CUDA toolkit is incomplete: remove its cache directory and re-run")
        names.update(_DECLARATION.findall(result.stdout))
    return sorted(names)


def driver_stub(root: Path, directory: Path, compiler: str, *, inside: Path | None = None) -> Path:
    """``libcuda.so`` to link against: the toolkit's own stub, else one made in ``directory``
    (a build tree's, kept while cuda.h and the compiler give the same source). No file is
    written through a symbolic link: none between ``inside`` (default: the directory's parent,
    which the build checked) and the files, and a link at a file's name is replaced."""
    found = toolkit_stub(root)
    if found is not None:
        return found
    names = driver_functions(root, compiler)
    if not names:
        raise ToolchainError(f"{root / 'include' / 'cuda.h'} declares no driver API function",
                             hint="the CUDA toolkit is incomplete: remove its cache directory and re-run")
    base = inside if inside is not None else directory.parent
    refuse_links(base, directory)
    directory.mkdir(parents=True, exist_ok=True)
    source = directory / "libcuda_stub.c"
    text = ("/* Link-time stand-in for libcuda.so (assemble; never installed). */\n"
            + "".join(f"void {name}(void) {{}}\n" for name in names))
    stub = directory / "libcuda.so"
    changed = atomic_write_if_changed(source, text, inside=base)
    if changed or not stub.is_file() or stub.is_symlink():
        partial = directory / "libcuda.so.partial"
        partial.unlink(missing_ok=True)  # the linker writes a new file, never through a link left there
        result = subprocess.run([compiler, "-shared", "-fPIC", "-x", "c", str(source), f"-Wl,-soname,{DRIVER_SONAME}",
                                 "-o", str(partial)],
                                capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise ToolchainError(f"cannot make the CUDA driver stub: {result.stderr.strip()[:300]}",
                                 hint="check that the host compiler works (c++ --version)")
        partial.replace(stub)
    return stub
