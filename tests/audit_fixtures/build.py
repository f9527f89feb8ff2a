"""Compile the audit fixtures with the real toolchain and pack them into wheels.

C++ fixtures build against the headers and libraries of the project's torch 2.13.0 build
environment (the one `assemble build` uses); C fixtures against this interpreter's CPython
headers.  The first pytest-xdist worker builds them; the others wait and reuse them.
"""

from __future__ import annotations

import hashlib
import random
import subprocess
import sysconfig
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from filelock import FileLock

HERE = Path(__file__).resolve().parent
TORCH = "2.13.0"
PY_INCLUDE = sysconfig.get_paths()["include"]
LIMITED_39 = "-DPy_LIMITED_API=0x03090000"
LIMITED_311 = "-DPy_LIMITED_API=0x030B0000"
BLOB_BYTES = 24 << 20


@dataclass(frozen=True)
class Objects:
    stable: Path  # STABLE_TORCH_LIBRARY extension, min torch 2.13.0
    unstable: Path  # at:: / c10:: extension
    plain: Path  # limited-API extension without torch
    nonlimited: Path  # calls PyObject_Print, _PyObject_GetDictPtr
    newer: Path  # 3.11 limited API, to be shipped as cp39-abi3
    helper: Path  # bundled library: shim calls plus an unknown shim symbol
    big: Path  # the stable extension with 24 MiB of read-only data ahead of .dynamic

    @classmethod
    def under(cls, out: Path) -> Objects:
        return cls(
            stable=out / "stable_ops.abi3.so",
            unstable=out / "unstable_ops.abi3.so",
            plain=out / "plain.abi3.so",
            nonlimited=out / "nonlimited.abi3.so",
            newer=out / "newer.abi3.so",
            helper=out / "libshim_helper.so",
            big=out / "big_ops.abi3.so",
        )


@dataclass(frozen=True)
class Wheels:
    good: Path  # stable + plain + newer (3.11 API in a cp39-abi3 wheel) + bundled helper + big
    bad: Path  # unstable + non-limited


def _run(cmd: list[str]) -> None:
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{done.stderr}")


def _blob(path: Path, size: int) -> None:
    """Deterministic data that deflates to a mix of matches and literals (like device code)."""
    rng = random.Random(1234)
    pool = [rng.randbytes(1024) for _ in range(64)]
    with path.open("wb") as out:
        for _ in range(size // 1024):
            out.write(pool[rng.randrange(len(pool))] if rng.random() < 0.7 else rng.randbytes(1024))


def build_objects(torch_dir: Path, out: Path) -> Objects:
    objects = Objects.under(out)
    inc = [f"-I{PY_INCLUDE}", f"-I{torch_dir / 'include'}", f"-I{torch_dir / 'include/torch/csrc/api/include'}"]
    link = [f"-L{torch_dir / 'lib'}", "-ltorch", "-ltorch_cpu", "-lc10"]
    cxx = ["g++", "-std=c++20", "-O1", "-fPIC", "-shared", "-w", *inc]
    cc = ["gcc", "-O1", "-fPIC", "-shared", f"-I{PY_INCLUDE}"]
    blob, blob_obj = out / "blob.bin", out / "blob.o"
    _blob(blob, BLOB_BYTES)
    _run(["ld", "-r", "-b", "binary", "-o", str(blob_obj), str(blob)])
    _run(["objcopy", "--rename-section", ".data=.rodata,alloc,load,readonly,data,contents", str(blob_obj)])
    for cmd in (
        [*cxx, LIMITED_39, str(HERE / "stable_ops.cpp"), "-o", str(objects.stable), *link],
        [*cxx, LIMITED_39, str(HERE / "stable_ops.cpp"), str(blob_obj), "-o", str(objects.big), *link],
        [*cxx, LIMITED_39, str(HERE / "unstable_ops.cpp"), "-o", str(objects.unstable), *link],
        [*cxx, str(HERE / "shim_helper.cpp"), "-o", str(objects.helper), *link],
        [*cc, LIMITED_39, str(HERE / "plain.c"), "-o", str(objects.plain)],
        [*cc, str(HERE / "nonlimited.c"), "-o", str(objects.nonlimited)],
        [*cc, LIMITED_311, str(HERE / "newer.c"), "-o", str(objects.newer)],
    ):
        _run(cmd)
    blob.unlink()
    blob_obj.unlink()
    return objects


def make_wheel(path: Path, files: dict[str, Path | bytes]) -> Path:
    """A minimal wheel (deflated members, WHEEL and RECORD) holding ``files``; tags from its file name."""
    name, version, tag = path.name.removesuffix(".whl").split("-", 2)
    dist_info = f"{name}-{version}.dist-info"
    contents = {k: v if isinstance(v, bytes) else v.read_bytes() for k, v in files.items()}
    contents[f"{dist_info}/METADATA"] = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode()
    contents[f"{dist_info}/WHEEL"] = (f"Wheel-Version: 1.0\nGenerator: audit-tests\n"
                                      f"Root-Is-Purelib: false\nTag: {tag}\n").encode()
    record = [f"{k},sha256={hashlib.sha256(v).hexdigest()},{len(v)}" for k, v in contents.items()]
    contents[f"{dist_info}/RECORD"] = ("\n".join([*record, f"{dist_info}/RECORD,,"]) + "\n").encode()
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for member, data in contents.items():
            zf.writestr(member, data)
    return path


def build_once(torch_dir: Path, root: Path) -> tuple[Objects, Wheels]:
    """Objects and wheels under ``root`` (shared by all xdist workers), built once."""
    objects = Objects.under(root / "objects")
    wheels = Wheels(good=root / "good-1.0-cp39-abi3-linux_x86_64.whl", bad=root / "bad-1.0-cp39-abi3-linux_x86_64.whl")
    done = root / "done"
    with FileLock(str(root) + ".lock"):
        if not done.exists():
            (root / "objects").mkdir(parents=True, exist_ok=True)
            build_objects(torch_dir, root / "objects")
            make_wheel(wheels.good, {
                "good/__init__.py": b"",
                "good/stable_ops.abi3.so": objects.stable,
                "good/plain.abi3.so": objects.plain,
                "good/newer.abi3.so": objects.newer,
                "good/libs/libshim_helper.so": objects.helper,
                "good/big_ops.abi3.so": objects.big,
            })
            make_wheel(wheels.bad,
                       {"bad/unstable_ops.abi3.so": objects.unstable, "bad/nonlimited.abi3.so": objects.nonlimited})
            done.touch()
    return objects, wheels


@pytest.fixture(scope="session", name="audit_build")
def audit_build_fixture(tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> tuple[Objects, Wheels]:
    """Compiled objects and wheels, once per test run (xdist workers share the first one's)."""
    from assembler.toolchain.torchenv import ensure_build_env

    base = tmp_path_factory.getbasetemp()
    root = (base if worker_id == "master" else base.parent) / "audit-fixtures"
    return build_once(ensure_build_env(TORCH).torch_dir, root)
