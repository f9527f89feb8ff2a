"""`assemble check` the old way (every unit scans itself: ``--every-unit``) against the header-speed
way (units with one directive skeleton share one scan, check.share), side by side in one run,
on the dependencies of a workspace: wall and CPU (this process's children, the compilers) of
each, the ratio, and whether every unit's verdict and findings agree.

With no workspace it generates one: a copy of examples/stable-abi with 200 extra C++ units
(kernel instantiations, as generated kernel libraries ship them). For FlashAttention, point it
at a local workspace whose [mirrors] reach local snapshots (never committed):

    python benchmarks/check_shared.py [-C WORKSPACE] [DEP ...] [--jobs 2] [--preprocess-only]
        [--against SRC] [--no-every-unit]

``--against SRC`` adds a third row: the shared path of another assembler source tree (say
``git archive main | tar -x -C /tmp/main``), so a change to the shared path is measured before
and after in one run. Each row runs in a fresh process; CPU is that process's and its children's
(the compilers). ``--no-every-unit`` leaves out the old path (FA3: about 15 minutes of it).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, os.environ.get("CHECK_SHARED_SOURCE", str(ROOT)))  # a --worker of --against imports that tree

from assembler.check.evidence import record_path  # noqa: E402
from assembler.check.run import CheckOptions, run_check  # noqa: E402
from assembler.workspace import open_workspace  # noqa: E402

INSTANCE = '// generated {n}\n\n#include "launch.h"\n\n#ifndef DISABLE_{n}\ntemplate void run<{n}>();\n#endif\n'
LAUNCH = ("#pragma once\n#include <torch/csrc/stable/tensor.h>\n#include "
          "<torch/headeronly/core/ScalarType.h>\ntemplate <int N> void run() {}\n")


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
    manifest.write_text(manifest.read_text().replace('sources = ["csrc/add_scaled.cpp"]',
                                                     'sources = ["csrc/add_scaled.cpp", "csrc/gen/*.cpp"]'))
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


def _row(source: Path, ws: Path, deps: list[str],
         options: CheckOptions) -> tuple[float, float, dict[str, dict[str, object]], int]:
    """One way, in a fresh process on the assembler tree at ``source``: wall, CPU (the process and
    its compilers), findings, units answered by another's scan."""
    spec = json.dumps({"ws": str(ws), "deps": deps, "jobs": options.jobs, "syntax": options.syntax,
                       "share": options.share})
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run([sys.executable, __file__, "--worker", spec], cwd=source,
                          env={**os.environ, "CHECK_SHARED_SOURCE": str(source)},
                          capture_output=True, text=True, check=False)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode:
        raise SystemExit(f"{source}: {done.stderr[-2000:]}")
    row = json.loads(done.stdout.splitlines()[-1])
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return row["wall"], cpu, row["findings"], row["borrowed"]


def _worker(spec_text: str) -> int:
    spec = json.loads(spec_text)
    import assembler

    print(f"assembler from {Path(assembler.__file__).parent}", file=sys.stderr)
    options = CheckOptions(jobs=spec["jobs"], syntax=spec["syntax"], share=spec["share"])
    wall, _, findings, borrowed = _one(Path(spec["ws"]), spec["deps"], options)
    print(json.dumps({"wall": wall, "findings": findings, "borrowed": borrowed}))
    return 0


def main() -> int:
    if sys.argv[1:2] == ["--worker"]:
        return _worker(sys.argv[2])
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-C", dest="workspace", type=Path, help="workspace (default: a generated one)")
    parser.add_argument("deps", nargs="*")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--units", type=int, default=200, help="generated units (without -C)")
    parser.add_argument("--preprocess-only", action="store_true", help="no -fsyntax-only pass on clean C++ units")
    parser.add_argument("--against", type=Path,
                        help="another assembler source tree whose shared path runs too (before/after)")
    parser.add_argument("--no-every-unit", action="store_true", help="leave out the old path (every unit scans itself)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="check-shared-") as tmp:
        ws, deps = (args.workspace, args.deps) if args.workspace else _generated(Path(tmp), args.units)
        ways = [("shared scans (new)", ROOT, True)]  # new first: it gets the colder caches
        ways += [(f"shared, {args.against.name}", args.against.resolve(), True)] if args.against else []
        ways += [] if args.no_every_unit else [("every unit (old)", ROOT, False)]
        rows = []
        for label, source, share in ways:
            print(f"{label} ...", file=sys.stderr)
            options = CheckOptions(jobs=args.jobs, syntax=not args.preprocess_only, share=share)
            rows.append((label, *_row(source, ws, deps, options)))
            wall, cpu, _, shared = rows[-1][1:]
            print(f"  {label}: wall {wall:.1f} s, CPU {cpu:.1f} s, {shared} units answered by another's scan",
                  file=sys.stderr)
    (_, new_wall, new_cpu, new_findings, _) = rows[0]
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"deps: {' '.join(deps) or 'all'}, {len(new_findings)} units, --jobs {args.jobs}, load average {load}")
    for label, wall, cpu, _, shared in rows:
        print(f"  {label:24} wall {wall:8.1f} s   CPU {cpu:8.1f} s   units answered by another's scan: {shared}")
    for label, wall, cpu, _, _ in rows[1:]:
        print(f"  ratio ({label} / new): wall {wall / new_wall:.2f}x, CPU {cpu / max(new_cpu, 1e-9):.2f}x")
    same = all(findings == new_findings for _, _, _, findings, _ in rows[1:])
    print(f"  every verdict and finding identical: {same}")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
