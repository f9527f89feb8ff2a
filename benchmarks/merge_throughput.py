"""Merge throughput against plain `cp -r` of the same bytes (target: at least half of cp's speed).

Input: the 13 extension modules of the public vllm 0.33.0 wheel (664 MB of ELF, 291 MB
deflated), downloaded once into ``<cache>/bench/vllm-0.33.0/`` (the cache is $ASSEMBLE_CACHE or
the user cache; benchmarks/audit_vllm.py uses the same wheel) and split once into one fake
artifact per module, in both payload forms the merge reads:

* packed: ``<dep>/files.zip`` holding the module's deflated bytes, as `assemble build` stores
  them: the merge copies the compressed members and takes their digests from the RECORD;
* loose: ``<dep>/files/...``: the merge deflates every byte (shown for comparison; slow by
  nature: zlib runs at tens of MB/s per core).

Each round times `cp -r` of the artifact directories and a merge of the same artifacts into a
wheel, on the same file system, page cache warm, no fsync on either side. The platform verdict
is cached after the first merge of these inputs; the cold merge (auditwheel parsing 664 MB of
symbol tables) is timed once and printed separately.

    python benchmarks/merge_throughput.py [--rounds 5] [--jobs 2] [--skip-loose] [--levels]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from assembler.cache import cache_root  # noqa: E402
from assembler.manifest import load_manifest  # noqa: E402
from assembler.wheel.artifact import FILES_DIR, PACK_NAME, PACK_RECORD, archive_payload  # noqa: E402
from assembler.wheel.merge import merge_wheel  # noqa: E402
from assembler.wheel.metadata import record_text  # noqa: E402
from assembler.wheel.platform import DEFAULT_EXCLUDES  # noqa: E402
from assembler.wheel.writer import CHUNK, WINDOW, ZIP_EPOCH, ReproducibleZip, _deflate_chunk  # noqa: E402

VLLM = "0.33.0"
COMMIT = "0" * 40
tags: set[str] = set()  # platform tags the merges chose


def bench_dir() -> Path:
    """Shared with benchmarks/audit_vllm.py: the wheel is downloaded once per cache."""
    return cache_root() / "bench" / f"vllm-{VLLM}"


def vllm_wheel() -> Path:
    directory = bench_dir()
    found = sorted(directory.glob(f"vllm-{VLLM}-*.whl"))
    if not found:
        directory.mkdir(parents=True, exist_ok=True)
        print(f"downloading vllm=={VLLM} into {directory} ...", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", f"vllm=={VLLM}",
                        "-d", str(directory)], check=True)
        found = sorted(directory.glob(f"vllm-{VLLM}-*.whl"))
    return found[0]


def dep_name(path: str) -> str:
    return path.rsplit("/", 1)[-1].split(".", 1)[0].strip("_").lower().replace("_", "-")


def make_artifacts(wheel: Path, root: Path) -> tuple[int, int]:
    """One packed and one loose artifact per extension module; returns (bytes, deflated bytes)."""
    packed, loose = root / "packed", root / "loose"
    members = [m for m in archive_payload(wheel) if m.relpath.endswith(".so")]
    done = root / "done.json"
    if done.is_file():
        return tuple(json.loads(done.read_text()))  # type: ignore[return-value]
    shutil.rmtree(root, ignore_errors=True)
    for form in (packed, loose):
        form.mkdir(parents=True)
    with zipfile.ZipFile(wheel) as archive:
        for item in members:
            assert item.member is not None
            dep = dep_name(item.relpath)
            record = {"dep": dep, "commit": COMMIT, "source": "https://github.com/vllm-project/vllm", "patches": [],
                      "key": dep, "toolchain": {"cuda": "13.0", "torch": "2.10.0", "python_abi": "3.8"},
                      "archs": [], "build_seconds": 0}
            for form in (packed, loose):
                (form / dep).mkdir()
                (form / dep / "artifact.json").write_text(json.dumps(record))
            with ReproducibleZip(packed / dep / PACK_NAME, epoch=ZIP_EPOCH) as pack:
                pack.copy_member(item.relpath, item.member, item.sha256)
                pack.write_bytes(PACK_RECORD, record_text(pack.written, PACK_RECORD).encode())
            target = loose / dep / FILES_DIR / item.relpath
            target.parent.mkdir(parents=True)
            with archive.open(item.relpath) as src, target.open("wb") as dst:
                shutil.copyfileobj(src, dst, CHUNK)
    deps = sorted(dep_name(m.relpath) for m in members)
    manifest = ['[bundle]\nname = "vllm-kernels"\nversion = "0.33.0"\npython-abi = "3.8"\n']
    manifest += [f'[deps.{dep}]\nupstream = "https://github.com/vllm-project/vllm"\ncommit = "{COMMIT}"\n'
                 for dep in deps]
    (root / "deps.toml").write_text("\n".join(manifest))
    sizes = (sum(m.size for m in members), sum(m.member.compress_size for m in members if m.member))
    done.write_text(json.dumps(sizes))
    return sizes


def cp_r(source: Path, scratch: Path) -> float:
    target = scratch / "cp"
    started = time.perf_counter()
    subprocess.run(["cp", "-r", str(source), str(target)], check=True)
    seconds = time.perf_counter() - started
    shutil.rmtree(target)
    return seconds


@contextmanager
def empty_cache(path: Path) -> Iterator[None]:
    """Point the assembler cache at an empty directory: nothing cached, auditwheel runs."""
    saved = os.environ.get("ASSEMBLE_CACHE")
    os.environ["ASSEMBLE_CACHE"] = str(path)
    try:
        yield
    finally:
        if saved is None:
            del os.environ["ASSEMBLE_CACHE"]
        else:
            os.environ["ASSEMBLE_CACHE"] = saved


def merge_once(root: Path, form: str, scratch: Path, jobs: int) -> tuple[float, int]:
    """Seconds for one merge, and the wheel's size. vllm's extensions also need libnvrtc,
    which torch's CUDA wheels bring: excluded like the defaults."""
    manifest = load_manifest(root / "deps.toml")
    out = scratch / "wheel"
    started = time.perf_counter()
    result = merge_wheel(manifest, [root / form], out, "13.0", jobs=jobs, exclude=(*DEFAULT_EXCLUDES, "libnvrtc*"))
    seconds = time.perf_counter() - started
    assert result.platform.portable, result.warnings
    size = result.size
    tags.add(result.platform.tag)
    shutil.rmtree(out)
    return seconds, size


def levels(root: Path) -> None:
    """Deflate speed and ratio per zlib level with the merge's own chunking, on one core."""
    files = sorted((root / "loose").rglob("*.so"))
    data = [f.read_bytes()[: 64 << 20] for f in files]  # first 64 MB of each: keeps this under a minute
    total = sum(len(d) for d in data)
    print(f"\nzlib level, on {total / 1e6:.0f} MB (first 64 MB of each module), one core:")
    for level in (1, 3, 6, 9):
        started, out = time.perf_counter(), 0
        for blob in data:
            for start in range(0, len(blob), CHUNK):
                history = blob[max(0, start - WINDOW):start]
                out += len(_deflate_chunk(level, history, blob[start:start + CHUNK], start + CHUNK >= len(blob)))
        seconds = time.perf_counter() - started
        print(f"  level {level}: {total / seconds / 1e6:6.1f} MB/s, size {out / total:.3f} of the input")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--jobs", type=int, default=2, help="deflate threads for loose files")
    parser.add_argument("--skip-loose", action="store_true", help="do not time the (slow) loose-file merge")
    parser.add_argument("--levels", action="store_true", help="also measure zlib levels 1, 3, 6, 9")
    args = parser.parse_args()

    wheel = vllm_wheel()
    root = bench_dir() / "merge-artifacts"
    size, deflated = make_artifacts(wheel, root)
    modules = len(list((root / "packed").iterdir()))
    print(f"input: {modules} extension modules of {wheel.name}: {size / 1e6:.1f} MB, {deflated / 1e6:.1f} MB deflated")

    with tempfile.TemporaryDirectory(dir=root, prefix="scratch-") as tmp:
        scratch = Path(tmp)
        with empty_cache(scratch / "empty-cache"):
            cold, _ = merge_once(root, "packed", scratch, args.jobs)
        merge_once(root, "packed", scratch, args.jobs)  # fills the real cache's platform verdict
        cps, merges = [], []
        for _ in range(args.rounds):
            cps.append(cp_r(root / "packed", scratch))
            seconds, wheel_size = merge_once(root, "packed", scratch, args.jobs)
            merges.append(seconds)
        cp_s, merge_s = statistics.median(cps), statistics.median(merges)
        ratio = cp_s / merge_s
        print(f"\npacked artifacts (median of {args.rounds}):")
        print(f"  cp -r            {cp_s:7.3f} s  {deflated / cp_s / 1e6:7.0f} MB/s")
        print(f"  assemble merge   {merge_s:7.3f} s  {deflated / merge_s / 1e6:7.0f} MB/s   wheel "
              f"{wheel_size / 1e6:.1f} MB")
        print(f"  merge speed / cp speed = {ratio:.2f}  (target >= 0.5: {'met' if ratio >= 0.5 else 'NOT met'})")
        print(f"  first merge of these inputs (auditwheel, uncached): {cold:.2f} s; platform {', '.join(sorted(tags))}")

        if not args.skip_loose:
            cp_loose = cp_r(root / "loose", scratch)
            loose_s, _ = merge_once(root, "loose", scratch, args.jobs)
            print(f"\nloose artifacts (one round, deflate level 6 on {args.jobs} threads):")
            print(f"  cp -r            {cp_loose:7.3f} s  {size / cp_loose / 1e6:7.0f} MB/s")
            print(f"  assemble merge   {loose_s:7.3f} s  {size / loose_s / 1e6:7.0f} MB/s")
            print(f"  merge speed / cp speed = {cp_loose / loose_s:.2f}")
    if args.levels:
        levels(root)
    return 0


if __name__ == "__main__":
    sys.exit(main())
