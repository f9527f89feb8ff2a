"""Every failure the user can act on is an AssembleError with a documented exit code.

The CLI prints the message in one line (plus an optional hint) and exits with ``exit_code``;
tracebacks are reserved for bugs.
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    """Exit codes shared by every command; documented in docs/reference/exit-codes.md (generated from this enum)."""

    OK = 0
    CHECK_FAILED = 1  # a gate said no: audit --check, verify FAIL, build gate
    BAD_INPUT = 2  # manifest, series, arguments, missing or corrupt input files
    NETWORK = 3  # a repository or package index could not be reached
    WOULD_LOSE_WORK = 4  # uncommitted edits or unexported commits in forks/
    CONFLICT = 5  # a patch did not apply; the checkout is left resolvable
    BUILD_FAILED = 6  # compiler / CMake / scikit-build-core failure
    TOOLCHAIN = 7  # the CUDA toolkit or torch version asked for is unavailable
    LOCKED = 8  # another assemble process holds the workspace lock
    ENVIRONMENT = 9  # the machine said no: disk full, read-only file system, permission denied
    INTERNAL = 70  # a bug in assemble (an unexpected exception); --debug shows the traceback


class AssembleError(Exception):
    exit_code: ExitCode = ExitCode.BAD_INPUT

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def to_json(self) -> dict[str, str | int | None]:
        """The ``error`` object of every JSON document: message, hint, exit code."""
        return {"message": self.message, "hint": self.hint, "exit_code": int(self.exit_code)}


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


class EnvironmentFailure(AssembleError):
    """The system refused an operation on a sound input: no space left, a read-only file
    system, a missing permission. Fix the machine, not the workspace."""

    exit_code = ExitCode.ENVIRONMENT


# errno -> the hint for an OSError that is the machine's doing, not the input's.
_ENVIRONMENT_HINTS = {
    "ENOSPC": "free space on that file system (or point ASSEMBLE_CACHE or the workspace elsewhere), then run the "
              "command again",
    "EDQUOT": "free space within your disk quota, then run the command again",
    "EROFS": "the file system is read-only: deps, patches --offline, check, audit and rebase --dry-run work there; "
             "run commands that write on a writable copy",
    "EACCES": "check the permissions of that path (or run as its owner)",
    "EPERM": "check the permissions of that path (or run as its owner)",
    "EMFILE": "raise the open-file limit (ulimit -n)",
    "ENOMEM": "free memory, or lower --jobs",
}


# What a tool such as git prints when the system refused, and the errno it stands for.
_REFUSALS = {"No space left on device": "ENOSPC", "Disk quota exceeded": "EDQUOT", "Read-only file system": "EROFS"}


def environment_failure(message: str, output: str) -> EnvironmentFailure | None:
    """``message`` as an EnvironmentFailure when a tool's ``output`` says the system refused
    (git's "fatal: ...: No space left on device"), else None."""
    for text, name in _REFUSALS.items():
        if text in output:
            return EnvironmentFailure(message, hint=_ENVIRONMENT_HINTS[name])
    return None


def from_os_error(error: OSError) -> AssembleError:
    """The one-line error for an OSError that reached the CLI: the path(s), the system's reason
    and a hint; exit ENVIRONMENT when the machine refused, BAD_INPUT when the path is wrong
    (missing, a directory where a file belongs, a name too long)."""
    import errno

    name = errno.errorcode.get(error.errno or 0, "")
    paths = " -> ".join(str(p) for p in (error.filename, error.filename2) if p is not None)
    reason = error.strerror or str(error) or type(error).__name__
    message = f"{paths}: {reason}" if paths else reason
    hint = _ENVIRONMENT_HINTS.get(name)
    if hint is not None:
        return EnvironmentFailure(message, hint=hint)
    if isinstance(error, TimeoutError | ConnectionError):
        return NetworkError(message, hint="check the network, or point [mirrors] at a local copy")
    return InputError(message, hint="check that path: it exists and is the kind of file assemble expects there"
                      if paths else "re-run with --debug to see where it happened")


class NewerStateError(InputError):
    """A state file (a rebase journal, a checkout's assemble-state.json) written by a newer
    assembler, in a format this one does not know: refuse it rather than misread it."""

    def __init__(self, path: object, what: str) -> None:
        super().__init__(f"{path}: {what} was written by a newer assembler; upgrade",
                         hint="upgrade assemble (pip install -U assembler) to the version that wrote it, then run the "
                              "command again")
        self.path = path
