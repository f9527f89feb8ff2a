#!/usr/bin/env python3
"""Build the example workspace's "upstream" git repositories from upstream-src/.

The example pins commits by SHA in deps.toml, so the repositories must come out identical on
every machine. Each commit is written with ``git fast-import`` from a snapshot directory and
a message file that carry every input of the commit object (tree, author, committer, dates,
message); the user's git configuration, environment and clock play no part.

    python make_upstreams.py [--advance] [DEST]

DEST defaults to upstreams/ next to this file (git-ignored; deps.toml's [mirrors] points
there). Without --advance, each repository's ``main`` is its base history; with --advance,
the later upstream commits listed under ``advance`` in upstream-src/repos.toml are on it too.
Either way the result depends only on the flag, so re-running is idempotent. Importable:
``make_upstreams(dest, advance=False)`` returns repository name -> head SHA.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "upstream-src"
DEFAULT_DEST = HERE / "upstreams"
BRANCH = "refs/heads/main"


@dataclass(frozen=True)
class Commit:
    """One snapshot plus the identity and time lines of its commit object."""

    snapshot: Path
    author: str
    committer: str
    message: bytes


def _git_env() -> dict[str, str]:
    """The environment minus anything that could change what git writes: no GIT_* variables
    inherited from a hook or a shell, no global or system configuration, a fixed locale."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=os.devnull, LC_ALL="C", TZ="UTC")
    return env


def _git(repo: Path, *args: str, stdin: bytes | None = None) -> str:
    result = subprocess.run(
        ["git", *args], cwd=repo, input=stdin, env=_git_env(), capture_output=True, check=False
    )
    if result.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} failed in {repo}: {result.stderr.decode(errors='replace').strip()}")
    return result.stdout.decode().strip()


def _ident(who: str, when: str) -> str:
    """``Name <email> <epoch> <+hhmm>``, the raw form fast-import and commit objects use."""
    stamp = datetime.fromisoformat(when)
    if stamp.tzinfo is None:
        raise ValueError(f"date {when!r} needs an explicit UTC offset")
    offset = stamp.utcoffset()
    assert offset is not None
    minutes = int(offset.total_seconds()) // 60
    sign = "-" if minutes < 0 else "+"
    return f"{who} {int(stamp.timestamp())} {sign}{abs(minutes) // 60:02d}{abs(minutes) % 60:02d}"


def _read_commit(repo_dir: Path, name: str) -> Commit:
    snapshot = repo_dir / name
    msg_file = repo_dir / f"{name}.msg"
    if not snapshot.is_dir() or not msg_file.is_file():
        raise FileNotFoundError(f"{repo_dir}: commit {name} needs both {name}/ and {name}.msg")
    head, _, body = msg_file.read_bytes().partition(b"\n\n")
    headers = dict(line.split(": ", 1) for line in head.decode("utf-8").splitlines())
    author = _ident(headers["Author"], headers["Date"])
    committer = _ident(headers.get("Committer", headers["Author"]), headers.get("Commit-Date", headers["Date"]))
    message = body.rstrip(b"\n") + b"\n"
    return Commit(snapshot=snapshot, author=author, committer=committer, message=message)


def _snapshot_files(snapshot: Path) -> list[tuple[str, bytes]]:
    """(path, bytes) of every file, sorted; caches that Python or editors leave are skipped."""
    files = []
    for path in sorted(snapshot.rglob("*")):
        rel = path.relative_to(snapshot)
        if path.is_dir() or "__pycache__" in rel.parts or path.suffix == ".pyc":
            continue
        files.append((rel.as_posix(), path.read_bytes()))
    return files


def _data(payload: bytes) -> bytes:
    return b"data %d\n" % len(payload) + payload + b"\n"


def _stream(commits: list[Commit]) -> bytes:
    """A fast-import stream that writes ``commits`` as one linear history on main.
    Every file is written with mode 100644, whatever the checkout's permissions are."""
    out = bytearray()
    for mark, commit in enumerate(commits, start=1):
        out += f"commit {BRANCH}\nmark :{mark}\n".encode()
        out += f"author {commit.author}\ncommitter {commit.committer}\n".encode()
        out += _data(commit.message)
        if mark > 1:
            out += f"from :{mark - 1}\n".encode()
        out += b"deleteall\n"
        for rel, content in _snapshot_files(commit.snapshot):
            out += f"M 100644 inline {rel}\n".encode() + _data(content)
    out += f"reset {BRANCH}\nfrom :{len(commits)}\n\n".encode()
    return bytes(out)


def _history(spec: dict[str, dict[str, object]], name: str, advance: bool) -> list[Commit]:
    """The commits of repository ``name``, oldest first: its base's history (never the base's
    advance commits: a fork branched off before upstream moved on), then its own."""
    entry = spec[name]
    history = _history(spec, str(entry["base"]), advance=False) if "base" in entry else []
    names = [*entry.get("commits", []), *(entry.get("advance", []) if advance else [])]  # type: ignore[misc]
    return history + [_read_commit(SOURCE / name, str(commit)) for commit in names]


def make_upstreams(dest: Path, advance: bool = False) -> dict[str, str]:
    """Create or update the bare repositories under ``dest``; returns name -> head SHA of main."""
    spec = tomllib.loads((SOURCE / "repos.toml").read_text(encoding="utf-8"))["repos"]
    dest.mkdir(parents=True, exist_ok=True)
    heads = {}
    for name in spec:
        repo = dest / f"{name}.git"
        if not (repo / "HEAD").is_file():
            repo.mkdir(parents=True, exist_ok=True)
            _git(repo, "init", "--quiet", "--bare", "--template=")
        _git(repo, "symbolic-ref", "HEAD", BRANCH)
        # --force: without --advance, main is reset to the base history even after an advance.
        _git(repo, "fast-import", "--quiet", "--force", "--date-format=raw",
             stdin=_stream(_history(spec, name, advance)))
        heads[name] = _git(repo, "rev-parse", BRANCH)
    return heads


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dest", nargs="?", type=Path, default=DEFAULT_DEST,
                        help=f"where the bare repositories go (default: {DEFAULT_DEST})")
    parser.add_argument("--advance", action="store_true",
                        help="also add the later upstream commits (for the rebase demo)")
    args = parser.parse_args(argv)
    for name, sha in make_upstreams(args.dest.resolve(), advance=args.advance).items():
        print(f"{name:16} {sha}  {args.dest / (name + '.git')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
