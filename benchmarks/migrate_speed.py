"""Wall time of `assemble assess` + `assemble migrate` (issue #27 item 8), and of migrate's
refusal of a dirty fork, which must come before any work.

Without arguments: the example's normkit (examples/stable-abi/migrate), in a fresh copy under a
temporary directory. With ``--workspace DIR DEP``: a workspace of your own, e.g. one whose
[mirrors] point at local snapshots of a real dependency (nothing of it is kept here); its fork
``forks/DEP`` is reset to the pin first (``--no-reset`` to keep it), so migrate starts from
upstream each time.

    python benchmarks/migrate_speed.py
    python benchmarks/migrate_speed.py --workspace /path/to/ws qutlass

Prints one JSON object: seconds for assess, migrate and the refusal, the units clean before
and after, and what migrate made. Target (FA2 on 2 cores): assess + migrate under 180 s.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "stable-abi"


def assemble(ws: Path, *args: str) -> tuple[float, subprocess.CompletedProcess[str]]:
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "assembler", "-C", str(ws), *args], capture_output=True, text=True,
                          check=False)
    return time.monotonic() - started, done


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout.strip()


def example(tmp: Path) -> Path:
    """The example's migration workspace, its upstreams made, normkit checked out."""
    copy = tmp / "stable-abi"
    shutil.copytree(EXAMPLE, copy,
                    ignore=shutil.ignore_patterns("forks", "upstreams", ".assemble", "dist", "__pycache__"))
    subprocess.run([sys.executable, str(copy / "make_upstreams.py")], cwd=copy, check=True, capture_output=True)
    ws = copy / "migrate"
    _, done = assemble(ws, "checkout", "normkit")
    if done.returncode:
        raise SystemExit(f"checkout failed: {done.stderr[-2000:]}")
    return ws


def refusal(ws: Path, dep: str) -> float:
    """Seconds migrate takes to refuse a fork with an uncommitted edit (restored after)."""
    fork = ws / "forks" / dep
    tracked = next(name for name in git(fork, "ls-files").splitlines() if (fork / name).is_file())
    original = (fork / tracked).read_bytes()
    (fork / tracked).write_bytes(original + b"\n")
    try:
        seconds, done = assemble(ws, "migrate", dep, "--json")
    finally:
        (fork / tracked).write_bytes(original)
    if done.returncode != 4:
        raise SystemExit(f"migrate did not refuse the dirty fork (exit {done.returncode})")
    return seconds


def measure(ws: Path, dep: str, reset: bool) -> dict[str, object]:
    fork = ws / "forks" / dep
    if reset:
        pin = json.loads(assemble(ws, "deps", "--json")[1].stdout or "{}")
        commit = next((d.get("commit") for d in pin.get("deps", []) if d.get("name") == dep), None)
        if commit:
            git(fork, "reset", "-q", "--hard", commit)
    refused = refusal(ws, dep)
    assess_s, assessed = assemble(ws, "assess", dep, "--json")
    migrate_s, migrated = assemble(ws, "migrate", dep, "--json")
    report = json.loads(migrated.stdout) if migrated.stdout.strip() else {}
    return {
        "dep": dep, "assess_s": round(assess_s, 1), "migrate_s": round(migrate_s, 1),
        "total_s": round(assess_s + migrate_s, 1), "dirty_refusal_s": round(refused, 2),
        "assess_exit": assessed.returncode, "migrate_exit": migrated.returncode,
        "check": report.get("check"), "made": [step.get("made") for step in report.get("steps", [])],
        "remaining": len(report.get("remaining", [])), "proof_seconds": (report.get("proof") or {}).get("seconds"),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workspace", type=Path, help="a workspace of your own (default: a copy of the example)")
    parser.add_argument("dep", nargs="?", default="normkit")
    parser.add_argument("--no-reset", action="store_true", help="keep the fork as it is (default: reset it to the pin)")
    args = parser.parse_args()
    if args.workspace is not None:
        print(json.dumps(measure(args.workspace.resolve(), args.dep, not args.no_reset), indent=1))
        return 0
    with tempfile.TemporaryDirectory(prefix="migrate-speed-") as tmp:
        print(json.dumps(measure(example(Path(tmp)), args.dep, reset=False), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
