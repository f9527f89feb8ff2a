"""A wheel that attacks `assemble verify` (issue 29, item 6): its code runs in the probe, with the
cached torch environment's interpreter. A real wheel whose .pth (run when the probe processes the
wheel's site directory) writes a .pth into the cached environment's site-packages, which every
later verify would run, then forges the probe's result on every channel it can reach (stdout,
the files named on the probe's command line, every descriptor) and exits 0. Before the fix that
verify said PASS and the poison ran in every later verify sharing the cache.

Real torch 2.13.0 (CPU) in a cache of the test's own (the environment is made, broken and made
again here); the CLI as users run it."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from assembler.toolchain.venv import changed_files, recorded_files, site_packages
from tests.conftest import run_assemble
from tests.verify_fixtures.demo import write_wheel

pytestmark = pytest.mark.integration

TORCH = "2.13.0"

PAYLOAD = '''\
"""Runs from the wheel's evil.pth inside the verify probe."""
import json, os, sys, sysconfig

MODE, WITNESS = {mode!r}, {witness!r}
purelib = sysconfig.get_paths()["purelib"]  # the cached environment's site-packages
if MODE == "poison":
    try:
        with open(os.path.join(purelib, "zz_poison.pth"), "w") as handle:
            handle.write(f"import os; open({{WITNESS!r}}, 'a').write('poison ran\\\\n')\\n")
    except OSError as error:
        sys.stderr.write(f"poison refused: {{error}}\\n")
elif MODE == "rewrite":  # the same bytes written in place, the mtime put back: only the ctime tells
    path = os.path.join(purelib, "torch", "version.py")
    before = os.stat(path)
    try:
        with open(path, "r+b") as handle:
            data = handle.read()
            handle.seek(0)
            handle.write(data)
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    except OSError as error:
        sys.stderr.write(f"rewrite refused: {{error}}\\n")

import torch

deps = []
for arg in sys.argv[1:]:  # where a probe took its plan from: a file named on its command line
    try:
        with open(arg) as handle:
            deps = json.load(handle)["deps"]
        break
    except Exception:
        pass
lines = [{{"event": "env", "torch": torch.__version__, "cuda": None, "gpu": False, "python": "3", "torch_lib": ""}}]
for dep in deps:
    for ext in dep["extensions"]:
        lines.append({{"event": "check", "dep": dep["name"], "kind": "load", "target": ext["path"], "status": "PASS",
                      "detail": "import"}})
    lines.append({{"event": "done", "dep": dep["name"]}})
lines.append({{"event": "end"}})
text = "".join(json.dumps(line) + "\\n" for line in lines)
sys.stdout.write(text)
sys.stdout.flush()
for arg in sys.argv[1:]:
    if arg.endswith(".jsonl"):  # where a probe wrote its results
        with open(arg, "a") as handle:
            handle.write(text)
for fd in range(3, 256):  # any inherited descriptor: a result pipe among them
    try:
        os.write(fd, text.encode())
    except OSError:
        pass
os._exit(0)
'''


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cache of this module's own: its verify environment is poisoned, removed and made again."""
    return tmp_path_factory.mktemp("hostile-verify-cache")


@pytest.fixture(scope="module")
def library(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """A real shared object that loads anywhere (dlopen through torch.ops.load_library)."""
    out = tmp_path_factory.mktemp("lib")
    (out / "ops.c").write_text("int hostile_verify_answer(void) { return 42; }\n")
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(out / "ops.so"), str(out / "ops.c")], check=True)
    return (out / "ops.so").read_bytes()


def wheel(directory: Path, library: bytes, mode: str | None = None, witness: Path | None = None) -> Path:
    """The wheel: an op library, and with ``mode`` the .pth and the module that attack."""
    files = {"hostile/__init__.py": b"", "hostile/_ops.so": library}
    if mode is not None:
        files["evil.pth"] = b"import hostile_boot\n"
        files["hostile_boot.py"] = PAYLOAD.format(mode=mode, witness=str(witness)).encode()
    return write_wheel(directory, "hostile", files)


def verify(path: Path, cache: Path, tmp_path: Path,
           sandbox: bool = True) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    env = {"ASSEMBLE_CACHE": str(cache), "ASSEMBLE_VERIFY_SANDBOX": "1" if sandbox else "0"}
    result = run_assemble("verify", str(path), "--torch", TORCH, "--json", cwd=tmp_path, env=env)
    return result, json.loads(result.stdout)


def environment(cache: Path) -> Path | None:
    found = [p for p in (cache / "venvs").glob(f"verify-torch{TORCH}-*") if p.is_dir()]
    return found[0] if found else None


def assert_pristine(cache: Path) -> None:
    """The cached environment, if there is one, is as its manifest says and holds no poison."""
    env = environment(cache)
    if env is None:
        return
    recorded = recorded_files(env)
    assert recorded is not None
    assert changed_files(env, recorded) == []
    assert not (site_packages(env) / "zz_poison.pth").exists()


@pytest.mark.parametrize("sandbox", [True, False], ids=["sandbox", "no-sandbox"])
def test_a_wheel_that_poisons_the_environment_and_forges_its_result_fails(
    library: bytes, cache: Path, tmp_path: Path, sandbox: bool,
) -> None:
    witness = tmp_path / "witness"
    hostile = wheel(tmp_path / "hostile", library, "poison", witness)
    result, report = verify(hostile, cache, tmp_path, sandbox)
    assert result.returncode == 1, result.stdout + result.stderr
    assert not report["ok"]
    cells = report["results"]
    assert cells and all(cell["status"] == "FAIL" for cell in cells), cells
    reasons = " | ".join(cell["reason"] for cell in cells)
    sandboxed = "paths read-only" in result.stderr
    if not sandbox:
        assert not sandboxed and "without a read-only view (ASSEMBLE_VERIFY_SANDBOX=0)" in result.stderr
    if sandboxed:  # the write was refused: nothing to repair, and the forgery still fails the run
        assert "result channel held" in reasons, reasons
    else:  # the write happened: found, the run FAILs saying so, and the environment is removed
        assert "changed while the wheel ran in it" in reasons and "zz_poison.pth" in reasons, reasons
        assert environment(cache) is None, "the poisoned environment was kept"
        assert "removed the changed environment" in result.stderr
    assert_pristine(cache)

    clean, report = verify(wheel(tmp_path / "clean", library), cache, tmp_path, sandbox)
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert [cell["status"] for cell in report["results"]] == ["PASS"]
    assert not witness.exists(), "the poison ran in a later verify"
    assert_pristine(cache)


def test_a_file_rewritten_in_place_with_its_mtime_put_back_is_found(library: bytes, cache: Path,
                                                                    tmp_path: Path) -> None:
    """Same size, same mtime: the ctime, which no process can set back, still differs."""
    hostile = wheel(tmp_path / "hostile", library, "rewrite", tmp_path / "witness")
    result, report = verify(hostile, cache, tmp_path, sandbox=False)
    assert result.returncode == 1, result.stdout + result.stderr
    reasons = " | ".join(cell["reason"] for cell in report["results"])
    assert "changed lib/python3" in reasons and "torch/version.py" in reasons, reasons
    assert environment(cache) is None


def test_an_environment_changed_between_runs_is_made_again(library: bytes, cache: Path, tmp_path: Path) -> None:
    """A poison left by a run that was killed before its check (or by anything else): the next
    verify compares the environment with its manifest before using it, and makes it again."""
    clean = wheel(tmp_path / "clean", library)
    verify(clean, cache, tmp_path)
    env = environment(cache)
    assert env is not None
    witness = tmp_path / "witness"
    (site_packages(env) / "zz_poison.pth").write_text(f"import os; open({str(witness)!r}, 'a').write('poison "
                                                      "ran\\n')\n")
    result, report = verify(clean, cache, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "changed since it was made (added lib/python3" in result.stderr and "zz_poison.pth" in result.stderr
    assert [cell["status"] for cell in report["results"]] == ["PASS"]
    assert not witness.exists(), "a poisoned environment was used"
    assert_pristine(cache)
