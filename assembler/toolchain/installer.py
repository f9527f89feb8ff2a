"""Who installs packages: uv, a dependency of assembler and so always there, with pip only as the
fallback when uv cannot run (or ``ASSEMBLE_INSTALLER=pip``).

uv hard-links files from its cache (``$UV_CACHE_DIR``, else uv's default, shared with the user's
own uv runs), so a second environment holding the same torch costs seconds, not gigabytes. uv
does not read pip's configuration: the user's indexes, find-links folders and constraints are
carried over (``pipconfig``), so both pick the same builds.

Progress: on a terminal uv or pip draws its own (bytes, rate) through a pseudo-terminal whose
output is also kept for the error message; otherwise each phase line the tool prints (resolved,
downloading, prepared, installed) is passed on as it happens, with the elapsed time.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import importlib.metadata
import importlib.util
import os
import pty
import re
import shutil
import subprocess
import sys
import termios
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from assembler.errors import AssembleError, InputError, NetworkError, ToolchainError
from assembler.toolchain.pipconfig import pip_settings, uv_environment, uv_flags

INSTALLER_VARIABLE = "ASSEMBLE_INSTALLER"
Progress = Callable[[str], None]

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07|\r")
# pip: "Could not find a version ...", uv: "there is no version of X==1" / "X was not found in the package registry"
_NO_MATCH = re.compile(
    r"Could not find a version that satisfies the requirement (?P<req>\S+)(?: \(from versions: (?P<versions>[^)]*)\))?"
    r"|there is no version of (?P<uvreq>[^\s,]+)|Because (?P<uvmissing>\S+) was not found in the package registry"
)
# What pip (urllib3) and uv (reqwest) print when an index cannot be reached. pip then also reports
# "No matching distribution", which alone means the version does not exist: these tell them apart.
_UNREACHABLE = re.compile(
    r"Could not fetch URL|Failed to establish a new connection|NewConnectionError|ConnectTimeoutError"
    r"|ReadTimeoutError|ProxyError|Temporary failure in name resolution|Name or service not known"
    r"|Network is unreachable|Connection refused|SSLError|certificate verify failed"
    r"|error sending request|tcp connect error|dns error|invalid peer certificate|operation timed out"
)
_CONNECTION_DETAIL = re.compile(r"Failed to establish a new connection: ([^'\")]+)")
_UV_URL = re.compile(r"Failed to fetch: `?([^`\s]+)")
_INDEXES = re.compile(r"^Looking in indexes: (.+)$", re.MULTILINE)
_PHASE = re.compile(
    r"^(Resolved|Prepared|Installed|Uninstalled|Audited|Downloading|Downloaded|Building|Built"
    r"|Installing collected packages|Successfully installed)\b"
)


@dataclass(frozen=True)
class Installer:
    name: str  # "uv" or "pip"
    version: str
    uv: Path | None = None  # the uv executable

    def __str__(self) -> str:
        return f"{self.name} {self.version}"


@functools.cache
def _find_uv() -> tuple[Path, str] | None:
    """The uv that ships with assembler (the ``uv`` package), else one on PATH; None when neither runs."""
    candidates: list[Path] = []
    try:
        import uv

        candidates.append(Path(uv.find_uv_bin()))
    except (ImportError, FileNotFoundError):
        pass
    on_path = shutil.which("uv")
    if on_path:
        candidates.append(Path(on_path))
    for candidate in candidates:
        try:
            out = subprocess.run([str(candidate), "--version"], capture_output=True, text=True, timeout=30, check=False)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if out.returncode == 0 and out.stdout.startswith("uv "):
            return candidate, out.stdout.split()[1]
    return None


def _pip_version() -> str:
    try:
        return importlib.metadata.version("pip")
    except importlib.metadata.PackageNotFoundError:
        import ensurepip

        return ensurepip.version()


def installer() -> Installer:
    """uv unless ``ASSEMBLE_INSTALLER=pip`` or no uv runs here."""
    wanted = os.environ.get(INSTALLER_VARIABLE, "").strip().lower() or "uv"
    if wanted not in {"uv", "pip"}:
        raise InputError(f"{INSTALLER_VARIABLE}={wanted!r} is not an installer",
                         hint="set it to uv or pip, or unset it")
    if wanted == "uv":
        found = _find_uv()
        if found is not None:
            return Installer("uv", found[1], found[0])
    return Installer("pip", _pip_version())


def uv_cache_dir() -> str | None:
    """Where uv keeps the files our environments hard-link to (``uv cache dir``), or None."""
    found = _find_uv()
    if found is None:
        return None
    out = subprocess.run([str(found[0]), "cache", "dir"], capture_output=True, text=True, timeout=30, check=False)
    return out.stdout.strip() or None if out.returncode == 0 else None


def uv_version() -> str | None:
    found = _find_uv()
    return found[1] if found else None


def create_venv(tool: Installer, path: Path, progress: Progress, started: float) -> None:
    """An empty venv at ``path`` on this interpreter (uv: no pip in it; pip: pip from ensurepip)."""
    if tool.uv is not None:
        command = [str(tool.uv), "venv", str(path), "--python", sys.executable, "--no-project", "--quiet"]
        code, output = run_tool(command, dict(os.environ), progress, started, cwd=path.parent)
        if code != 0:
            raise install_error(output, f"cannot create a venv at {path}")
        return
    import venv

    venv.EnvBuilder(with_pip=True, symlinks=True, clear=True).create(path)


def install(
    tool: Installer,
    python: Path,
    requirements: Sequence[str],
    *,
    doing: str,
    progress: Progress,
    started: float,
    constraints: Sequence[Path] = (),
    target: Path | None = None,
    options: Sequence[str] = (),
    user_config: bool = True,
    fallback: type[AssembleError] = ToolchainError,
    log: Path | None = None,
) -> None:
    """Install ``requirements`` for the interpreter ``python`` (into its environment, or into
    ``target`` with ``--target``). ``options`` are flags uv and pip share (``--no-deps``,
    ``--no-index``, ``--only-binary``). ``user_config``: follow the user's pip configuration.
    Raises ``install_error``'s error, the full output written to ``log`` when given."""
    env = dict(os.environ)
    command: list[str]
    if tool.uv is not None:
        command = [str(tool.uv), "pip", "install", "--python", str(python)]
        if user_config:
            settings = pip_settings()
            command += uv_flags(settings)
            env = uv_environment(settings, env)
        else:
            command.append("--no-config")
    else:
        runner = python if target is None else _pip_host(python)
        command = [str(runner), "-m", "pip", "install", "--disable-pip-version-check", "--no-input"]
        if not draws_on_terminal():
            command += ["--progress-bar", "off"]
        if not user_config:
            env["PIP_CONFIG_FILE"] = os.devnull
    for constraint in constraints:
        command += ["--constraint", str(constraint)]
    if target is not None:
        command += ["--target", str(target)]
    command += [*options, *requirements]
    code, output = run_tool(command, env, progress, started, cwd=(target or python).parent)
    if code == 0:
        return
    if log is not None:
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text(output)
    raise install_error(output, doing, fallback=fallback, log=log)


def _pip_host(python: Path) -> Path:
    """An interpreter with pip that can run ``pip install --target`` (pip only: uv needs none)."""
    for candidate in (python, Path(sys.executable)):
        probe = subprocess.run([str(candidate), "-c", "import pip"], capture_output=True, check=False)
        if probe.returncode == 0:
            return candidate
    if importlib.util.find_spec("pip") is None:
        raise ToolchainError(
            "neither uv nor pip can run here to install packages",
            hint="reinstall assembler with its dependencies (uv is one), or unset ASSEMBLE_INSTALLER",
        )
    return Path(sys.executable)


def draws_on_terminal() -> bool:
    """Whether the installer may draw on our terminal: stderr is one, and nobody (a rich live
    display, such as `assemble build`'s) has taken sys.stderr over; then phase lines go through
    ``progress`` instead, which prints above that display."""
    try:
        return sys.stderr.isatty() and sys.stderr is sys.__stderr__ and os.environ.get("TERM") != "dumb"
    except (AttributeError, ValueError):
        return False


def run_tool(command: Sequence[str], env: dict[str, str], progress: Progress, started: float,
             cwd: Path) -> tuple[int, str]:
    """Run an installer; return its exit code and its output (terminal codes removed)."""
    if draws_on_terminal():
        code, raw = _tee_through_pty(command, env, cwd)
        return code, _ANSI.sub("", raw)
    process = subprocess.Popen(
        list(command), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, errors="replace", env=env, cwd=cwd,
    )
    assert process.stdout is not None
    lines = []
    for line in process.stdout:
        lines.append(line)
        text = line.strip()
        if _PHASE.match(text):
            if text.startswith("Successfully installed"):
                text = f"Successfully installed {len(text.split()) - 2} packages"
            progress(f"  {text} [{time.monotonic() - started:.1f} s]")
    return process.wait(), "".join(lines)


def _tee_through_pty(command: Sequence[str], env: dict[str, str], cwd: Path) -> tuple[int, str]:
    """The tool sees a terminal of our size and draws its progress; we keep a copy."""
    master, slave = pty.openpty()
    with contextlib.suppress(OSError):
        size = fcntl.ioctl(sys.stderr.fileno(), termios.TIOCGWINSZ, b"\0" * 8)
        fcntl.ioctl(slave, termios.TIOCSWINSZ, size)
    try:
        process = subprocess.Popen(list(command), stdin=subprocess.DEVNULL, stdout=slave, stderr=slave, env=env,
                                   cwd=cwd)
    finally:
        os.close(slave)
    chunks = []
    try:
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the tool closed its side
                break
            if not data:
                break
            chunks.append(data)
            with contextlib.suppress(OSError):
                os.write(sys.stderr.fileno(), data)
    finally:
        os.close(master)
    return process.wait(), b"".join(chunks).decode(errors="replace")


def install_error(output: str, doing: str, fallback: type[AssembleError] = ToolchainError,
                  log: Path | None = None) -> AssembleError:
    """The error for a failed install, read from uv's or pip's output: NetworkError (exit 3) when
    an index could not be reached, ToolchainError naming the requirement no release satisfies,
    else ``fallback`` with the tool's first error. ``doing`` says what was being installed."""
    output = _ANSI.sub("", output)
    see = f"full installer output: {log}" if log is not None else None
    unreachable = _UNREACHABLE.search(output)
    if unreachable is not None:
        detail = _CONNECTION_DETAIL.search(output)
        causes = [line.strip().removeprefix("cause:").strip() for line in output.splitlines()
                  if line.strip().startswith("cause:")]
        why = detail.group(1).strip() if detail else (causes[-1] if causes else unreachable.group(0))
        indexes = _INDEXES.search(output)
        url = _UV_URL.search(output)
        where = f"; indexes: {indexes.group(1).strip()}" if indexes else f"; {url.group(1)}" if url else ""
        return NetworkError(
            f"{doing}: a package index could not be reached ({why}{where})",
            hint=see or "check the network, the proxy and the index settings (pip config list, UV_INDEX_URL)",
        )
    match = _NO_MATCH.search(output)
    if match:
        requirement = match.group("req") or match.group("uvreq") or match.group("uvmissing")
        versions = (match.group("versions") or "").strip()
        hint = f"available: {versions}" if versions and versions != "none" else (see or "check the version")
        return ToolchainError(f"{doing}: no release of {requirement}", hint=hint)
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    errors = [line.removeprefix("ERROR:").removeprefix("error:").strip() for line in lines
              if line.startswith(("ERROR:", "error:"))]
    causes = [line.removeprefix("cause:").strip() for line in lines if line.startswith("cause:")]
    last = ": ".join([errors[0], *causes[:1]]) if errors else (lines[-1] if lines else "the installer failed")
    return fallback(f"{doing}: {last}", hint=see)
