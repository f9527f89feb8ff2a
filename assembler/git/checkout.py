"""forks/<dep>: a clone sharing the mirror's objects, on branch ``assemble/<dep>`` at the pinned
commit, with the series applied as commits (authorship and dates preserved, three-way).

The checkout remembers what it was made from (``.git/assemble-state.json``), which is how a
re-run knows it is up to date, and how user commits or edits are told apart from ours.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Callable
from pathlib import Path

import git

from assembler.errors import AssembleError, ConflictError, ManifestError, WouldLoseWorkError
from assembler.fsutil import ignored_dir
from assembler.git import mirrors
from assembler.git.process import END_OF_OPTIONS, WorkTree
from assembler.git.runner import conflicted_files, git_error_line, in_progress_operation, repo_at
from assembler.git.state import (
    CheckoutResult,
    CheckoutState,
    CheckoutStatus,
    already_applied,
    branch_name,
    interrupted_series_am,
    is_up_to_date,
    series_digest,
)
from assembler.manifest import Dependency
from assembler.workspace import Workspace

# How a series becomes commits: deterministic for any subject and any file content.
AM_ARGS = ("-3", "--quiet", "--committer-date-is-author-date", "--keep-non-patch", "--keep-cr")


def checkout(workspace: Workspace, dep: Dependency, on_step: Callable[[str], None] = lambda _: None) -> CheckoutResult:
    """Make forks/<dep> match the manifest, never discarding work that is not in the series."""
    path = workspace.fork_path(dep)
    state = CheckoutState.load(path) if path.exists() else None
    if path.exists() and state is None:
        raise WouldLoseWorkError(
            f"{path} exists but was not made by assemble",
            hint=f"move it away (or delete it) and run `assemble checkout {dep.name}` again",
        )
    digest = series_digest(dep)
    if state is not None:
        if is_up_to_date(state, dep, digest):
            # Nothing to change: local edits and commits stay where they are (build uses them).
            return CheckoutResult.unchanged(dep, path, state)
        if interrupted_series_am(path, state):  # our own am, cut short: drop it, the series is applied again below
            on_step("abort interrupted git am")
            WorkTree(path).run("am", "--quit")
        refuse_to_lose_work(repo_at(path), dep, path, state)
    on_step("mirror")
    mirror, fetched = mirrors.ensure_commit(workspace.manifest, dep.source, dep.commit)
    action = "updated" if path.exists() else "created"
    if not path.exists():
        on_step("clone")
        _clone(mirror, path)
    repo = repo_at(path)
    _point_remotes(workspace, dep, repo, mirror)
    state = CheckoutState(base=dep.commit, source=dep.source, series_digest=digest)
    state.save(path)
    repo.git.checkout("--quiet", "--force", "-B", branch_name(dep), dep.commit, "--")
    repo.git.clean("-fdq")
    if dep.submodules:
        on_step("submodules")
        _init_submodules(workspace, dep, repo)
    on_step("series")
    state.applied = apply_series(repo, dep, path, state)
    state.head = repo.head.commit.hexsha
    state.status = CheckoutStatus.READY
    state.save(path)
    return CheckoutResult(dep.name, path, action, state.head, len(state.applied), fetched=fetched,
                          already_applied=already_applied(dep, state))


def refuse_to_lose_work(repo: git.Repo, dep: Dependency, path: Path, state: CheckoutState) -> None:
    operation = in_progress_operation(repo)
    if operation is not None:
        files = conflicted_files(repo)
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
    head = repo.head.commit.hexsha
    if state.status == CheckoutStatus.STOPPED:
        if head == state.base and not WorkTree(path).dirty():
            return  # the user aborted the stopped `git am`: nothing was kept
        raise WouldLoseWorkError(
            f"{path} holds a series resolved by hand that is not exported yet",
            hint=f"run `assemble export {dep.name}` to save the resolution, or `git -C {path} reset --hard {state.base[:12]}` to discard it",
        )
    dirty = WorkTree(path).dirty()
    if dirty:
        raise WouldLoseWorkError(
            f"{path} has uncommitted changes ({', '.join(dirty[:5])}{', ...' if len(dirty) > 5 else ''})",
            hint=f"commit them on branch {branch_name(dep)} and run `assemble export {dep.name}`, or stash them",
        )
    if head != state.head:
        raise WouldLoseWorkError(
            f"{path} has commits that are not in patches/{dep.name} (HEAD {head[:12]}, series ends at {(state.head or '')[:12]})",
            hint=f"run `assemble export {dep.name}` to save them as patches first",
        )


def _clone(mirror: mirrors.Mirror, path: Path) -> None:
    """Clone sharing the mirror's object store (alternates): instant, and no second copy."""
    tmp = ignored_dir(path.parent) / f".{path.name}.partial"
    shutil.rmtree(tmp, ignore_errors=True)
    git.Repo.clone_from(str(mirror.path), str(tmp), shared=True, no_checkout=True)
    tmp.rename(path)


def _point_remotes(workspace: Workspace, dep: Dependency, repo: git.Repo, mirror: mirrors.Mirror) -> None:
    """origin = the source mirror; when the source is a fork, also ``upstream`` (the upstream
    mirror) and ``fork`` (the source mirror), fetching the mirrors' branches as upstream/* and
    fork/* (`git fetch upstream fork` in the checkout)."""
    with repo.config_writer() as config:
        config.set_value('remote "origin"', "url", str(mirror.path))
    if dep.is_fork:
        upstream = mirrors.open_mirror(workspace.manifest, dep.upstream_url)
        if upstream.last_fetched() is None:  # once, so `upstream/<track>` and `patches --offline` have the tracked branch
            with contextlib.suppress(AssembleError):  # unreachable: the fork still checks out; `patches` fetches it
                mirrors.fetch(upstream)
        _set_remote(repo, "upstream", upstream)
        _set_remote(repo, "fork", mirror)


def _set_remote(repo: git.Repo, name: str, mirror: mirrors.Mirror) -> None:
    """Remote ``name`` at a mirror, whose branches live under refs/remotes/origin/ there."""
    with repo.config_writer() as config:
        section = f'remote "{name}"'
        config.set_value(section, "url", str(mirror.path))
        config.set_value(section, "fetch", f"+refs/remotes/origin/*:refs/remotes/{name}/*")


def name_remotes(workspace: Workspace, dep: Dependency, former_source: str) -> None:
    """After a rebase moved ``dep`` off the fork ``former_source``: origin and ``upstream`` are
    the upstream mirror, ``fork`` the fork's; both fetched, so `git log upstream/main` and
    `git log fork/main` work in forks/<dep> (objects are shared with the mirrors: no copy)."""
    repo = repo_at(workspace.fork_path(dep))
    upstream = mirrors.open_mirror(workspace.manifest, dep.upstream_url)
    with repo.config_writer() as config:
        config.set_value('remote "origin"', "url", str(upstream.path))
    _set_remote(repo, "upstream", upstream)
    _set_remote(repo, "fork", mirrors.open_mirror(workspace.manifest, former_source))
    repo.git.fetch("--quiet", "--no-tags", "--multiple", "--", "upstream", "fork")


def _init_submodules(workspace: Workspace, dep: Dependency, repo: git.Repo) -> None:
    """Each listed submodule comes from its own cached mirror (so [mirrors] applies to it too)."""
    for sub in dep.submodules:
        name = _submodule_name(repo, sub)
        url = repo.git.config("-f", ".gitmodules", "--get", f"submodule.{name}.url")
        try:
            sha = repo.git.rev_parse("--verify", "--quiet", END_OF_OPTIONS, f"HEAD:{sub}")
        except git.GitCommandError:
            raise ManifestError(f"deps.toml: deps.{dep.name}.submodules: {sub!r} is not in the checkout at {dep.commit[:12]}",
                                hint="fix `submodules` in deps.toml (paths from .gitmodules)") from None
        try:
            sub_mirror, _ = mirrors.ensure_commit(workspace.manifest, url, sha)
        except AssembleError as error:  # name the dependency, the submodule and where it was looked for
            mapped = workspace.manifest.resolve_url(url) != url
            raise type(error)(
                f"{dep.name}: submodule {sub} ({url} at {sha[:12]}): {error.message}",
                # a mapping that exists but serves an incomplete copy needs that copy fixed, not another mapping
                hint=error.hint if mapped or "the mirror is incomplete" in error.message else
                f'give the submodule a mirror: [mirrors] "{url}" = "/path/to/a/copy" in deps.toml '
                "(submodule URLs are rewritten like any other; with and without .git are different URLs)",
            ) from None
        repo.git.config(f"submodule.{name}.url", str(sub_mirror.path))
        repo.git.execute(["git", "-c", "protocol.file.allow=always", "submodule", "update", "--init", "--quiet", "--", sub])


def _submodule_name(repo: git.Repo, path: str) -> str:
    try:
        output = str(repo.git.config("-f", ".gitmodules", "--get-regexp", r"submodule\..*\.path"))
    except git.GitCommandError:  # no .gitmodules, or no submodule in it
        output = ""
    for line in output.splitlines():
        key, value = line.split(" ", 1)
        if value == path:
            return key[len("submodule.") : -len(".path")]
    raise ManifestError(f"deps.toml: submodules: no submodule at {path} in .gitmodules", hint="fix `submodules` in deps.toml")


def apply_series(repo: git.Repo, dep: Dependency, path: Path, state: CheckoutState) -> dict[str, str]:
    """One ``git am -3`` over the whole series, so that after a conflict ``git am --continue``
    applies the rest of it too. ``--keep-non-patch`` strips only ``[PATCH...]`` from subjects
    (``[FIX] ...`` stays, as in the commit that was exported or rebased, so the SHAs agree);
    ``--keep-cr`` keeps CRLF line endings inside the patched files (git's mailsplit would
    otherwise strip them, changing the content). Returns commit SHA -> patch file name. On a failed hunk the
    state becomes "stopped" and the checkout is left in ``git am`` for the user."""
    if not dep.series:
        return {}
    try:
        repo.git.am(*AM_ARGS, "--", *(str(dep.patches_dir / n) for n in dep.series))
    except git.GitCommandError as exc:
        done = int(repo.git.rev_list("--count", END_OF_OPTIONS, f"{state.base}..HEAD"))
        name = dep.series[min(done, len(dep.series) - 1)]
        state.status = CheckoutStatus.STOPPED
        state.save(path)
        files = conflicted_files(repo) or _files_in_patch(dep.patches_dir / name)
        raise ConflictError(
            f"{dep.name}: patch {name} does not apply"
            + (f"; conflicts in {', '.join(files)}" if files else "")
            + f" ({git_error_line(exc.stderr or exc.stdout, exc.status if isinstance(exc.status, int | str) else None)})",
            hint=(
                f"resolve in {path} (edit, `git add <files>`, `git am --continue`, which applies the rest of the "
                f"series), then `assemble export {dep.name}`; or `git -C {path} am --abort`, fix the patch and re-run "
                "`assemble checkout`"
            ),
        ) from None
    commits = repo.git.rev_list("--reverse", END_OF_OPTIONS, f"{state.base}..HEAD").split()
    if len(commits) == len(dep.series):
        return dict(zip(commits, dep.series, strict=True))
    return _match_commits(repo, dep, path, state, commits)


def _match_commits(repo: git.Repo, dep: Dependency, path: Path, state: CheckoutState, commits: list[str]) -> dict[str, str]:
    """Commit SHA -> patch file name when ``git am`` made fewer commits than the series has
    patches: it skips a patch that changes nothing at the pin ("Patch already applied"), as
    after a pin edited by hand to an upstream commit where that patch landed. Each commit keeps
    its patch's author and author date (and subject), so the commits are matched to the series
    in order; the patches left over are the ones already in the pinned commit, which
    ``CheckoutResult.already_applied`` reports and `assemble rebase DEP --onto PIN` drops."""
    from assembler.series.headers import parse_patch_header

    listed = repo.git.log("--reverse", "--format=%an <%ae>%x00%aD%x00%s", END_OF_OPTIONS, f"{state.base}..HEAD").splitlines()
    identities = [tuple(line.split("\0")) for line in listed]
    mapping: dict[str, str] = {}
    index = 0
    for name in dep.series:
        header = parse_patch_header(dep.patches_dir / name)
        if index < len(commits) and (identities[index][:2] == (header.author, header.date) or identities[index][2:] == (header.subject,)):
            mapping[commits[index]] = name
            index += 1
    if index == len(commits):
        return mapping
    state.status = CheckoutStatus.STOPPED  # not "applying": a re-run must not redo this for ever
    state.save(path)
    raise ConflictError(
        f"{dep.name}: git am made {len(commits)} commits from {len(dep.series)} patches, and commit "
        f"{commits[index][:12]} matches no patch of the series by author, date or subject",
        hint=f"`assemble rebase {dep.name} --onto {dep.commit[:12]}` replays the series onto the pin and drops what is already "
             f"there; or `git -C {path} reset --hard {state.base[:12]}`, fix the series and re-run `assemble checkout`",
    )


def _files_in_patch(patch: Path) -> list[str]:
    return [line.split(" b/", 1)[1] for line in patch.read_text(errors="replace").splitlines() if line.startswith("diff --git ")]
