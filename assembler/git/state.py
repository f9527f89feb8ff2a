"""What assemble last made of a checkout, readable without starting git or gitpython: the
no-op path of `assemble checkout` (and the build's cache key) needs only this module."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from enum import StrEnum
from pathlib import Path
from typing import NamedTuple

from assembler.errors import InputError, NewerStateError
from assembler.fsutil import atomic_write, sha256
from assembler.git.reproducible import is_full_sha
from assembler.manifest import Dependency

STATE_FILE = "assemble-state.json"
STATE_VERSION = 1  # of the state file's format; a file without "version" is version 1


class CheckoutStatus(StrEnum):
    """What assemble last did to a checkout (its state file): applying -> ready, or stopped."""

    APPLYING = "applying"  # the series is being applied (a crash leaves this)
    READY = "ready"  # the pinned commit plus the whole series, as committed
    STOPPED = "stopped"  # a patch conflicted: left in `git am` for the user


class CheckoutCondition(StrEnum):
    """One word per checkout for `assemble deps` (see git.condition.inspect)."""

    ABSENT = "absent"
    READY = "ready"
    STALE = "stale"  # deps.toml or the series changed since
    DIRTY = "dirty"  # uncommitted edits
    UNEXPORTED = "unexported"  # commits not in patches/ yet
    STOPPED = "stopped"  # in a git operation (am, rebase, merge, cherry-pick)
    ABORTED = "aborted"  # a conflicting `git am` was aborted
    REBASING = "rebasing"  # an `assemble rebase` is pending
    INTERRUPTED = "interrupted"  # assemble was stopped while applying
    FOREIGN = "foreign"  # not made by assemble


def branch_name(dep: Dependency) -> str:
    return f"assemble/{dep.name}"


def series_digest(dep: Dependency) -> str:
    """Content hash of the series (names and bytes, in order)."""
    digest = sha256()
    for name in dep.series:
        digest.update(name.encode() + b"\0")
        digest.update((dep.patches_dir / name).read_bytes() + b"\0")
    return digest.hexdigest()


@dataclass
class CheckoutState:
    """What assemble last made of the checkout. ``applied`` maps each commit to its patch file.
    A dataclass: the hand-written ``__eq__``/``__repr__`` that spared the no-op checkout the
    dataclasses import saved 7-9 ms of CPU (benchmarks/startup.py --tricks), under the 10 ms floor."""

    base: str
    source: str
    series_digest: str
    head: str | None = None
    applied: dict[str, str] = field(default_factory=dict)
    status: CheckoutStatus = CheckoutStatus.APPLYING
    version: int = STATE_VERSION

    def to_json(self) -> dict[str, object]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def load(cls, path: Path) -> CheckoutState | None:
        state_path = _state_path(path)
        if not state_path.exists():
            return None
        try:
            data = json.loads(state_path.read_text())
            if isinstance(data.get("version"), int) and data["version"] > STATE_VERSION:
                raise NewerStateError(state_path,
                                      f"the checkout state (format {data['version']}; this assembler reads "
                                      f"{STATE_VERSION})")
            shas = [data.get("base"), *([data["head"]] if data.get("head") is not None else []),
                    *data.get("applied", {})]
            bad = [sha for sha in shas if not is_full_sha(sha)]
            if bad:
                raise ValueError(f"{bad[0]!r} where a commit SHA belongs")  # it would reach git as an argument
            return cls(**{**data, "status": CheckoutStatus(data.get("status", CheckoutStatus.APPLYING))})
        except (ValueError, TypeError, AttributeError) as exc:
            raise InputError(
                f"{state_path}: unreadable checkout state ({exc})",
                hint=f"move {path} away and run `assemble checkout` again (export its commits first if you made any)",
            ) from None

    def is_exactly_pin_and_series(self, head: str | None, series_head: str | None, dirty: bool) -> bool:
        """Whether a build or check that recorded ``head``, ``series_head`` and ``dirty`` read this
        checkout's pinned commit plus its series and nothing else (no edits, no commits of its own):
        the one rule for when build and check evidence counts for `assemble patches`."""
        return not dirty and head == series_head == self.head

    def save(self, path: Path) -> None:
        atomic_write(_state_path(path), json.dumps(self.to_json(), indent=2, sort_keys=True) + "\n")


def _state_path(checkout: Path) -> Path:
    return checkout / ".git" / STATE_FILE


def is_up_to_date(state: CheckoutState, dep: Dependency, digest: str) -> bool:
    return state.status == CheckoutStatus.READY and state.base == dep.commit and state.series_digest == digest


def pinned_state(checkout: Path, dep: Dependency) -> CheckoutState | None:
    """The state of ``checkout`` when assemble left it ready at the pinned commit with the current
    series applied; None when it is absent, stale, stopped or interrupted."""
    state = CheckoutState.load(checkout) if checkout.exists() else None
    return state if state is not None and is_up_to_date(state, dep, series_digest(dep)) else None


def interrupted_series_am(checkout: Path, state: CheckoutState) -> bool:
    """The ``git am`` in ``checkout`` is assemble's own, cut short (Ctrl-C, a kill, a full
    disk): the state still says applying (a conflict would have made it stopped), the session
    is an am's (``rebase-apply`` without the ``rebasing`` of a `git rebase`, no other
    operation), and HEAD is the pinned commit or descends from it through commits that
    assemble's fixed committer made, none the user's. What git's session files say is not
    relied on: a git killed at the wrong moment leaves any of them missing, empty or half
    written (``applying``, ``abort-safety``, ORIG_HEAD, ``author-script``). Only such an am
    may be dropped and redone without asking."""
    git_dir = checkout / ".git"
    session = git_dir / "rebase-apply"
    if state.status != CheckoutStatus.APPLYING or not session.is_dir() or (session / "rebasing").exists():
        return False
    if any((git_dir / other).exists() for other in ("rebase-merge", "MERGE_HEAD", "CHERRY_PICK_HEAD")):
        return False
    head = read_head(checkout)
    return head == state.base or _made_by_assemble(checkout, state.base, head)


def _made_by_assemble(checkout: Path, base: str, head: str) -> bool:
    """``head`` descends from ``base`` and every commit between was committed by assemble."""
    from assembler.git.process import END_OF_OPTIONS, WorkTree
    from assembler.git.reproducible import COMMITTER_ENV

    tree = WorkTree(checkout)
    if not is_full_sha(head) or tree.run("merge-base", "--is-ancestor", END_OF_OPTIONS, base, head,
                                         check=False).returncode != 0:
        return False
    ours = f"{COMMITTER_ENV['GIT_COMMITTER_NAME']} <{COMMITTER_ENV['GIT_COMMITTER_EMAIL']}>"
    listed = tree.run("log", "--format=%cn <%ce>", END_OF_OPTIONS, f"{base}..{head}", check=False)
    return listed.returncode == 0 and all(line == ours for line in listed.stdout.splitlines())


def read_head(checkout: Path) -> str:
    """The commit checked out: from .git/HEAD and the ref files (no process: the no-op
    `assemble checkout` reads one per dependency), else from `git rev-parse`."""
    from assembler.git.reproducible import read_ref

    git_dir = checkout / ".git"
    try:
        head = (git_dir / "HEAD").read_text(encoding="utf-8").strip()
    except OSError:
        head = ""
    sha = read_ref(git_dir, head.removeprefix("ref: ").strip()) if head.startswith("ref: ") else head
    if sha and len(sha) == 40 and all(c in "0123456789abcdef" for c in sha):
        return sha
    from assembler.git.process import WorkTree

    result = WorkTree(checkout).run("rev-parse", "HEAD", check=False)
    if result.returncode != 0:
        raise InputError(f"{checkout}: cannot read HEAD ({result.stderr.strip()})",
                         hint="move it away and run `assemble checkout` again")
    return result.stdout.strip()


class CheckoutResult(NamedTuple):
    dep: str
    path: Path
    action: str  # "created", "updated", "up-to-date"
    head: str
    applied: int
    fetched: bool
    # Patches of the series that changed nothing at the pin (git am skipped them): already in
    # the pinned commit, e.g. after the pin was moved by hand; `rebase --onto PIN` drops them.
    already_applied: tuple[str, ...] = ()
    edits: tuple[str, ...] = ()  # tracked files with uncommitted edits, "M path" as `git checkout` lists them

    @classmethod
    def unchanged(cls, dep: Dependency, path: Path, state: CheckoutState) -> CheckoutResult:
        from assembler.git.index import modified_files

        return cls(dep.name, path, "up-to-date", read_head(path), len(state.applied), fetched=False,
                   already_applied=already_applied(dep, state), edits=modified_files(path))


def already_applied(dep: Dependency, state: CheckoutState) -> tuple[str, ...]:
    """The patches of ``dep``'s series that made no commit in this checkout (see CheckoutResult)."""
    made = set(state.applied.values())
    return tuple(name for name in dep.series if name not in made)
