"""forks/<dep>: a clone of the dependency's mirror, on branch ``assemble/<dep>`` at the pinned
commit, with the series applied as commits (authorship and dates preserved, three-way).

The checkout remembers what it was made from (``.git/assemble-state.json``), which is how a
re-run knows it is up to date, and how user commits or edits are told apart from ours.

No interruption (Ctrl-C, SIGTERM, SIGKILL, a full disk) leaves a checkout that a re-run cannot
finish, and a re-run never clobbers work of the user's:

- a new checkout is cloned into a temporary directory, given its state file (``applying``)
  and renamed into place, so ``forks/<dep>`` is absent or assemble's;
- its objects are its own (hard links from the mirror, ``git/objects.py``): it does not depend
  on the cache staying where it was;
- the git processes working on it hold an flock (``forks/.<dep>.running``), so a run after
  assemble was killed waits for the git children that outlived it;
- a checkout whose state says ``applying`` holds nothing of the user's (refuse_to_lose_work
  ran before that state was written): git's leftovers in it (lock files, the cut ``git am``)
  are removed and the series is applied again;
- a failed ``git am`` is a conflict only when git says a patch failed and the machine did not
  refuse; otherwise (a full disk, a file size limit, a signal) the state stays ``applying``.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

from assembler.cache import cache_root, in_use
from assembler.errors import (
    AssembleError,
    ConflictError,
    EnvironmentFailure,
    ManifestError,
    WouldLoseWorkError,
    from_os_error,
)
from assembler.fsutil import ignored_dir, open_state_file, remove_stale, temporary_path
from assembler.git import mirrors
from assembler.git.objects import borrows, own_objects
from assembler.git.process import (
    END_OF_OPTIONS,
    FILE_SIZE_LIMIT_HINT,
    GitFailed,
    WorkTree,
    isolated_env,
    refusal,
    run_git,
)
from assembler.git.reproducible import git_error_line, operation_in
from assembler.git.state import (
    CheckoutResult,
    CheckoutState,
    CheckoutStatus,
    already_applied,
    branch_name,
    interrupted_series_am,
    is_up_to_date,
    read_head,
    series_digest,
)
from assembler.manifest import Dependency, Manifest
from assembler.workspace import Workspace

# How a series becomes commits: deterministic for any subject and any file content.
AM_ARGS = ("-3", "--quiet", "--committer-date-is-author-date", "--keep-non-patch", "--keep-cr")
# What git am prints when a patch of the series did not apply (a conflict to resolve by hand).
PATCH_FAILED = "Patch failed at "


def checkout(workspace: Workspace, dep: Dependency, on_step: Callable[[str], None] = lambda _: None) -> CheckoutResult:
    """Make forks/<dep> match the manifest, never discarding work that is not in the series."""
    path = workspace.fork_path(dep)
    state = CheckoutState.load(path) if path.exists() else None
    digest = series_digest(dep)
    if state is not None and is_up_to_date(state, dep, digest) and not borrows(path):
        # Nothing to change: local edits and commits stay where they are (build uses them).
        return CheckoutResult.unchanged(dep, path, state)
    with _working_on(workspace, dep, on_step) as fd:
        return _make(workspace, dep, path, digest, fd, on_step)


@contextlib.contextmanager
def _working_on(workspace: Workspace, dep: Dependency, on_step: Callable[[str], None]) -> Iterator[int]:
    """The flock that every git process working on forks/<dep> inherits: held until the last
    of them ends, even when assemble itself was killed (SIGKILL), so this waits for those."""
    forks = ignored_dir(workspace.forks_dir, inside=workspace.root)
    fd = open_state_file(workspace.root, forks / f".{dep.name}.running", os.O_RDWR | os.O_CREAT)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            on_step("wait for the git processes of an interrupted run")
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield fd
    finally:
        os.close(fd)


def _make(workspace: Workspace, dep: Dependency, path: Path, digest: str, fd: int,
          on_step: Callable[[str], None]) -> CheckoutResult:
    _remove_leftovers(path)
    state = CheckoutState.load(path) if path.exists() else None
    if path.exists() and state is None:
        if not _holds_nothing(path):
            raise WouldLoseWorkError(
                f"{path} exists but was not made by assemble",
                hint=f"move it away (or delete it) and run `assemble checkout {dep.name}` again",
            )
        on_step("remove a checkout cut short")  # a clone renamed into place by an older assemble, then killed
        shutil.rmtree(path)
    if state is not None:
        if borrows(path):  # first: what follows reads its objects
            _own_objects(workspace.manifest, dep, path)
        if is_up_to_date(state, dep, digest):  # it was here only to stop borrowing
            return CheckoutResult.unchanged(dep, path, state)
        if state.status == CheckoutStatus.APPLYING:  # our own run, cut short: clear what git left
            _clear_interrupted(path, state, on_step)
        refuse_to_lose_work(dep, path, state)
    on_step("mirror")
    state = CheckoutState(base=dep.commit, source=dep.source, series_digest=digest)
    with _held_mirror(workspace.manifest, dep.source, dep.commit) as (mirror, fetched):
        if path.exists():
            action = "updated"
            state.save(path)  # applying: from here on a re-run redoes it all
            _fetch_commit(WorkTree(path, fd=fd), mirror, dep.commit)
        else:
            action = "created"
            on_step("clone")
            _clone(mirror, path, state, fd)
    tree = WorkTree(path, fd=fd)
    _point_remotes(workspace, dep, tree, mirror)
    tree.run("checkout", "--quiet", "--force", "-B", branch_name(dep), dep.commit, "--")
    tree.run("clean", "-fdq")
    if dep.submodules:
        on_step("submodules")
        _init_submodules(workspace, dep, tree)
    on_step("series")
    state.applied = apply_series(tree, dep, path, state)
    state.head = read_head(path)
    state.status = CheckoutStatus.READY
    state.save(path)
    return CheckoutResult(dep.name, path, action, state.head, len(state.applied), fetched=fetched,
                          already_applied=already_applied(dep, state))


def _trusted() -> Path:
    """Where the stores a checkout may have borrowed from live: the cache's mirrors."""
    return cache_root(create=False) / "git"


def _own_objects(manifest: Manifest, dep: Dependency, path: Path) -> None:
    """Stop ``path`` borrowing objects: from the stores it names when they are still there,
    else from its mirror (fetched again when `assemble cache clean` removed it)."""
    try:
        own_objects(path, [], _trusted())
    except WouldLoseWorkError:
        with _held_mirror(manifest, dep.source, dep.commit) as (mirror, _):
            own_objects(path, [mirror.path], _trusted())


@contextlib.contextmanager
def _held_mirror(manifest: Manifest, url: str, sha: str) -> Iterator[tuple[mirrors.Mirror, bool]]:
    """A mirror holding ``sha`` and whether it was fetched, held against `assemble cache prune`
    (cache.in_use) while the caller copies from it; one that a prune removed between its fetch
    and the hold is made again."""
    fetched_any = False
    for _ in range(3):
        mirror, fetched = mirrors.ensure_commit(manifest, url, sha)
        fetched_any = fetched_any or fetched
        with in_use(mirror.path):
            if mirror.has(sha):
                yield mirror, fetched_any
                return
    raise EnvironmentFailure(f"{mirror.path} was removed each time it was fetched",
                             hint="let the `assemble cache prune` or `cache clean` running meanwhile finish, then run "
                                  "the command again")


def _fetch_commit(tree: WorkTree, mirror: mirrors.Mirror, sha: str) -> None:
    """Copy ``sha`` (and what it needs) from the mirror into the checkout when it lacks it."""
    if tree.rev(sha) is None:
        tree.run("fetch", "--quiet", END_OF_OPTIONS, str(mirror.path), sha)


def _clone(mirror: mirrors.Mirror, path: Path, state: CheckoutState, fd: int) -> None:
    """A clone of the mirror, its objects hard-linked (git copies them across file systems),
    made aside with its state file and renamed into place: ``path`` never holds a checkout
    without one. A clone cut short stays aside, removed by the next run (_remove_leftovers)."""
    staging = temporary_path(path)
    shutil.rmtree(staging, ignore_errors=True)
    try:
        result = run_git(["clone", "--no-checkout", "--quiet", "--", str(mirror.path), str(staging)],
                         isolated_env(), cwd=path.parent, text=True, pass_fds=(fd,))
        if result.returncode != 0:
            raise GitFailed(str(path), ["clone"], result)
        state.save(staging)
        os.rename(staging, path)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _remove_leftovers(path: Path) -> None:
    """What a killed run left next to ``path``: its clone made aside (``.NAME.PID.tmp``; an
    older assemble's ``.NAME.partial``). Called under the checkout's flock: no git process of
    that run is still writing there."""
    remove_stale(path.parent, re.compile(rf"^\.{re.escape(path.name)}\.(?P<pid>\d+)\.tmp$"))
    shutil.rmtree(path.parent / f".{path.name}.partial", ignore_errors=True)


def _holds_nothing(path: Path) -> bool:
    """A directory at forks/<dep> without a state file that can hold no work: empty, or only a
    ``.git`` with no index and no commit checked out (a clone cut short)."""
    try:
        entries = os.listdir(path)
    except OSError:
        return False
    if not entries:
        return True
    git_dir = path / ".git"
    if entries != [".git"] or git_dir.is_symlink() or not git_dir.is_dir() or os.path.lexists(git_dir / "index"):
        return False
    from assembler.git.reproducible import read_ref

    try:
        head = (git_dir / "HEAD").read_text(encoding="utf-8").strip()
    except OSError:
        return True  # not even a HEAD: git cannot have committed anything there
    return head.startswith("ref: ") and read_ref(git_dir, head.removeprefix("ref: ").strip()) is None


def _clear_interrupted(path: Path, state: CheckoutState, on_step: Callable[[str], None]) -> None:
    """A checkout whose state says applying was being made by assemble when it stopped (the
    flock held: none of that run's git processes is alive): remove the lock files git could
    not remove (a git killed with SIGKILL) and the ``git am`` that was cut short (by hand:
    ``git am --quit`` itself fails on a session cut at the wrong moment)."""
    git_dir = path / ".git"
    for directory, dirnames, filenames in os.walk(git_dir):
        if directory == str(git_dir):
            dirnames[:] = [name for name in dirnames if name != "objects"]
        for name in filenames:
            if name.endswith(".lock"):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(os.path.join(directory, name))
    if interrupted_series_am(path, state):
        on_step("abort interrupted git am")
        shutil.rmtree(git_dir / "rebase-apply")


def refuse_to_lose_work(dep: Dependency, path: Path, state: CheckoutState) -> None:
    """Raise when resetting ``path`` would lose work of the user's: a git operation stopped in
    it, a series resolved by hand, edits, or commits that are not in the series."""
    tree = WorkTree(path)
    operation = operation_in(tree.git_dir)
    if operation is not None:
        files = tree.conflicted_files()
        raise ConflictError(
            f"{path} is stopped in the middle of a git {operation}"
            + (f" (conflicts in {', '.join(files)})" if files else ""),
            hint=(
                f"finish it (cd {path}; git add <files>; git {operation} --continue) then "
                f"`assemble export {dep.name}`, or give up with `git -C {path} {operation} --abort`"
            ),
        )
    if state.status == CheckoutStatus.APPLYING:
        return  # an interrupted checkout of ours: nothing of the user's is in it yet
    head = read_head(path)
    if state.status == CheckoutStatus.STOPPED:
        if head == state.base and not tree.dirty():
            return  # the user aborted the stopped `git am`: nothing was kept
        raise WouldLoseWorkError(
            f"{path} holds a series resolved by hand that is not exported yet",
            hint=f"run `assemble export {dep.name}` to save the resolution, or `git -C {path} reset --hard "
                 f"{state.base[:12]}` to discard it",
        )
    dirty = tree.dirty()
    if dirty:
        raise WouldLoseWorkError(
            f"{path} has uncommitted changes ({', '.join(dirty[:5])}{', ...' if len(dirty) > 5 else ''})",
            hint=f"commit them on branch {branch_name(dep)} and run `assemble export {dep.name}`, or stash them",
        )
    if head != state.head:
        raise WouldLoseWorkError(
            f"{path} has commits that are not in patches/{dep.name} (HEAD {head[:12]}, series ends at "
            f"{(state.head or '')[:12]})",
            hint=f"run `assemble export {dep.name}` to save them as patches first",
        )


def _point_remotes(workspace: Workspace, dep: Dependency, tree: WorkTree, mirror: mirrors.Mirror) -> None:
    """origin = the source mirror; when the source is a fork, also ``upstream`` (the upstream
    mirror) and ``fork`` (the source mirror), fetching the mirrors' branches as upstream/* and
    fork/* (`git fetch upstream fork` in the checkout)."""
    tree.run("config", "--replace-all", "remote.origin.url", str(mirror.path))
    if dep.is_fork:
        upstream = mirrors.open_mirror(workspace.manifest, dep.upstream_url)
        # once, so `upstream/<track>` and `patches --offline` have the tracked branch
        if upstream.last_fetched() is None:
            with contextlib.suppress(AssembleError):  # unreachable: the fork still checks out; `patches` fetches it
                mirrors.fetch(upstream)
        _set_remote(tree, "upstream", upstream)
        _set_remote(tree, "fork", mirror)


def _set_remote(tree: WorkTree, name: str, mirror: mirrors.Mirror) -> None:
    """Remote ``name`` at a mirror, whose branches live under refs/remotes/origin/ there."""
    tree.run("config", "--replace-all", f"remote.{name}.url", str(mirror.path))
    tree.run("config", "--replace-all", f"remote.{name}.fetch", f"+refs/remotes/origin/*:refs/remotes/{name}/*")


def name_remotes(workspace: Workspace, dep: Dependency, former_source: str) -> None:
    """After a rebase moved ``dep`` off the fork ``former_source``: origin and ``upstream`` are
    the upstream mirror, ``fork`` the fork's; both fetched, so `git log upstream/main` and
    `git log fork/main` work in forks/<dep> (objects are copied from the mirrors)."""
    tree = WorkTree(workspace.fork_path(dep))
    upstream = mirrors.open_mirror(workspace.manifest, dep.upstream_url)
    tree.run("config", "--replace-all", "remote.origin.url", str(upstream.path))
    _set_remote(tree, "upstream", upstream)
    _set_remote(tree, "fork", mirrors.open_mirror(workspace.manifest, former_source))
    tree.run("fetch", "--quiet", "--no-tags", "--multiple", "--", "upstream", "fork")


def _init_submodules(workspace: Workspace, dep: Dependency, tree: WorkTree) -> None:
    """Each listed submodule comes from its own cached mirror (so [mirrors] applies to it too),
    cloned from it (hard links: the submodule does not depend on the cache either)."""
    for sub in dep.submodules:
        name = _submodule_name(tree, sub)
        url = tree.out("config", "-f", ".gitmodules", "--get", f"submodule.{name}.url")
        found = tree.run("rev-parse", "--verify", "--quiet", END_OF_OPTIONS, f"HEAD:{sub}", check=False)
        sha = found.stdout.strip()
        if found.returncode != 0 or not sha:
            raise ManifestError(f"deps.toml: deps.{dep.name}.submodules: {sub!r} is not in the checkout at "
                                f"{dep.commit[:12]}",
                                hint="fix `submodules` in deps.toml (paths from .gitmodules)")
        try:
            mirrors.ensure_commit(workspace.manifest, url, sha)
        except AssembleError as error:  # name the dependency, the submodule and where it was looked for
            mapped = workspace.manifest.resolve_url(url) != url
            raise type(error)(
                f"{dep.name}: submodule {sub} ({url} at {sha[:12]}): {error.message}",
                # a mapping that exists but serves an incomplete copy needs that copy fixed, not another mapping
                hint=error.hint if mapped or "the mirror is incomplete" in error.message else
                f'give the submodule a mirror: [mirrors] "{url}" = "/path/to/a/copy" in deps.toml '
                "(submodule URLs are rewritten like any other; with and without .git are different URLs)",
            ) from None
        with _held_mirror(workspace.manifest, url, sha) as (sub_mirror, _):
            tree.run("config", f"submodule.{name}.url", str(sub_mirror.path))
            tree.run("-c", "protocol.file.allow=always", "submodule", "update", "--init", "--quiet", "--", sub)


def _submodule_name(tree: WorkTree, path: str) -> str:
    listed = tree.run("config", "-f", ".gitmodules", "--get-regexp", r"submodule\..*\.path", check=False)
    output = listed.stdout if listed.returncode == 0 else ""  # no .gitmodules, or no submodule in it
    for line in output.splitlines():
        key, _, value = line.partition(" ")
        if value == path:
            return key[len("submodule.") : -len(".path")]
    raise ManifestError(f"deps.toml: submodules: no submodule at {path} in .gitmodules",
                        hint="fix `submodules` in deps.toml")


def apply_series(tree: WorkTree, dep: Dependency, path: Path, state: CheckoutState) -> dict[str, str]:
    """One ``git am -3`` over the whole series, so that after a conflict ``git am --continue``
    applies the rest of it too. ``--keep-non-patch`` strips only ``[PATCH...]`` from subjects
    (``[FIX] ...`` stays, as in the commit that was exported or rebased, so the SHAs agree);
    ``--keep-cr`` keeps CRLF line endings inside the patched files (git's mailsplit would
    otherwise strip them, changing the content). Returns commit SHA -> patch file name.

    On a failed hunk the state becomes "stopped" and the checkout is left in ``git am`` for the
    user. Any other failure (a full disk, a file size limit, a signal, a patch git cannot
    read) is raised as it is and the state stays "applying": the re-run applies it again."""
    if not dep.series:
        return {}
    result = tree.run("am", *AM_ARGS, "--", *(str(dep.patches_dir / n) for n in dep.series), check=False)
    if result.returncode != 0:
        output = f"{result.stdout}\n{result.stderr}"
        refused = refusal(f"{path}: git am failed: {git_error_line(result.stderr or result.stdout, result.returncode)}",
                          output, result.returncode)
        if refused is None and result.returncode > 0 and PATCH_FAILED in output:
            refused = _refused_write(path / ".git", f"{path}: git am stopped at a patch")
        if refused is not None:
            raise refused
        if result.returncode < 0 or PATCH_FAILED not in output:
            raise GitFailed(str(path), ["am"], result,
                            hint=f"fix the series in {dep.patches_dir}, then run `assemble checkout {dep.name}` "
                            "again")
        done = int(tree.out("rev-list", "--count", END_OF_OPTIONS, f"{state.base}..HEAD"))
        name = dep.series[min(done, len(dep.series) - 1)]
        state.status = CheckoutStatus.STOPPED
        state.save(path)
        files = tree.conflicted_files() or _files_in_patch(dep.patches_dir / name)
        raise ConflictError(
            f"{dep.name}: patch {name} does not apply"
            + (f"; conflicts in {', '.join(files)}" if files else "")
            + f" ({git_error_line(result.stderr or result.stdout, result.returncode)})",
            hint=(
                f"resolve in {path} (edit, `git add <files>`, `git am --continue`, which applies the rest of the "
                f"series), then `assemble export {dep.name}`; or `git -C {path} am --abort`, fix the patch and re-run "
                "`assemble checkout`"
            ),
        )
    commits = tree.out("rev-list", "--reverse", END_OF_OPTIONS, f"{state.base}..HEAD").split()
    if len(commits) == len(dep.series):
        return dict(zip(commits, dep.series, strict=True))
    return _match_commits(tree, dep, path, state, commits)


def _refused_write(directory: Path, what: str) -> EnvironmentFailure | None:
    """Whether the file system under ``directory`` refuses a small write now (full, over quota,
    read-only, a file size limit): then ``what`` failed by the machine's doing, not as a
    conflict, whatever git printed about it (git am can say a patch failed when it could
    not write the result)."""
    import errno

    probe = directory / f".assemble-probe.{os.getpid()}"
    try:
        with open(probe, "wb") as handle:
            handle.write(b"\0" * 65536)
            handle.flush()
            os.fsync(handle.fileno())
    except OSError as error:
        message = f"{what}, and {directory} refuses writes: {error.strerror or error}"
        if error.errno == errno.EFBIG:
            return EnvironmentFailure(message, hint=FILE_SIZE_LIMIT_HINT)
        refused = from_os_error(error)
        return EnvironmentFailure(message, hint=refused.hint) if isinstance(refused, EnvironmentFailure) else None
    finally:
        with contextlib.suppress(OSError):
            probe.unlink()
    return None


def _match_commits(tree: WorkTree, dep: Dependency, path: Path, state: CheckoutState,
                   commits: list[str]) -> dict[str, str]:
    """Commit SHA -> patch file name when ``git am`` made fewer commits than the series has
    patches: it skips a patch that changes nothing at the pin ("Patch already applied"), as
    after a pin edited by hand to an upstream commit where that patch landed. Each commit keeps
    its patch's author and author date (and subject), so the commits are matched to the series
    in order; the patches left over are the ones already in the pinned commit, which
    ``CheckoutResult.already_applied`` reports and `assemble rebase DEP --onto PIN` drops."""
    from assembler.series.headers import parse_patch_header

    listed = tree.out("log", "--reverse", "--format=%an <%ae>%x00%aD%x00%s", END_OF_OPTIONS,
                      f"{state.base}..HEAD").splitlines()
    identities = [tuple(line.split("\0")) for line in listed]
    mapping: dict[str, str] = {}
    index = 0
    for name in dep.series:
        header = parse_patch_header(dep.patches_dir / name)
        if index < len(commits) and (identities[index][:2] == (header.author, header.date)
                                     or identities[index][2:] == (header.subject,)):
            mapping[commits[index]] = name
            index += 1
    if index == len(commits):
        return mapping
    state.status = CheckoutStatus.STOPPED  # not "applying": a re-run must not redo this for ever
    state.save(path)
    raise ConflictError(
        f"{dep.name}: git am made {len(commits)} commits from {len(dep.series)} patches, and commit "
        f"{commits[index][:12]} matches no patch of the series by author, date or subject",
        hint=f"`assemble rebase {dep.name} --onto {dep.commit[:12]}` replays the series onto the pin and drops what is "
             f"already there; or `git -C {path} reset --hard {state.base[:12]}`, fix the series and re-run `assemble "
             "checkout`",
    )


def _files_in_patch(patch: Path) -> list[str]:
    return [line.split(" b/", 1)[1] for line in patch.read_text(errors="replace").splitlines()
            if line.startswith("diff --git ")]
