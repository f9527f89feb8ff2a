"""The verify demonstration: op libraries compiled once against torch 2.13.0, packed into wheels.

``stable_ops.cpp`` uses only the Stable ABI (TORCH_TARGET_VERSION set, abi3 module);
``unstable_ops.cpp`` calls at::cpu::cholesky_out, a libtorch_cpu symbol that torch 2.14.1 no
longer exports; ``cuda_ops.cpp`` is CUDA-only (links libcudart, registers for CUDA).
"""

from __future__ import annotations

import base64
import hashlib
import os
import subprocess
import sysconfig
import zipfile
from pathlib import Path

import filelock

SOURCES = Path(__file__).resolve().parent
STABLE_TARGET = "-DTORCH_TARGET_VERSION=0x020A000000000000"  # torch 2.10, as the example bundle
CUDA_HOME = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda-13.0"))

MANIFEST = '''[bundle]
name = "verifydemo"
version = "1.0.0"
python-abi = "3.9"
verify-torch = ["2.13.0", "2.14.1"]

[deps.demo-stable]
upstream = "https://example.invalid/demo-stable.git"
commit = "1111111111111111111111111111111111111111"
[deps.demo-stable.install]
"verifydemo/**" = ""
[deps.demo-stable.verify]
ops = ["verifydemo::scaled_add(Tensor a, Tensor b, float alpha) -> Tensor"]
smoke = """
import torch
import verifydemo

a, b = torch.randn(3, 4), torch.randn(3, 4)
torch.testing.assert_close(torch.ops.verifydemo.scaled_add(a, b, 0.5), a + 0.5 * b)
"""

[deps.demo-unstable]
upstream = "https://example.invalid/demo-unstable.git"
commit = "2222222222222222222222222222222222222222"
[deps.demo-unstable.install]
"verifydemo_unstable/**" = ""
[deps.demo-unstable.verify]
ops = ["verifydemo_unstable::cholesky_lower(Tensor a) -> Tensor"]
smoke = """
m = torch.randn(4, 4, dtype=torch.float64)
spd = m @ m.T + 4 * torch.eye(4, dtype=torch.float64)
torch.testing.assert_close(torch.ops.verifydemo_unstable.cholesky_lower(spd), torch.linalg.cholesky(spd))
"""

[deps.demo-cuda]
upstream = "https://example.invalid/demo-cuda.git"
commit = "3333333333333333333333333333333333333333"
[deps.demo-cuda.install]
"verifydemo_cuda/**" = ""
[deps.demo-cuda.verify]
ops = ["verifydemo_cuda::device_copy(Tensor x) -> Tensor"]
requires-cuda = true
smoke = """
x = torch.randn(8, device="cuda")
torch.testing.assert_close(torch.ops.verifydemo_cuda.device_copy(x), x)
"""
'''


def compile_flags(torch_dir: Path, name: str) -> list[str]:
    common = ["-std=c++20", "-O1", "-shared", "-fPIC", "-fvisibility=hidden", f"-I{torch_dir / 'include'}"]
    link = [f"-L{torch_dir / 'lib'}", "-ltorch_cpu"]
    if name == "stable_ops":
        return [*common, STABLE_TARGET, "-DPy_LIMITED_API=0x03090000", f"-I{sysconfig.get_paths()['include']}", *link]
    if name == "cuda_ops":
        return [*common, STABLE_TARGET, f"-I{CUDA_HOME / 'include'}", *link, f"-L{CUDA_HOME / 'lib64'}", "-lcudart"]
    return [*common, f"-I{torch_dir / 'include/torch/csrc/api/include'}", *link, "-lc10"]


def compiled(cache: Path, torch_dir: Path, torch_version: str, name: str) -> Path:
    """``<name>.cpp`` built into a shared object, once per (source, flags, torch) in ``cache``."""
    source = SOURCES / f"{name}.cpp"
    flags = compile_flags(torch_dir, name)
    key = hashlib.sha256("\0".join([source.read_text(), torch_version, *flags]).encode()).hexdigest()[:16]
    output = cache / f"{name}-{key}.so"
    with filelock.FileLock(str(cache / f"{name}.lock")):
        if not output.is_file():
            partial = output.with_suffix(f".tmp{os.getpid()}")
            subprocess.run(["g++", str(source), "-o", str(partial), *flags], check=True, capture_output=True, text=True)
            os.replace(partial, output)
    return output


def write_wheel(directory: Path, name: str, files: dict[str, bytes]) -> Path:
    """A minimal, valid cp39-abi3 wheel holding ``files`` (wheel path -> bytes)."""
    version = "1.0.0"
    dist_info = f"{name}-{version}.dist-info"
    members = dict(files)
    members[f"{dist_info}/METADATA"] = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode()
    members[f"{dist_info}/WHEEL"] = (
        b"Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: false\nTag: cp39-abi3-linux_x86_64\n"
    )
    record = []
    for path, data in members.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(data)}")
    record.append(f"{dist_info}/RECORD,,")
    members[f"{dist_info}/RECORD"] = ("\n".join(record) + "\n").encode()
    directory.mkdir(parents=True, exist_ok=True)
    wheel = directory / f"{name}-{version}-cp39-abi3-linux_x86_64.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as archive:
        for path, data in sorted(members.items()):
            info = zipfile.ZipInfo(path, date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = (0o755 if path.endswith(".so") else 0o644) << 16
            archive.writestr(info, data, zipfile.ZIP_DEFLATED)
    return wheel


def package_files(libraries: dict[str, Path]) -> dict[str, bytes]:
    """The wheel layout for the compiled libraries: one package each."""
    files: dict[str, bytes] = {}
    if "stable_ops" in libraries:
        files["verifydemo/__init__.py"] = b"from verifydemo import _C  # noqa: F401  (registers torch.ops.verifydemo)\n"
        files["verifydemo/_C.abi3.so"] = libraries["stable_ops"].read_bytes()
    if "unstable_ops" in libraries:
        files["verifydemo_unstable/__init__.py"] = b""
        files["verifydemo_unstable/libunstable_ops.so"] = libraries["unstable_ops"].read_bytes()
    if "cuda_ops" in libraries:
        files["verifydemo_cuda/__init__.py"] = b""
        files["verifydemo_cuda/libcuda_ops.so"] = libraries["cuda_ops"].read_bytes()
    return files
