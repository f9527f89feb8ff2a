"""Environments through uv: the user's pip configuration carried over (so uv picks what pip
picks), pip as the fallback, the pinned build tools, and the hermetic CUDA toolkit installed by
an interpreter that has no pip. Real uv, real pip, real wheels; no network beyond the suite's."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from assembler.toolchain import venv
from assembler.toolchain.installer import installer
from assembler.toolchain.pipconfig import pip_settings, uv_flags
from assembler.toolchain.torchenv import describe_build_env, pinned_build_tools
from tests.build_support import BUILD_TORCH, HERMETIC_CUDA

ROOT = Path(__file__).resolve().parent.parent


def _wheel(directory: Path, name: str, version: str) -> Path:
    """A tiny pure-Python wheel, as a package index would serve it."""
    dist_info = f"{name}-{version}.dist-info"
    members = {
        f"{name}/__init__.py": f"VERSION = {version!r}\n".encode(),
        f"{dist_info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
        f"{dist_info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = [
        f"{path},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},{len(data)}"
              for path, data in members.items()]
    members[f"{dist_info}/RECORD"] = ("\n".join([*record, f"{dist_info}/RECORD,,"]) + "\n").encode()
    directory.mkdir(parents=True, exist_ok=True)
    wheel = directory / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, data in members.items():
            archive.writestr(path, data)
    return wheel


def test_pip_settings_follow_pips_order(tmp_path: Path) -> None:
    """Global < user < PIP_CONFIG_FILE < PIP_* variables; [install] over [global]; /dev/null off."""
    (tmp_path / "xdg" / "pip").mkdir(parents=True)
    (tmp_path / "xdg" / "pip" / "pip.conf").write_text("[global]\nfind-links = /global/links\nconstraint = "
                                                       "/global/c.txt\n")
    (tmp_path / "home" / ".config" / "pip").mkdir(parents=True)
    (tmp_path / "home" / ".config" / "pip" / "pip.conf").write_text(
        "[global]\nextra-index-url = file:///a/simple file:///b/simple\n[install]\nfind_links = /user/links\n")
    base = {"XDG_CONFIG_DIRS": str(tmp_path / "xdg"), "HOME": str(tmp_path / "home")}
    settings = pip_settings(base)
    assert settings.find_links == ("/user/links",) and settings.constraints == ("/global/c.txt",)
    assert settings.extra_index_urls == ("file:///a/simple", "file:///b/simple") and settings.index_url is None
    flags = uv_flags(settings, {})
    assert flags[flags.index("--find-links") + 1] == "/user/links" and "--constraint" in flags
    assert flags[-2:] == ["--index-strategy", "unsafe-best-match"]  # pip's "best match over every index"

    env_file = tmp_path / "env.conf"
    env_file.write_text("[global]\nindex-url = https://mirror.example/simple\n")
    with_file = pip_settings({**base, "PIP_CONFIG_FILE": str(env_file), "PIP_FIND_LINKS": "/var/a /var/b"})
    assert with_file.index_url == "https://mirror.example/simple"
    assert with_file.extra_index_urls == ()  # an existing PIP_CONFIG_FILE replaces the user files
    assert with_file.find_links == ("/var/a", "/var/b") and with_file.constraints == ("/global/c.txt",)
    assert "--index-url" not in uv_flags(with_file, {"UV_INDEX_URL": "https://uv.example/simple"})  # uv's own wins
    assert pip_settings({**base, "PIP_CONFIG_FILE": os.devnull}).find_links == ()


@pytest.mark.parametrize("tool", ["uv", "pip"])
@pytest.mark.integration
def test_both_installers_follow_the_users_links_and_constraints(tool: str, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """A machine that serves its packages from a find-links folder and caps them with a
    constraints file, in pip.conf: uv must pick what pip picks (1.0, not the newer 2.0)."""
    _wheel(tmp_path / "wheels", "assembleprobe", "1.0")
    _wheel(tmp_path / "wheels", "assembleprobe", "2.0")
    (tmp_path / "constraints.txt").write_text("assembleprobe<2\n")
    (tmp_path / "pip.conf").write_text(
        f"[global]\nno-index = true\nfind-links = {tmp_path / 'wheels'}\nconstraint = {tmp_path / 'constraints.txt'}\n")
    for name in ("PIP_FIND_LINKS", "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_CONSTRAINT", "PIP_NO_INDEX"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_CONFIG_DIRS", str(tmp_path / "no-global"))
    monkeypatch.setenv("PIP_CONFIG_FILE", str(tmp_path / "pip.conf"))
    monkeypatch.setenv("ASSEMBLE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("ASSEMBLE_INSTALLER", tool)
    lines: list[str] = []
    path = venv.ensure_venv(["assembleprobe"], label="probe", progress=lines.append)
    assert venv.installed_versions(path)["assembleprobe"] == "1.0"
    marker = json.loads((path / venv.MARKER).read_text())
    assert (marker["installer"].split()[0] == tool
            and marker["python"] == f"{sys.implementation.name}-{sys.version_info[0]}.{sys.version_info[1]}")
    assert path.name.startswith("probe-") and path.name.endswith(venv.venv_key(["assembleprobe"]))
    # without a terminal: one line per phase as it happened, with the elapsed time; never a redraw
    phases = [line for line in lines if line.startswith("  ")]
    assert phases and all(line.rstrip().endswith(" s]") and "\r" not in line for line in phases), lines
    assert lines[0].startswith(f"creating probe environment with {tool} ") and "environment ready in" in lines[-1]


def test_build_env_holds_the_pinned_tools(build_env_path: Path) -> None:
    env = describe_build_env(build_env_path, BUILD_TORCH)
    assert env.tool_versions() == pinned_build_tools()
    assert set(pinned_build_tools()) == {"scikit-build-core", "cmake", "ninja", "setuptools", "wheel"}
    assert env.installer and env.python_version == ".".join(map(str, sys.version_info[:3]))


@pytest.fixture(scope="module")
def python_without_pip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An interpreter like the ones `uv tool install` and pipx give: assembler and its
    dependencies (uv among them, with its binary next to the interpreter), and no pip."""
    root = tmp_path_factory.mktemp("nopip")
    uv = installer().uv
    assert uv is not None, "uv, a dependency of assembler, does not run"
    subprocess.run([str(uv), "venv", str(root / "venv"), "--python", sys.executable, "--no-project", "--quiet"],
                   check=True)
    links = root / "links"
    links.mkdir()
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        if (entry.name.lower().startswith(("pip", "__editable__", "assembler", "_distutils_hack"))
            or entry.suffix == ".pth"):
            continue
        (links / entry.name).symlink_to(entry)
    site = next((root / "venv").glob("lib/python3*/site-packages"))
    (site / "assembler-test.pth").write_text(f"{ROOT}\n{links}\n")
    (root / "venv" / "bin" / "uv").symlink_to(uv)
    python = root / "venv" / "bin" / "python"
    assert subprocess.run([python, "-c", "import pip"], capture_output=True, check=False).returncode != 0
    return python


CUDA = """
import sys
from assembler.errors import AssembleError
from assembler.toolchain.cuda import select_cuda
try:
    toolkit = select_cuda(sys.argv[1], print)
except AssembleError as error:
    print("ERROR", int(error.exit_code), error.message, "|", error.hint)
    raise SystemExit(1)
print("TOOLKIT", toolkit.origin, toolkit.release, toolkit.nvcc)
"""


def test_hermetic_cuda_installs_without_pip(python_without_pip: Path, tmp_path: Path) -> None:
    env = {key: value for key, value in os.environ.items() if key not in ("CUDA_HOME", "ASSEMBLE_INSTALLER")}
    env["ASSEMBLE_CACHE"] = str(tmp_path / "cache")
    result = subprocess.run([python_without_pip, "-c", CUDA, HERMETIC_CUDA], env=env, capture_output=True, text=True,
                            check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"installing CUDA {HERMETIC_CUDA} from PyPI with uv " in result.stdout
    origin, release, nvcc = result.stdout.strip().splitlines()[-1].split()[1:]
    assert origin == "PyPI" and release.startswith(f"{HERMETIC_CUDA}.")
    assert (subprocess.run([nvcc, "--version"], capture_output=True, text=True,
                           check=True).stdout.count(f"release {HERMETIC_CUDA}") == 1)
    # forced onto pip, which this interpreter lacks: a toolchain error that says so, not "reach PyPI"
    env["ASSEMBLE_INSTALLER"] = "pip"
    env["ASSEMBLE_CACHE"] = str(tmp_path / "cache2")
    forced = subprocess.run([python_without_pip, "-c", CUDA, HERMETIC_CUDA], env=env, capture_output=True, text=True,
                            check=False)
    assert "ERROR 7" in forced.stdout and "neither uv nor pip can run here" in forced.stdout, (forced.stdout
                                                                                               + forced.stderr)
    assert "reach PyPI" not in forced.stdout


def test_on_a_terminal_the_installer_draws_its_own_progress(tmp_path: Path) -> None:
    """stderr a terminal: uv writes to it itself (through a pseudo-terminal, so its output is
    also kept for the error message); assemble adds no phase lines of its own."""
    import pty

    script = "from assembler.toolchain import venv; venv.ensure_venv(['tomli==2.0.1'], label='tty', progress=print)"
    env = {**os.environ, "ASSEMBLE_CACHE": str(tmp_path / "cache"), "TERM": "xterm"}
    env.pop("ASSEMBLE_INSTALLER", None)
    master, slave = pty.openpty()
    process = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=slave, env=env, cwd=ROOT)
    os.close(slave)
    terminal = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:
            break
        if not chunk:
            break
        terminal += chunk
    os.close(master)
    stdout = process.communicate(timeout=120)[0].decode()
    assert process.returncode == 0, stdout + terminal.decode(errors="replace")
    assert b"tomli" in terminal and b"Installed" in terminal  # uv's own report, on the terminal
    assert ("creating tty environment with uv" in stdout
            and not [line for line in stdout.splitlines() if line.startswith("  ")])
