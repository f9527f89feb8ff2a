"""The host C++ compiler: ``$CXX``, else ``c++`` (what CMake and setuptools pick too), named in
one place for the build's key, the setuptools backend's stand-in libraries and `assemble check`."""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping

from assembler.errors import ToolchainError

INSTALL_HINT = "install g++ or set CXX"


def cxx_name(environ: Mapping[str, str] | None = None) -> str:
    """The compiler ``environ`` (default: this process's) asks for."""
    return (os.environ if environ is None else environ).get("CXX", "c++")


def host_compiler(environ: Mapping[str, str] | None = None) -> str:
    """That compiler, which must be on PATH (ToolchainError otherwise)."""
    compiler = cxx_name(environ)
    if shutil.which(compiler) is None:
        raise ToolchainError(f"no C++ compiler ({compiler})", hint=INSTALL_HINT)
    return compiler
