"""`assemble audit` of the public vllm 0.33.0 wheel vs abi3audit vs pip install + torch-abi-audit.

Downloads the wheel once (``pip download --no-deps --only-binary=:all: vllm==0.33.0``, 336 MB)
into ``$ASSEMBLE_CACHE/wheels`` (default: the user cache), then times in one run:

1. ``assemble audit --json WHEEL`` (the CLI, fresh process each time; median of --rounds),
   plus the library call ``audit_paths`` the build gate uses;
2. ``abi3audit --report WHEEL`` (unpacks every shared object);
3. ``pip install --no-deps --target DIR WHEEL`` then ``torch-abi-audit DIR/vllm`` (its only way in).

It checks that the verdicts agree (10 torch-using extensions STABLE, min torch 2.13.0 set by
_qutlass_C, abi3audit's Python-version findings) and that the in-place read gives exactly what
pyelftools reads from the installed files.  Target: the CLI median under 0.5 s on 2 cores.

    python benchmarks/audit_vllm.py [--rounds 7]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from assembler.audit import audit_paths  # noqa: E402
from assembler.audit.elf import read_dynamic  # noqa: E402
from assembler.audit.member import MemberInfo, open_member  # noqa: E402
from assembler.cache import cache_root  # noqa: E402

WHEEL = "vllm-0.33.0-cp38-abi3-manylinux_2_28_x86_64.whl"
BIN = Path(sys.executable).parent


def fetch() -> Path:
    wheels = cache_root() / "wheels"
    path = wheels / WHEEL
    if not path.exists():
        wheels.mkdir(parents=True, exist_ok=True)
        print(f"downloading {WHEEL} into {wheels} (once)", flush=True)
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "vllm==0.33.0", "-d",
             str(wheels)],
            check=True,
        )
    return path


def timed(cmd: list[str]) -> tuple[float, float, subprocess.CompletedProcess[str]]:
    """Wall seconds, peak RSS (MiB) and the result of one command."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        result = subprocess.CompletedProcess(cmd, proc.returncode, out.read().decode(), err.read().decode())
    return wall, usage.ru_maxrss / 1024, result


def pyelftools_view(path: Path) -> tuple[tuple, tuple]:
    from elftools.elf.elffile import ELFFile

    with path.open("rb") as f:
        elf = ELFFile(f)
        symbols = tuple(
            (s.name, s["st_shndx"] != "SHN_UNDEF", s["st_info"]["bind"] == "STB_LOCAL")
            for i, s in enumerate(elf.get_section_by_name(".dynsym").iter_symbols())
            if i
        )
        needed = tuple(t.needed for t in elf.get_section_by_name(".dynamic").iter_tags()
                       if t.entry.d_tag == "DT_NEEDED")
    return symbols, needed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    wheel = fetch()
    cores = len(os.sched_getaffinity(0))
    print(f"{wheel.name}: {wheel.stat().st_size / 2**20:.0f} MiB, {cores} cores", flush=True)
    problems: list[str] = []

    # 1. assemble audit: the CLI (fresh process each round) and the library call
    cli = [str(BIN / "assemble"), "audit", "--json", str(wheel)]
    timed(cli)  # warm the page cache and the bytecode cache
    runs = [timed(cli) for _ in range(args.rounds)]
    ours_s = statistics.median(r[0] for r in runs)
    ours_rss = max(r[1] for r in runs)
    ours = json.loads(runs[-1][2].stdout)
    lib = []
    for _ in range(args.rounds):
        start = time.perf_counter()
        audit_paths([wheel])
        lib.append(time.perf_counter() - start)

    # 2. abi3audit on the wheel
    abi3_s, _, done = timed([str(BIN / "abi3audit"), "--report", str(wheel)])
    [spec] = json.loads(done.stdout)["specs"].values()
    abi3 = {item["name"]: item["result"] for item in spec["wheel"]}

    # 3. pip install --target, then torch-abi-audit
    with tempfile.TemporaryDirectory() as tmp:
        target = Path(tmp) / "site"
        pip_s, _, done = timed(
            [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(target), str(wheel)]
        )
        if done.returncode:
            raise SystemExit(f"pip install failed:\n{done.stderr}")
        taa_s, _, done = timed([str(BIN / "torch-abi-audit"), str(target / "vllm"), "--json"])
        taa = json.loads(done.stdout)

        # exactness: the in-place read against pyelftools on the installed files
        exact = 0
        with zipfile.ZipFile(wheel) as zf:
            sos = [i for i in zf.infolist() if i.filename.endswith(".so")]
        for i in sos:
            src = open_member(MemberInfo(str(wheel), i.filename, i.header_offset, i.compress_type, i.compress_size,
                                         i.file_size))
            info = read_dynamic(src)
            mine = (tuple(tuple(s) for s in info.symbols), info.needed)
            if mine == pyelftools_view(target / i.filename):
                exact += 1
            else:
                problems.append(f"{i.filename}: in-place read differs from pyelftools on the installed file")

    # verdicts
    theirs = {}
    for e in taa["extensions"] + taa["bundled_libs"]:
        t = e["torch"]
        verdict = "STABLE" if t["stable"] else "UNSTABLE" if t["uses_torch"] else "NO-TORCH"
        theirs[Path(e["path"]).name] = (verdict, t["stable_shim_count"], len(t["unstable_symbols"]),
                                        t["min_torch_version"])
    mine_t = {Path(e["path"]).name: (e["torch_abi"], e["stable_shim"], e["unstable"], e["min_torch"])
              for e in ours["extensions"]}
    if mine_t != theirs:
        problems.append("torch verdicts differ from torch-abi-audit: "
                        f"{sorted(set(mine_t.items()) ^ set(theirs.items()))}")
    stable = [n for n, v in mine_t.items() if v[0] == "STABLE"]
    qutlass = next(e for e in ours["extensions"] if e["path"].endswith("_qutlass_C.abi3.so"))
    if (len(stable) != 10 or ours["torch_abi"] != "STABLE" or ours["min_torch"] != "2.13.0"
        or qutlass["min_torch"] != "2.13.0"):
        problems.append("expected 10 STABLE extensions and min torch 2.13.0 set by _qutlass_C")
    their_findings = {n: r["future_abi3_objects"] for n, r in abi3.items() if not r["is_abi3_baseline_compatible"]}
    our_findings = {Path(e["path"]).name: e["newer_than_tag"] for e in ours["extensions"] if e["newer_than_tag"]}
    if our_findings != their_findings or len(our_findings) != 3:
        problems.append(f"abi3 findings differ: ours {our_findings}, abi3audit {their_findings}")
    if any(r["non_abi3_symbols"] for r in abi3.values()) or ours["cpython_abi"] != "ABI3-MISMATCH":
        problems.append("expected no non-abi3 symbols and an ABI3-MISMATCH verdict")

    slow = pip_s + taa_s
    print()
    print(f"assemble audit (CLI)         median {ours_s:6.3f} s  (min {min(r[0] for r in runs):.3f}, {args.rounds} "
          "runs, "
          f"peak RSS {ours_rss:.0f} MiB)")
    print(f"  audit_paths (library)      median {statistics.median(lib):6.3f} s")
    print(f"abi3audit on the wheel              {abi3_s:6.3f} s   {abi3_s / ours_s:5.1f}x slower")
    print(f"pip install --target + torch-abi-audit {slow:6.3f} s   {slow / ours_s:5.1f}x slower "
          f"(pip {pip_s:.3f} s + torch-abi-audit {taa_s:.3f} s)")
    print()
    print(f"torch: {len(stable)} STABLE extensions, min torch {ours['min_torch']} set by _qutlass_C "
          f"({', '.join(qutlass['min_torch_symbols'])}); agrees with torch-abi-audit: {mine_t == theirs}")
    print(f"CPython: {ours['cpython_abi']}; Python-version findings {sorted(our_findings)}; "
          f"agree with abi3audit: {our_findings == their_findings}")
    print(f"in-place read == pyelftools on the installed files: {exact}/{len(sos)}")
    print(f"target < 0.5 s: {'met' if ours_s < 0.5 else 'MISSED'}")
    for line in problems:
        print(f"PROBLEM: {line}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
