"""`assemble patches --offline` costs the same per patch however long the series and however
deep the history below its base (#29 item 14: 500 patches took 31 s, 2,000 took 248 s).

The cost was inside git, not in the number of git processes: each trial cherry-pick merged a
stand-in commit dated 2001 with the patch's commit, and git's merge-base walk, ordered by
commit date, went through every commit newer than the stand-in (the series so far and the
whole upstream history) before it reached it. The bound is counted, not timed: git logs every
object it reads from a pack to ``GIT_TRACE_PACK_ACCESS``, and the history below the base lies
in the mirror's pack, so a walk through it shows up as reads. The generator is also what
``benchmarks/patches_scale.py`` times.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.conftest import run_assemble

FILES = 16
LINES = 40  # upstream edits the first half of each file, the series the second: no conflicts
EPOCH = 1_700_000_000
MANIFEST = """[bundle]
name = "scale"
version = "1.0.0"
python-abi = "3.9"

[mirrors]
"https://scale.invalid/" = "remotes/"

[deps.kern]
upstream = "https://scale.invalid/kern"  # generated
commit = "{base}"
track = "main"
"""


def _git(cwd: Path, *args: str, stdin: bytes | None = None) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_CONFIG_GLOBAL=os.devnull, GIT_CONFIG_NOSYSTEM="1", LC_ALL="C")
    result = subprocess.run(["git", *args], cwd=cwd, input=stdin, env=env, capture_output=True, check=False)
    if result.returncode != 0:
        raise AssertionError(f"git {' '.join(args)} failed: {result.stderr.decode(errors='replace')}")
    return result.stdout.decode().strip()


def make_long_series(root: Path, patches: int, history: int, ahead: int = 5) -> str:
    """A workspace at ``root`` whose dependency ``kern`` carries ``patches`` stacked patches
    (real ``git format-patch`` files) on a base with ``history`` commits below it, and whose
    tracked branch is ``ahead`` commits past the base. Built with one ``git fast-import``
    (fixed dates, so the SHAs repeat); returns the base commit."""
    remote = root / "remotes" / "kern"
    remote.mkdir(parents=True)
    _git(remote, "init", "--quiet", "--bare", "--initial-branch=main")
    tree = {f"src/part_{f:02d}.cc": [f"int part_{f:02d}_{n:02d} = {n};\n" for n in range(LINES)] for f in range(FILES)}
    stream = bytearray()
    marks = 0

    def commit(branch: str, parent: int | None, message: str, changed: dict[str, list[str]]) -> int:
        nonlocal marks
        marks += 1
        who = f"Scale <scale@invalid> {EPOCH + 60 * marks} +0000"
        body = message.encode() + b"\n"
        stream.extend(f"commit refs/heads/{branch}\nmark :{marks}\nauthor {who}\ncommitter {who}\n".encode())
        stream.extend(b"data %d\n" % len(body) + body)
        if parent is not None:
            stream.extend(f"from :{parent}\n".encode())
        for path, lines in changed.items():
            data = "".join(lines).encode()
            stream.extend(f"M 100644 inline {path}\n".encode() + b"data %d\n" % len(data) + data + b"\n")
        return marks

    def edit(k: int, offset: int, text: str) -> dict[str, list[str]]:
        path = f"src/part_{k % FILES:02d}.cc"
        tree[path][offset + (k * 7) % (LINES // 2)] = text
        return {path: list(tree[path])}

    base = commit("main", None, "Initial import", dict(tree))
    for k in range(history):
        base = commit("main", base, f"Upstream change {k}", edit(k, 0, f"int upstream_{k} = {k};\n"))
    upstream_tree = {path: list(lines) for path, lines in tree.items()}
    parent = base
    for i in range(patches):
        ported = edit(i, LINES // 2, f"int ported_{i} = {i};\n")
        parent = commit("series", parent, f"Port part {i}\n\nForwarded: no", ported)
    tree.clear()
    tree.update(upstream_tree)
    parent = base
    for k in range(history, history + ahead):
        parent = commit("main", parent, f"Upstream change {k}", edit(k, 0, f"int upstream_{k} = {k};\n"))
    _git(remote, "fast-import", "--quiet", "--date-format=raw", stdin=bytes(stream))
    base_sha = _git(remote, "rev-parse", f"main~{ahead}")
    out = root / "patches" / "kern"
    _git(remote, "format-patch", "--quiet", "--no-signature", "--zero-commit", "--no-numbered", "--full-index",
         "-o", str(out), f"{base_sha}..series")
    _git(remote, "update-ref", "-d", "refs/heads/series")
    names = sorted(p.name for p in out.glob("*.patch"))
    (out / "series").write_text("# generated series\n" + "\n".join(names) + "\n")
    (root / "deps.toml").write_text(MANIFEST.format(base=base_sha))
    return base_sha


def pack_reads(tmp_path: Path, patches: int, history: int) -> int:
    """Objects git reads from packs while ``patches --offline`` classifies a checked-out series
    of ``patches`` patches on ``history`` upstream commits."""
    root = tmp_path / f"ws{patches}"
    make_long_series(root, patches, history)
    cache = tmp_path / f"cache{patches}"
    checkout = run_assemble("-C", str(root), "checkout", env={"ASSEMBLE_CACHE": str(cache)})
    assert checkout.returncode == 0, checkout.stderr
    trace = tmp_path / f"pack-access-{patches}.log"
    result = run_assemble("-C", str(root), "patches", "--offline", "--format", "json",
                          env={"ASSEMBLE_CACHE": str(cache), "GIT_TRACE_PACK_ACCESS": str(trace)})
    assert result.returncode == 0, result.stderr
    assert f'"local": {patches}' in result.stdout  # every patch was classified ("Forwarded: no")
    return len(trace.read_text().splitlines())


def test_cost_per_patch_is_flat_and_independent_of_history(tmp_path: Path) -> None:
    """Doubling the series adds a small, fixed number of reads per patch, not a walk of the
    1,200 commits below the base per patch (before the fix: about 1,250 reads per patch)."""
    history = 1200
    short, long = pack_reads(tmp_path, 30, history), pack_reads(tmp_path, 60, history)
    per_patch = (long - short) / 30
    assert per_patch < 40, f"{per_patch:.0f} pack reads per added patch ({short} for 30 patches, {long} for 60)"
