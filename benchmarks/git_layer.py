"""Which engine the one git layer runs on: GitPython against the layer's own process runner
(``assembler.git.process.run_git`` through ``WorkTree``, and the ref files read without git).

Issue 31 asks the layer to be GitPython (the library the design named) except where a benchmark
shows GitPython costing the start-up budget (< 100 ms end to end) on a hot path. The hot paths
and the git they do:

- ``assemble deps``: one ``git status --porcelain=v2 --branch`` per checkout (git/condition.py);
- a no-op ``assemble checkout``: HEAD from the ref files (git/state.read_head), no git process;
- ``assemble patches --offline``: HEAD, the operation in progress, ``git status`` (dirty check).

Measured twice, on a repository of ``--files`` files and ``--commits`` commits (or ``--repo``):

1. cold, as a command runs it: a fresh interpreter that imports assembler's git package and does
   one operation, GitPython's way and the layer's way (wall and CPU time, median of ``--rounds``
   interleaved rounds, a warm-up first);
2. warm, in this process (imports done): the cost of each call alone (median, microseconds).

    python benchmarks/git_layer.py [--rounds 15] [--files 3000] [--commits 30] [--repo PATH] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# One operation each, in a fresh interpreter. Both sides import assembler's git package first
# (GitPython's Repo was made by runner.repo_at, with runner.GIT_ENV), so the difference is the engine.
PRELUDE = "import sys; P = sys.argv[1]; from assembler.git.reproducible import GIT_ENV, COMMITTER_ENV; "
GITPYTHON = "import git; repo = git.Repo(P); repo.git.update_environment(**GIT_ENV, **COMMITTER_ENV); "
STATUS_OPTIONS = "'--porcelain=v2', '--branch', '--untracked-files=normal'"
COLD: dict[str, str] = {
    "python, assembler.git imported": "pass",
    "import GitPython": "import git",
    "import git.process (the layer)": "import assembler.git.process",
    "status: GitPython repo.git.status": GITPYTHON + f"repo.git.status({STATUS_OPTIONS})",
    "status: layer WorkTree.out": "from assembler.git.process import WorkTree; "
                                  f"WorkTree(__import__('pathlib').Path(P)).out('status', {STATUS_OPTIONS})",
    "HEAD: GitPython repo.head.commit": GITPYTHON + "repo.head.commit.hexsha",
    "HEAD: layer state.read_head": "from pathlib import Path; from assembler.git.state import read_head; "
                                   "read_head(Path(P))",
    "dirty: GitPython repo.is_dirty": GITPYTHON + "repo.is_dirty(untracked_files=True)",
    "dirty: layer WorkTree.dirty": "from pathlib import Path; from assembler.git.process import WorkTree; "
                                   "WorkTree(Path(P)).dirty()",
}


class Cold:
    """One snippet in a fresh interpreter, timed (ms): wall, and CPU of the child (user + system)."""

    def __init__(self, python: str, code: str, repo: Path, env: dict[str, str]) -> None:
        self.argv = [python, "-c", PRELUDE + code, str(repo)]
        self.env = env
        self.walls: list[float] = []
        self.cpus: list[float] = []

    def run(self, record: bool = True) -> None:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        subprocess.run(self.argv, env=self.env, cwd=ROOT, check=True, capture_output=True)
        wall = time.perf_counter() - started
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if record:
            self.walls.append(wall * 1000)
            self.cpus.append((after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime) * 1000)


def warm(repo: Path, rounds: int) -> dict[str, float]:
    """Median microseconds per call, imports done, GitPython's call beside the layer's."""
    import git

    from assembler.git.process import WorkTree, isolated_env, run_git
    from assembler.git.reproducible import COMMITTER_ENV, GIT_ENV
    from assembler.git.state import read_head

    gp = git.Repo(repo)
    gp.git.update_environment(**GIT_ENV, **COMMITTER_ENV)
    tree = WorkTree(repo)
    env = isolated_env()
    options = ("--porcelain=v2", "--branch", "--untracked-files=normal")
    out = Path(tempfile.mkdtemp(prefix="git-layer-"))
    calls: dict[str, Callable[[], object]] = {
        "git.Repo(path)": lambda: git.Repo(repo),
        "status: GitPython": lambda: gp.git.status(*options),
        "status: run_git": lambda: run_git(("status", *options), env, cwd=repo),
        "HEAD: GitPython repo.head.commit.hexsha": lambda: gp.head.commit.hexsha,
        "HEAD: read_head (ref files)": lambda: read_head(repo),
        "dirty: GitPython is_dirty": lambda: gp.is_dirty(untracked_files=True),
        "dirty: WorkTree.dirty": tree.dirty,
        "rev-parse: GitPython": lambda: gp.git.rev_parse("HEAD~1"),
        "rev-parse: WorkTree.out": lambda: tree.out("rev-parse", "HEAD~1"),
        "format-patch 5: GitPython": lambda: gp.git.format_patch("-o", str(out / "a"), "HEAD~5..HEAD"),
        "format-patch 5: WorkTree.out": lambda: tree.out("format-patch", "-o", str(out / "b"), "HEAD~5..HEAD"),
    }
    times: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(rounds):
        for name, call in calls.items():
            started = time.perf_counter()
            call()
            times[name].append((time.perf_counter() - started) * 1e6)
    return {name: statistics.median(values) for name, values in times.items()}


def make_repo(path: Path, files: int, commits: int) -> None:
    """A checkout of ``files`` files in 30 directories, ``commits`` commits touching them, one untracked file."""
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1",
           "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@localhost", "GIT_COMMITTER_NAME": "b",
           "GIT_COMMITTER_EMAIL": "b@localhost"}

    def git(*args: str) -> None:
        subprocess.run(["git", *args], cwd=path, env=env, check=True, capture_output=True)

    path.mkdir(parents=True)
    git("init", "-q", "-b", "main")
    for number in range(files):
        target = path / f"d{number % 30}" / f"f{number}.cc"
        target.parent.mkdir(exist_ok=True)
        target.write_text(f"int f{number}() {{ return {number}; }}\n")
    git("add", "-A")
    git("commit", "-q", "-m", "files")
    for number in range(commits):
        (path / "d0" / "f0.cc").write_text(f"int f0() {{ return -{number + 1}; }}\n")
        git("commit", "-q", "-am", f"change {number}")
    (path / "untracked.txt").write_text("x\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=15, help="interleaved rounds (default 15)")
    parser.add_argument("--files", type=int, default=3000, help="files in the generated checkout (default 3000)")
    parser.add_argument("--commits", type=int, default=30, help="commits in the generated checkout (default 30)")
    parser.add_argument("--repo", type=Path, help="time against this checkout instead (at least 6 commits)")
    parser.add_argument("--python", default=sys.executable, help="interpreter of the cold runs (default: this one)")
    parser.add_argument("--json", action="store_true", help="print the medians as one JSON document")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        repo = args.repo or Path(tmp) / "repo"
        if args.repo is None:
            make_repo(repo, args.files, args.commits)
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        env.pop("PYTHONDONTWRITEBYTECODE", None)  # byte-code read, as installed, not compiled on each run
        cold = {name: Cold(args.python, code, repo, env) for name, code in COLD.items()}
        for command in cold.values():
            command.run(record=False)
        for _ in range(args.rounds):
            for command in cold.values():
                command.run()
        in_process = warm(repo, args.rounds)
    cold_ms = {name: {"wall_ms": round(statistics.median(c.walls), 1), "best_ms": round(min(c.walls), 1),
                      "cpu_ms": round(statistics.median(c.cpus), 1)} for name, c in cold.items()}
    if args.json:
        print(json.dumps({"cold": cold_ms, "warm_us": {k: round(v) for k, v in in_process.items()}}, indent=2))
        return
    load = os.getloadavg()[0]
    print(f"{args.python}: {args.rounds} interleaved rounds; load average {load:.1f} on {os.cpu_count()} CPUs")
    print(f"cold (a fresh interpreter, one operation)   {'median':>9} {'best':>9} {'CPU':>9}")
    for name, row in cold_ms.items():
        print(f"  {name:<42} {row['wall_ms']:6.1f} ms {row['best_ms']:6.1f} ms {row['cpu_ms']:6.1f} ms")
    print("warm (in process, per call)")
    for name, micros in in_process.items():
        print(f"  {name:<42} {micros / 1000:6.2f} ms")


if __name__ == "__main__":
    main()
