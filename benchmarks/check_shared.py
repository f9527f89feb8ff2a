"""`assemble check` the old way (every unit scans itself: ``--every-unit``) against the header-speed
way (units with one directive skeleton share one scan, check.share), side by side in one run,
on the dependencies of a workspace: wall and CPU (this process's children, the compilers) of
each, the ratio, and whether every unit's verdict and findings agree.

With no workspace it generates one: a copy of examples/stable-abi with 200 extra C++ units
(kernel instantiations, as generated kernel libraries ship them). For FlashAttention, point it
at a local workspace whose [mirrors] reach local snapshots (never committed):

    python benchmarks/check_shared.py [-C WORKSPACE] [DEP ...] [--jobs 2] [--preprocess-only]
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from assembler.check.evidence import record_path  # noqa: E402
from assembler.check.run import CheckOptions, run_check  # noqa: E402
from assembler.workspace import open_workspace  # noqa: E402

INSTANCE = '// generated {n}\n\n#include "launch.h"\n\n#ifndef DISABLE_{n}\ntemplate void run<{n}>();\n#endif\n'
LAUNCH = "#pragma once\n#include <torch/csrc/stable/tensor.h>\n#include <torch/headeronly/core/ScalarType.h>\ntemplate <int N> void run() {}\n"


def _generated(root: Path, units: int) -> tuple[Path, list[str]]:
    from tests.build_support import example_copy

    ws = example_copy(root / "ws")
    workspace = open_workspace(ws)
    run_check(workspace, ["vecadd"], CheckOptions(syntax=False))  # creates forks/vecadd
    gen = ws / "forks" / "vecadd" / "csrc" / "gen"
    gen.mkdir()
    (gen / "launch.h").write_text(LAUNCH)
    for n in range(units):
        (gen / f"inst_{n}.cpp").write_text(INSTANCE.format(n=n))
    manifest = ws / "deps.toml"
    manifest.write_text(manifest.read_text().replace('sources = ["csrc/add_scaled.cpp"]', 'sources = ["csrc/add_scaled.cpp", "csrc/gen/*.cpp"]'))
    return ws, ["vecadd"]


def _children_cpu() -> float:
    """CPU of the compilers (waited-for children) and of this process (reading their output)."""
    return sum(usage.ru_utime + usage.ru_stime for usage in (resource.getrusage(resource.RUSAGE_CHILDREN),
                                                             resource.getrusage(resource.RUSAGE_SELF)))


def _one(ws: Path, deps: list[str], options: CheckOptions) -> tuple[float, float, dict[str, dict[str, object]], int]:
    workspace = open_workspace(ws)
    for dep in workspace.manifest.select(deps):  # no stored result: both ways scan
        record_path(workspace, dep.name).unlink(missing_ok=True)
    cpu, started = _children_cpu(), time.monotonic()
    report = run_check(workspace, deps, options, note=lambda text: print(f"  {text}", file=sys.stderr))
    wall, cpu = time.monotonic() - started, _children_cpu() - cpu
    findings = {f"{d.dep}:{u.source}": {k: v for k, v in u.to_json().items() if k not in ("seconds", "scanned_as")}
                for d in report.deps for u in d.units}
    borrowed = sum(u.scanned_as is not None for d in report.deps for u in d.units)
    for d in report.deps:
        if d.error is not None:
            raise SystemExit(f"{d.dep}: {d.error.message}")
    return wall, cpu, findings, borrowed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-C", dest="workspace", type=Path, help="workspace (default: a generated one)")
    parser.add_argument("deps", nargs="*")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--units", type=int, default=200, help="generated units (without -C)")
    parser.add_argument("--preprocess-only", action="store_true", help="no -fsyntax-only pass on clean C++ units")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="check-shared-") as tmp:
        ws, deps = (args.workspace, args.deps) if args.workspace else _generated(Path(tmp), args.units)
        rows = []
        for label, share in (("shared scans (new)", True), ("every unit (old)", False)):  # new first: it gets the colder caches
            print(f"{label} ...", file=sys.stderr)
            options = CheckOptions(jobs=args.jobs, syntax=not args.preprocess_only, share=share)
            rows.append((label, *_one(ws, deps, options)))
            wall, cpu, _, shared = rows[-1][1:]
            print(f"  {label}: wall {wall:.1f} s, CPU {cpu:.1f} s, {shared} units answered by another's scan", file=sys.stderr)
    (_, new_wall, new_cpu, new_findings, _), (_, old_wall, old_cpu, old_findings, _) = rows
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"deps: {' '.join(deps) or 'all'}, {len(old_findings)} units, --jobs {args.jobs}, load average {load}")
    for label, wall, cpu, _, shared in rows:
        print(f"  {label:20} wall {wall:8.1f} s   CPU {cpu:8.1f} s   units answered by another's scan: {shared}")
    print(f"  ratio (old / new): wall {old_wall / new_wall:.1f}x, CPU {old_cpu / max(new_cpu, 1e-9):.1f}x")
    same = old_findings == new_findings
    print(f"  every verdict and finding identical: {same}")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
