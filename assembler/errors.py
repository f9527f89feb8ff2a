"""Every failure the user can act on is an AssembleError with a documented exit code.

The CLI prints the message in one line (plus an optional hint) and exits with ``exit_code``;
tracebacks are reserved for bugs.
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    """Exit codes shared by every command; documented in the README."""

    OK = 0
    CHECK_FAILED = 1  # a gate said no: audit --check, verify FAIL, build gate
    BAD_INPUT = 2  # manifest, series, arguments, missing or corrupt input files
    NETWORK = 3  # a repository or package index could not be reached
    WOULD_LOSE_WORK = 4  # uncommitted edits or unexported commits in forks/
    CONFLICT = 5  # a patch did not apply; the checkout is left resolvable
    BUILD_FAILED = 6  # compiler / CMake / scikit-build-core failure
    TOOLCHAIN = 7  # the CUDA toolkit or torch version asked for is unavailable
    LOCKED = 8  # another assemble process holds the workspace lock


class AssembleError(Exception):
    exit_code: ExitCode = ExitCode.BAD_INPUT

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


class ManifestError(AssembleError):
    exit_code = ExitCode.BAD_INPUT


class InputError(AssembleError):
    exit_code = ExitCode.BAD_INPUT


class NetworkError(AssembleError):
    exit_code = ExitCode.NETWORK


class WouldLoseWorkError(AssembleError):
    exit_code = ExitCode.WOULD_LOSE_WORK


class ConflictError(AssembleError):
    exit_code = ExitCode.CONFLICT


class BuildError(AssembleError):
    exit_code = ExitCode.BUILD_FAILED


class ToolchainError(AssembleError):
    exit_code = ExitCode.TOOLCHAIN


class CheckFailed(AssembleError):
    exit_code = ExitCode.CHECK_FAILED


class LockedError(AssembleError):
    exit_code = ExitCode.LOCKED
