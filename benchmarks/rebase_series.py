"""`assemble rebase` of a 30-patch series over 200 upstream commits vs plain `git rebase` of
the same branch, and `assemble patches` for that dependency.

A generated repository (git fast-import, fixed dates): 80 source files, 200 upstream commits
editing them, a 30-patch series on the old base touching the same files in other places
(three-way merges, no conflicts), one of them landed upstream verbatim (dropped by both
tools). Each round starts from fresh copies of one workspace whose checkout is ready:

- plain:    ``git rebase --onto <tip> <base>`` in a copy of forks/bench (its cherry-pick
            detection included): the floor; and ``git fetch`` + that rebase, since
            assemble fetches too;
- assemble: ``rebase.start`` in-process (fetch, status layers, journal and backups, the
            replay, low-churn export, deps.toml update), then the same through the CLI
            (adds interpreter start-up and imports);
- patches:  ``assemble patches bench`` before the rebase (200 commits behind), CLI and
            in-process.

Target: assemble in-process <= 1.5x plain. Rounds interleave the variants; the median and the
best round are both printed (on a busy machine the best is the steadier estimate).

    python benchmarks/rebase_series.py [--rounds 7] [--patches 30] [--upstream 200]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

FILES = 80
LINES = 300
EPOCH = 1_700_000_000
MANIFEST = """[bundle]
name = "bench"
version = "1.0.0"
python-abi = "3.9"

[mirrors]
"https://bench.invalid/" = "remotes/"

[deps.bench]
upstream = "https://bench.invalid/bench"  # generated
commit = "{base}"
track = "main"
"""


def git(cwd: Path, *args: str, stdin: bytes | None = None) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_CONFIG_GLOBAL=os.devnull, GIT_CONFIG_NOSYSTEM="1", LC_ALL="C",
               GIT_COMMITTER_NAME="Bench", GIT_COMMITTER_EMAIL="bench@invalid", GIT_AUTHOR_NAME="Bench",
               GIT_AUTHOR_EMAIL="bench@invalid")
    result = subprocess.run(["git", *args], cwd=cwd, input=stdin, env=env, capture_output=True, check=False)
    if result.returncode != 0:
        sys.exit(f"git {' '.join(args)} failed: {result.stderr.decode(errors='replace')}")
    return result.stdout.decode().strip()


class Stream:
    """A git fast-import stream with one in-memory tree per branch."""

    def __init__(self) -> None:
        self.out = bytearray()
        self.mark = 0
        self.clock = EPOCH

    def commit(self, branch: str, parent: int | None, message: str, files: dict[str, list[str]]) -> int:
        self.mark += 1
        self.clock += 600
        who = f"Bench <bench@invalid> {self.clock} +0000"
        body = message.encode() + b"\n"
        self.out += f"commit refs/heads/{branch}\nmark :{self.mark}\nauthor {who}\ncommitter {who}\n".encode()
        self.out += b"data %d\n" % len(body) + body
        if parent is not None:
            self.out += f"from :{parent}\n".encode()
        for path, lines in files.items():
            data = "".join(lines).encode()
            self.out += f"M 100644 inline {path}\n".encode() + b"data %d\n" % len(data) + data + b"\n"
        return self.mark


def generate(root: Path, patches: int, upstream_commits: int) -> str:
    """The workspace at ``root``: deps.toml, patches/bench/ and remotes/bench (bare)."""
    remote = root / "remotes" / "bench"
    remote.mkdir(parents=True)
    git(remote, "init", "--quiet", "--bare", "--initial-branch=main")
    tree = {f"src/mod_{f:02d}.cc": [f"int mod_{f:02d}_{n:03d} = {n};\n" for n in range(LINES)] for f in range(FILES)}
    stream = Stream()
    base = stream.commit("main", None, "Initial import", tree)
    # our series: each patch edits the tail of one file (upstream edits the head)
    ours: list[tuple[str, list[str]]] = []
    series_tree = {path: list(lines) for path, lines in tree.items()}
    parent = base
    for i in range(patches):
        path = f"src/mod_{(i * 7) % FILES:02d}.cc"
        lines = series_tree[path]
        lines[LINES - 5 - (i % 3)] = f"int stable_{i} = {i};  // ported\n"
        parent = stream.commit("series", parent, f"Port part {i} to the stable ABI\n\nForwarded: no", {path: lines})
        ours.append((path, list(lines)))
    landed = 5
    upstream_tree = {path: list(lines) for path, lines in tree.items()}
    parent = base
    for k in range(upstream_commits):
        changed = {}
        if k == upstream_commits // 2:  # upstream takes our patch 5 verbatim
            path = ours[landed][0]
            upstream_tree[path][LINES - 5 - (landed % 3)] = f"int stable_{landed} = {landed};  // ported\n"
            changed[path] = upstream_tree[path]
            message = f"Port part {landed} to the stable ABI\n\nForwarded: no"
        else:
            for j in range(1 + k % 3):
                path = f"src/mod_{(k * 13 + j * 29) % FILES:02d}.cc"
                line = (k * 17 + j * 5) % (LINES - 40)
                upstream_tree[path][line] = f"int mod_upstream_{k}_{j} = {k};\n"
                changed[path] = upstream_tree[path]
            message = f"Upstream change {k}"
        parent = stream.commit("main", parent, message, {p: list(v) for p, v in changed.items()})
    git(remote, "fast-import", "--quiet", "--date-format=raw", stdin=bytes(stream.out))
    base_sha = git(remote, "rev-parse", f"main~{upstream_commits}")
    out = root / "patches" / "bench"
    git(remote, "format-patch", "--quiet", "--no-signature", "--zero-commit", "--no-numbered", "--full-index", "-o",
        str(out), f"{base_sha}..series")
    git(remote, "update-ref", "-d", "refs/heads/series")
    names = sorted(p.name for p in out.glob("*.patch"))
    (out / "series").write_text("# generated series\n" + "\n".join(names) + "\n")
    (root / "deps.toml").write_text(MANIFEST.format(base=base_sha))
    return base_sha


def assemble(root: Path, cache: Path, *args: str) -> float:
    started = time.perf_counter()
    result = subprocess.run([sys.executable, "-m", "assembler", "-C", str(root), *args],
                            env={**os.environ, "ASSEMBLE_CACHE": str(cache)}, capture_output=True, text=True,
                            check=False)
    elapsed = time.perf_counter() - started
    if result.returncode != 0:
        sys.exit(f"assemble {' '.join(args)} failed ({result.returncode}):\n{result.stderr[-3000:]}")
    return elapsed


def in_process(root: Path, cache: Path, what: str) -> float:
    os.environ["ASSEMBLE_CACHE"] = str(cache)
    from assembler.upstreaming import rebase
    from assembler.upstreaming.patches_report import dependency_status
    from assembler.workspace import open_workspace

    started = time.perf_counter()
    workspace = open_workspace(root)
    dep = workspace.manifest.deps["bench"]
    if what == "rebase":
        with workspace.lock():
            report = rebase.start(workspace, dep)
        assert report.status == "done" and len(report.dropped) == 1, report
    else:
        status = dependency_status(workspace, dep)
        assert status.counts()["upstream"] == 1, status.counts()
    return time.perf_counter() - started


def copy(template: Path, target: Path) -> tuple[Path, Path]:
    shutil.copytree(template / "ws", target / "ws", symlinks=True)
    shutil.copytree(template / "cache", target / "cache", symlinks=True)
    return target / "ws", target / "cache"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--patches", type=int, default=30)
    parser.add_argument("--upstream", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="rebase-bench-") as tmp_name:
        tmp = Path(tmp_name)
        started = time.perf_counter()
        base = generate(tmp / "template" / "ws", args.patches, args.upstream)
        checkout_s = assemble(tmp / "template" / "ws", tmp / "template" / "cache", "checkout", "bench")
        print(f"generated {args.patches} patches over {args.upstream} upstream commits and checked out in "
              f"{time.perf_counter() - started:.2f} s (checkout {checkout_s:.2f} s)")
        tip = git(tmp / "template" / "ws" / "remotes" / "bench", "rev-parse", "main")
        rows: dict[str, list[float]] = {"plain git rebase": [], "plain git fetch + rebase": [],
                                        "assemble rebase (in-process)": [],
                                        "assemble rebase (CLI)": [], "assemble patches (in-process)": [],
                                        "assemble patches (CLI)": []}
        for round_number in range(args.rounds):
            plain_ws, _ = copy(tmp / "template", tmp / f"plain{round_number}")
            fork = plain_ws / "forks" / "bench"
            t0 = time.perf_counter()
            git(fork, "-c", "core.hooksPath=/dev/null", "rebase", "--quiet", "--onto", tip, base)
            rows["plain git rebase"].append(time.perf_counter() - t0)
            if git(fork, "rev-list", "--count", f"{tip}..HEAD") != str(args.patches - 1):
                sys.exit("plain rebase did not drop the landed patch")
            fetch_ws, _ = copy(tmp / "template", tmp / f"fetch{round_number}")
            fork = fetch_ws / "forks" / "bench"
            t0 = time.perf_counter()
            git(fork, "fetch", "--quiet", str(fetch_ws / "remotes" / "bench"), "main")
            git(fork, "-c", "core.hooksPath=/dev/null", "rebase", "--quiet", "--onto", "FETCH_HEAD", base)
            rows["plain git fetch + rebase"].append(time.perf_counter() - t0)
            ws, cache = copy(tmp / "template", tmp / f"inproc{round_number}")
            rows["assemble patches (in-process)"].append(in_process(ws, cache, "patches"))
            rows["assemble rebase (in-process)"].append(in_process(ws, cache, "rebase"))
            ws, cache = copy(tmp / "template", tmp / f"cli{round_number}")
            rows["assemble patches (CLI)"].append(assemble(ws, cache, "patches", "bench", "--format", "json"))
            rows["assemble rebase (CLI)"].append(assemble(ws, cache, "rebase", "bench", "--json"))
        print(f"{'':32} {'median':>8} {'best':>8}")
        for name, values in rows.items():
            print(f"{name:32} {statistics.median(values):7.3f}s {min(values):7.3f}s  (rounds: "
                  f"{', '.join(f'{v:.3f}' for v in values)})")
        for label, pick in (("median", statistics.median), ("best", min)):
            ours = pick(rows["assemble rebase (in-process)"])
            print(f"ratio assemble/plain ({label}): in-process {ours / pick(rows['plain git rebase']):.2f}x vs rebase, "
                  f"{ours / pick(rows['plain git fetch + rebase']):.2f}x vs fetch + rebase (target <= 1.5x); "
                  f"CLI {pick(rows['assemble rebase (CLI)']) / pick(rows['plain git rebase']):.2f}x vs rebase (adds "
                  "Python start-up)")


if __name__ == "__main__":
    main()
