"""Issue 21, hostile inputs round two, the git side: a series patch whose message forges a
``git log`` record, a stored parse that differs from deps.toml, Ctrl-C in the middle of a
checkout, series and patch files that are symbolic links out of the workspace, mirrors shared
between workspaces that map one URL to different repositories, install destinations that
escape, and control characters quoted to the terminal. Each runs the real CLI on real git."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import KERNEL_V1, GitWorkspace, make_git_workspace, run_assemble
from tests.gitrepo import git, make_patch


def _add_patch(ws: GitWorkspace, message: str, files: dict[str, str | None]) -> Path:
    """A third patch on top of the series, made by committing on the fork's patched branch."""
    assert ws.assemble("checkout").returncode == 0
    fork_head = git(ws.fork, "rev-parse", "HEAD")
    staging = ws.root.parent / "staging-extra"
    from tests.gitrepo import Repo
    repo = Repo.__new__(Repo)
    repo.path, repo.clock = ws.fork, 1_700_100_000
    patch = make_patch(repo, fork_head, message, files, staging)
    target = ws.patches / "0003-extra.patch"
    patch.rename(target)
    with (ws.patches / "series").open("a") as series:
        series.write(target.name + "\n")
    return target


# -- item 1: a patch message that forges a git log record -----------------------------------------

def _forging_patch(ws: GitWorkspace, pwned: Path) -> Path:
    """The issue's patch: its message holds the old record marker and a forged record whose
    "sha" is an ``exec`` line; the files it adds supply the NULs and the forged subject."""
    body = f"Add a note\n\nsee below\x01\x02\x03:/upstream advance\nexec touch {pwned}\n"
    return _add_patch(ws, body, {f"exec true {n}": "a note\n" for n in range(6)})


@pytest.mark.parametrize("conflict", [False, True], ids=["clean", "stopped-then-abort"])
def test_patch_message_cannot_inject_into_the_rebase_todo(git_workspace: GitWorkspace, tmp_path: Path,
                                                          conflict: bool) -> None:
    ws = git_workspace
    pwned = tmp_path / "PWNED"
    hostile = _forging_patch(ws, pwned)
    hostile_bytes, manifest_before = hostile.read_bytes(), ws.manifest.read_text()
    assert ws.assemble("checkout").returncode == 0
    ws.upstream.commit("upstream advance",
                       {"exec true 0": "upstream's own\n"} if conflict else {"docs/more.md": "more\n"})
    result = ws.assemble("rebase", "kern")
    assert not pwned.exists(), (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr, result.stderr
    if not conflict:
        assert result.returncode == 0, result.stderr
        assert "applied (3)" in result.stdout and hostile.name in (ws.patches / "series").read_text()
        assert b"\x01\x02\x03:/upstream advance\nexec touch" in hostile.read_bytes()  # the message kept whole
        return
    assert result.returncode == 5, (result.stdout, result.stderr)
    assert hostile.name in result.stderr + result.stdout
    abort = ws.assemble("rebase", "--abort", "kern")  # its own journal reads back
    assert abort.returncode == 0, abort.stderr
    assert hostile.read_bytes() == hostile_bytes and ws.manifest.read_text() == manifest_before
    assert "rebasing" not in ws.assemble("deps").stdout
    assert not pwned.exists()


def test_git_log_records_are_framed_by_position(git_workspace: GitWorkspace, tmp_path: Path) -> None:
    """load_commits on the forging commit and on a commit object whose message and author hold
    NULs (written with hash-object): one patch per commit, its own SHA, parent and files."""
    from assembler.git.process import GitView
    from assembler.upstreaming.patchset import from_commits

    ws = git_workspace
    _forging_patch(ws, tmp_path / "PWNED")
    assert ws.assemble("checkout").returncode == 0
    head = git(ws.fork, "rev-parse", "HEAD")
    tree = git(ws.fork, "rev-parse", "HEAD^{tree}")
    raw = (f"tree {tree}\nparent {head}\nauthor Ev\0il <e@x> 1700000000 +0000\ncommitter C <c@x> 1700000000 +0000\n\n"
           f"subj\0{head}\0\n\nbody\x01\x02\x03{head}\0x\n")
    nul = subprocess.run(["git", "hash-object", "-t", "commit", "-w", "--stdin", "--literally"], cwd=ws.fork,
                         input=raw.encode(), capture_output=True, check=True).stdout.decode().strip()
    patches = from_commits(GitView(ws.fork / ".git"), nul, [ws.base])
    assert [p.commit for p in patches[-2:]] == [head, nul]
    assert len(patches) == 4
    forged = patches[-2]
    assert forged.subject == "Add a note" and forged.parent == git(ws.fork, "rev-parse", "HEAD~1")
    assert forged.files == tuple(f"exec true {n}" for n in range(6))
    assert patches[-1].parent == head and patches[-1].files == ()


# -- item 2: a stored parse added by a pull request -------------------------------------------------

def test_a_stored_parse_in_the_workspace_is_never_used(git_workspace: GitWorkspace, tmp_path: Path) -> None:
    """The issue's pull request: it adds .assemble/deps.toml.json holding deps.toml's exact text
    but another upstream and commit. assemble uses what deps.toml says."""
    ws = git_workspace
    import tomllib
    text = ws.manifest.read_text()
    data = tomllib.loads(text)
    evil = tmp_path / "evil"
    from tests.gitrepo import Repo
    other = Repo(evil).commit("not what the reviewer saw", {"x": "x\n"})
    data["deps"]["kern"].update(upstream=str(evil), commit=other)
    (ws.root / ".assemble").mkdir(exist_ok=True)
    (ws.root / ".assemble" / "deps.toml.json").write_text(
        json.dumps({"format": 1, "python": sys.version, "text": text, "data": data}))
    listed = ws.assemble("deps", "--json")
    assert listed.returncode == 0, listed.stderr
    row = json.loads(listed.stdout)["deps"][0]
    assert other not in listed.stdout and str(evil) not in listed.stdout, row
    assert ws.base in listed.stdout
    assert ws.assemble("checkout").returncode == 0
    assert git(ws.fork, "rev-parse", f"{ws.base}^{{commit}}") == ws.base
    assert git(ws.fork, "cat-file", "-t", other, check=False) != "commit"


# -- item 5: Ctrl-C in the middle of the series' git am ---------------------------------------------

def _long_series(ws: GitWorkspace, count: int) -> None:
    """Replace the series by ``count`` small patches (made in one fast-import, one format-patch)."""
    lines = [f"reset refs/heads/long\nfrom {ws.base}\n"]
    for n in range(count):
        message = f"Add note {n}\n"
        data = f"note {n}\n"
        lines.append(f"commit refs/heads/long\ncommitter Dev <dev@x> {1_700_000_000 + n} +0000\n"
                     f"data {len(message)}\n{message}M 100644 inline notes/{n}.txt\ndata {len(data)}\n{data}\n")
    subprocess.run(["git", "fast-import", "--quiet"], cwd=ws.upstream.path, input="".join(lines).encode(), check=True)
    for old in ws.patches.iterdir():
        old.unlink()
    git(ws.upstream.path, "format-patch", "--no-signature", "--zero-commit", "--no-numbered", "--full-index", "-q",
        "-o", str(ws.patches), f"{ws.base}..long")
    names = sorted(p.name for p in ws.patches.iterdir())
    (ws.patches / "series").write_text("\n".join(names) + "\n")
    git(ws.upstream.path, "branch", "-q", "-D", "long")


def test_ctrl_c_during_the_series_is_recovered_by_a_re_run(git_workspace: GitWorkspace) -> None:
    """SIGINT to the process group (what Ctrl-C does) while `git am` applies a 300-patch series:
    exit 130, the checkout is left in the middle of git's am; the re-run aborts that am (it is
    assemble's own: the state says applying, the am began at the pinned commit and HEAD is its
    last commit) and applies the series again."""
    ws = git_workspace
    _long_series(ws, 300)
    env = {**os.environ, "ASSEMBLE_CACHE": str(ws.cache), "COLUMNS": "200"}
    process = subprocess.Popen([sys.executable, "-m", "assembler", "-C", str(ws.root), "checkout"], env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    applying = ws.fork / ".git" / "rebase-apply" / "applying"
    next_patch = ws.fork / ".git" / "rebase-apply" / "next"
    deadline = time.monotonic() + 120  # a bound on waiting for the am, not a measured duration
    while process.poll() is None and time.monotonic() < deadline:
        if applying.exists() and next_patch.exists() and next_patch.read_text().strip() not in ("", "1"):
            break  # git am has committed some patches: Ctrl-C now
        time.sleep(0.005)
    os.killpg(process.pid, signal.SIGINT)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 130, stderr
    assert "re-run the same command" in stderr and "--continue" not in stderr  # checkout has no --continue
    assert applying.exists(), "the interrupt left git am in progress (else this test shows nothing)"
    assert "interrupted" in ws.assemble("deps").stdout

    again = ws.assemble("checkout")
    assert again.returncode == 0, again.stderr
    assert not (ws.fork / ".git" / "rebase-apply").exists()
    assert git(ws.fork, "rev-list", "--count", f"{ws.base}..HEAD") == "300"
    assert "ready" in ws.assemble("deps").stdout


def _interrupt_the_series(ws: GitWorkspace) -> None:
    """Ctrl-C (SIGINT to the process group) once git am has committed some of a 300-patch series."""
    _long_series(ws, 300)
    env = {**os.environ, "ASSEMBLE_CACHE": str(ws.cache), "COLUMNS": "200"}
    process = subprocess.Popen([sys.executable, "-m", "assembler", "-C", str(ws.root), "checkout"], env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    next_patch = ws.fork / ".git" / "rebase-apply" / "next"
    deadline = time.monotonic() + 120  # a bound on waiting for the am, not a measured duration
    while process.poll() is None and time.monotonic() < deadline:
        if next_patch.exists() and next_patch.read_text().strip() not in ("", "1", "2"):
            break
        time.sleep(0.005)
    os.killpg(process.pid, signal.SIGINT)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 130, stderr
    assert (ws.fork / ".git" / "rebase-apply").is_dir(), ("the interrupt left git am in progress (else the test shows "
                                                          "nothing)")


@pytest.mark.parametrize("cut", ["abort-safety", "ORIG_HEAD", "author-script", "applying", "next"])
@pytest.mark.integration
def test_an_am_whose_session_files_were_cut_is_still_recovered(git_workspace: GitWorkspace, cut: str) -> None:
    """git writes its session files in place: killed while writing one, it leaves it empty
    (or never wrote it). assemble's own am is told by its commits (assemble's committer, on
    the pinned commit), not by those files, so the re-run still recovers."""
    ws = git_workspace
    _interrupt_the_series(ws)
    target = ws.fork / ".git" / ("ORIG_HEAD" if cut == "ORIG_HEAD" else f"rebase-apply/{cut}")
    if cut in ("abort-safety", "next"):
        target.write_text("")
    else:
        target.unlink(missing_ok=True)
    assert "interrupted" in ws.assemble("deps").stdout
    again = ws.assemble("checkout")
    assert again.returncode == 0, again.stderr
    assert git(ws.fork, "rev-list", "--count", f"{ws.base}..HEAD") == "300"


def test_a_commit_of_the_users_on_an_interrupted_am_is_never_clobbered(git_workspace: GitWorkspace) -> None:
    ws = git_workspace
    _interrupt_the_series(ws)
    (ws.fork / "mine.txt").write_text("mine\n")
    git(ws.fork, "add", "mine.txt")
    git(ws.fork, "commit", "-q", "-m", "My own work")
    head = git(ws.fork, "rev-parse", "HEAD")
    again = ws.assemble("checkout")
    assert again.returncode == 5 and "in the middle of a git am" in again.stderr, again.stderr
    assert git(ws.fork, "rev-parse", "HEAD") == head


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL], ids=["Ctrl-C", "kill -9"])
@pytest.mark.integration
def test_a_series_cut_as_its_git_am_starts_is_recovered_by_a_re_run(git_workspace: GitWorkspace, sig: int) -> None:
    """The signal goes to the process group as soon as git am's session directory appears:
    git may be splitting the mails, writing its session files or its first commit (a session
    without ``applying``, ``abort-safety``, ORIG_HEAD or ``author-script``, and a SIGKILLed
    git's index.lock). The re-run drops that session (``git am --quit`` itself cannot read
    one cut so early) and applies the series again."""
    ws = git_workspace
    _long_series(ws, 300)
    env = {**os.environ, "ASSEMBLE_CACHE": str(ws.cache), "COLUMNS": "200"}
    process = subprocess.Popen([sys.executable, "-m", "assembler", "-C", str(ws.root), "checkout"], env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    session = ws.fork / ".git" / "rebase-apply"
    deadline = time.monotonic() + 120  # a bound on waiting for the am, not a measured duration
    while process.poll() is None and not session.exists() and time.monotonic() < deadline:
        time.sleep(0.001)
    os.killpg(process.pid, sig)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode in (130, -signal.SIGKILL), stderr
    assert "Traceback" not in stderr
    again = ws.assemble("checkout")
    assert again.returncode == 0, again.stderr
    assert not session.exists() and not (ws.fork / ".git" / "index.lock").exists()
    assert git(ws.fork, "rev-list", "--count", f"{ws.base}..HEAD") == "300"
    assert "ready" in ws.assemble("deps").stdout


def test_a_git_am_the_user_started_is_not_aborted(git_workspace: GitWorkspace) -> None:
    """The recovery aborts only its own am: a stopped series (a conflict left for the user) is
    still exit 5, with the user's am in place."""
    ws = git_workspace
    assert ws.assemble("checkout").returncode == 0
    first = sorted(ws.patches.glob("0001-*.patch"))[0]
    first.write_text(first.read_text().replace("-at::Tensor add_one(const at::Tensor& x) {",
                                               "-at::Tensor add_one(const at::Tensor& y) {"))
    stopped = ws.assemble("checkout")
    assert stopped.returncode == 5, stopped.stderr
    again = ws.assemble("checkout")
    assert again.returncode == 5 and "in the middle of a git am" in again.stderr, again.stderr
    assert (ws.fork / ".git" / "rebase-apply").is_dir()


# -- item 6: a series or patch file that is a symbolic link out of the workspace -------------------

@pytest.mark.parametrize("which", ["series", "patch"])
def test_a_series_or_patch_linked_out_of_the_workspace_is_refused(git_workspace: GitWorkspace, tmp_path: Path,
                                                                   which: str) -> None:
    ws = git_workspace
    outside = tmp_path / "outside"
    outside.mkdir()
    if which == "series":
        target = outside / "series"
        (ws.patches / "series").rename(target)
        (ws.patches / "series").symlink_to(target)
        needle = "patches/kern/series: deps.kern.patches: the series is a symbolic link out of the workspace"
    else:
        patch = sorted(ws.patches.glob("0001-*.patch"))[0]
        target = outside / patch.name
        patch.rename(target)
        patch.symlink_to(target)
        needle = f"patches/kern/series:2:1: deps.kern.patches: {patch.name} is a symbolic link out of the workspace"
    for words in (["deps"], ["checkout"]):
        result = ws.assemble(*words)
        assert result.returncode == 2, (result.stdout, result.stderr)
        assert needle in result.stderr and str(target) in result.stderr and "Traceback" not in result.stderr
        assert "hint: copy the file into" in result.stderr and "ASSEMBLE_PATCHES_OUTSIDE_WORKSPACE=1" in result.stderr
    assert not ws.fork.exists()
    allowed = run_assemble("-C", str(ws.root), "checkout",
                           env={"ASSEMBLE_CACHE": str(ws.cache), "ASSEMBLE_PATCHES_OUTSIDE_WORKSPACE": "1"})
    assert allowed.returncode == 0, allowed.stderr


def test_links_inside_the_workspace_are_fine(git_workspace: GitWorkspace) -> None:
    ws = git_workspace
    shared = ws.root / "shared-patches"
    shared.mkdir()
    patch = sorted(ws.patches.glob("0001-*.patch"))[0]
    patch.rename(shared / patch.name)
    patch.symlink_to(Path("..") / ".." / "shared-patches" / patch.name)
    assert ws.assemble("checkout").returncode == 0


# -- item 7: one URL mapped to different repositories by two workspaces ------------------------------

def test_workspaces_mapping_one_url_elsewhere_share_no_mirror(tmp_path: Path) -> None:
    """Workspaces A and B both say upstream = "https://git.invalid/kern"; each maps it through
    [mirrors] to a repository of its own. A's upstream gains a commit; B, offline, is not
    "1 commit behind": the mirrors are keyed by the URL fetched, not the one written."""
    a, b = make_git_workspace(tmp_path / "a"), make_git_workspace(tmp_path / "b")
    b.cache = a.cache  # one user, one cache
    assert b.assemble("checkout").returncode == 0
    assert a.assemble("checkout").returncode == 0
    a.upstream.commit("Only in A's repository", {"a.txt": "a\n"})
    assert a.assemble("patches", "--json").returncode == 0  # A fetches its repository
    a_base = json.loads(a.assemble("patches", "--offline", "--json").stdout)["deps"][0]["base"]
    assert a_base["behind"] == 1
    report = b.assemble("patches", "--offline", "--json")
    assert report.returncode == 0, report.stderr
    assert json.loads(report.stdout)["deps"][0]["base"]["behind"] == 0, report.stdout
    mirrors = sorted(p.name for p in (a.cache / "git").iterdir() if p.name.endswith(".git"))
    assert len(mirrors) == 2, mirrors


def test_a_mirror_of_the_old_layout_forgets_the_other_repositorys_branches(tmp_path: Path) -> None:
    """A mirror made by an older assemble (keyed by the written URL) whose origin is another
    repository: opened for this fetch URL, its branches and fetch stamp are dropped first."""
    from assembler.git import mirrors
    from assembler.manifest.load import load_manifest

    a, b = make_git_workspace(tmp_path / "a"), make_git_workspace(tmp_path / "b")
    b.cache = a.cache
    assert a.assemble("checkout").returncode == 0
    a.upstream.commit("Only in A's repository", {"a.txt": "a\n"})
    assert a.assemble("patches", "--json").returncode == 0
    os.environ["ASSEMBLE_CACHE"] = str(a.cache)
    try:
        manifest_b = load_manifest(b.manifest)
        stale = mirrors.mirror_path(load_manifest(a.manifest), "https://git.invalid/kern")
        ours = mirrors.mirror_path(manifest_b, "https://git.invalid/kern")
        assert stale != ours
        stale.rename(ours)  # as the old layout would have it: B's key, A's repository
        mirror = mirrors.open_mirror(manifest_b, "https://git.invalid/kern")
    finally:
        del os.environ["ASSEMBLE_CACHE"]
    assert mirror.path == ours and mirror.last_fetched() is None
    assert git(ours, "for-each-ref") == ""
    assert git(ours, "config", "remote.origin.url") == str((b.root / "remotes" / "kern").resolve())


# -- item 8: install destinations --------------------------------------------------------------------

@pytest.mark.parametrize(("dest", "reason"), [
    ("pkg\\\\..\\\\..\\\\evil", "contains a backslash"),
    ("pkg\\nx/", "control character '\\n'"),
    ("pkg\\u202ex/", "control character"),
    ("name-1.0.data/data/etc/", "inside a .data directory"),
    ("./Other-2.0.DATA/scripts/", "inside a .data directory"),
    ("kern-1.0.dist-info/", "inside a .dist-info directory"),
    ("C:/Windows/", "leaves the wheel"),
    ("/abs/", "leaves the wheel"),
])
def test_install_destinations_that_escape_or_mislead_are_refused(git_workspace: GitWorkspace, dest: str,
                                                                 reason: str) -> None:
    ws = git_workspace
    ws.manifest.write_text(ws.manifest.read_text() + f'\n[deps.kern.install]\n"*.so" = "{dest}"\n')
    line = len(ws.manifest.read_text().splitlines())
    result = ws.assemble("deps")
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert f"deps.toml:{line}:1: deps.kern.install.*.so: destination" in result.stderr, result.stderr
    assert reason in result.stderr and "Traceback" not in result.stderr
    error = result.stderr.splitlines()[0]
    assert all(ord(c) >= 0x20 and c != "\u202e" for c in error), error  # the error line is one line, escaped
    assert result.stderr.splitlines()[1].startswith("hint: ")


@pytest.mark.parametrize("dest", ["", "pkg/", "pkg/lib/", "kern_data/", "pkg/x.data/"])
def test_ordinary_install_destinations_are_accepted(git_workspace: GitWorkspace, dest: str) -> None:
    ws = git_workspace
    ws.manifest.write_text(ws.manifest.read_text() + f'\n[deps.kern.install]\n"*.so" = "{dest}"\n')
    result = ws.assemble("deps")
    assert result.returncode == 0, result.stderr


# -- item 12: control characters never reach the terminal --------------------------------------------

ESCAPES = "\x1b]0;owned\x07\x1b[2J\r"  # a title change, a screen clear, a carriage return


def _raw_controls(text: str) -> list[str]:
    return [c for c in text if (ord(c) < 0x20 and c != "\n") or 0x7F <= ord(c) <= 0x9F]


def test_an_error_quoting_a_gitmodules_url_is_escaped(git_workspace: GitWorkspace) -> None:
    ws = git_workspace
    sub = ws.upstream.path.parent / "sub"
    from tests.gitrepo import Repo
    sub_head = Repo(sub).commit("sub", {"s.txt": "s\n"})
    (ws.upstream.path / ".gitmodules").write_text('[submodule "sub"]\n\tpath = sub\n\turl = '
                                                  f'https://git.invalid/sub{ESCAPES}\n')
    ws.upstream.git("add", ".gitmodules")
    ws.upstream.git("update-index", "--add", "--cacheinfo", f"160000,{sub_head},sub")
    ws.upstream.git("commit", "-q", "-m", "Add a submodule")
    head = ws.upstream.head()
    text = ws.manifest.read_text().replace(ws.base, head).replace('track = "main"',
                                                                  'track = "main"\nsubmodules = ["sub"]')
    ws.manifest.write_text(text)
    (ws.patches / "series").write_text("")
    for old in ws.patches.glob("*.patch"):
        old.unlink()
    result = ws.assemble("checkout")
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert "submodule sub" in result.stderr and "\\x1b" in result.stderr
    assert _raw_controls(result.stderr) == [], repr(result.stderr)


def test_markdown_subjects_are_escaped(git_workspace: GitWorkspace) -> None:
    ws = git_workspace
    _add_patch(ws, f"Evil {ESCAPES}subject\n\nbody\n", {"evil.txt": "x\n"})
    assert ws.assemble("checkout").returncode == 0
    result = ws.assemble("patches", "--offline", "--format", "markdown")
    assert result.returncode == 0, result.stderr
    assert "Evil \\x1b]0;owned\\x07" in result.stdout, result.stdout
    assert _raw_controls(result.stdout) == [], repr(result.stdout)


def test_rebase_dry_run_dropped_lines_are_escaped(git_workspace: GitWorkspace) -> None:
    ws = git_workspace
    first = sorted(ws.patches.glob("0001-*.patch"))[0]
    assert ws.assemble("checkout").returncode == 0
    ws.upstream.git("am", "-q", str(first))
    # same change (patch-id), hostile subject
    ws.upstream.git("commit", "-q", "--amend", "-m", f"Landed {ESCAPES}as is")
    result = ws.assemble("rebase", "kern", "--dry-run")
    assert result.returncode == 0, result.stderr
    assert "dropped as upstream" in result.stdout and "Landed \\x1b]0;owned\\x07" in result.stdout, result.stdout
    assert _raw_controls(result.stdout + result.stderr) == [], repr(result.stdout)


def test_subjects_with_line_breaks_python_splits_on_stay_one_record(git_workspace: GitWorkspace) -> None:
    """An upstream subject holding \\r, \\x1c or U+2028 (str.splitlines splits on each) and a
    forged "<sha> subject" after it: the first-parent chain and describe() see one commit, its
    whole subject, and only SHAs that git printed as SHAs."""
    from assembler.git.process import GitView
    from assembler.upstreaming.evidence_layers import describe
    from assembler.upstreaming.horizon import first_parent_chain

    ws = git_workspace
    forged = f"Upstream\r{ws.base}\x00x\x1c{ws.base}\u2028=:/Add docs"
    ws.upstream.commit(forged.replace("\x00", ""), {"u.txt": "u\n"})
    tip = ws.upstream.head()
    view = GitView(ws.upstream.path / ".git")
    chain = first_parent_chain(view, ws.base, tip)  # type: ignore[arg-type]
    assert [c.sha for c in chain] == [tip]
    assert chain[0].subject == forged.replace("\x00", "")
    assert describe(view, [tip[:12]]) == {tip[:12]: chain[0]}


def test_a_stored_classification_in_the_workspace_is_never_used(git_workspace: GitWorkspace) -> None:
    """Like the stored parse: a classification record a pull request adds under .assemble/
    (with the right key, and every patch "upstream") is not what `patches` reports."""
    ws = git_workspace
    assert ws.assemble("checkout").returncode == 0
    honest = json.loads(ws.assemble("patches", "--json").stdout)["deps"][0]
    assert {v["status"] for v in honest["patches"]} != {"upstream"}
    stored = [*(ws.cache / "classifications").glob("*.json"), *(ws.root / ".assemble" / "patches").glob("*.json")]
    record = json.loads(stored[0].read_text())
    for verdict in record["verdicts"]:
        verdict.update(status="upstream", how="patch-id", commit=[ws.base, "claimed"])
    planted = ws.root / ".assemble" / "patches" / "kern.json"
    planted.parent.mkdir(parents=True, exist_ok=True)
    planted.write_text(json.dumps(record))
    for old in (ws.cache / "classifications").glob("*.json"):
        old.unlink()
    again = json.loads(ws.assemble("patches", "--offline", "--json").stdout)["deps"][0]
    assert [v["status"] for v in again["patches"]] == [v["status"] for v in honest["patches"]]


def test_a_rebase_backup_naming_paths_out_of_patches_is_refused(git_workspace: GitWorkspace, tmp_path: Path) -> None:
    """A journal directory is not necessarily assemble's own (a pull request can add
    .assemble/rebase/<dep>/): a backup.tar member "patches/../../.." would make --abort write
    outside patches/<dep>/. The archive is refused, naming it, and nothing is written."""
    import io
    import tarfile

    ws = git_workspace
    assert ws.assemble("checkout").returncode == 0
    ws.upstream.commit("Rename the argument",
                       {"csrc/kern.cpp": KERNEL_V1.replace("x + 1", "x.add(1)").replace("& x", "& input")})
    assert ws.assemble("rebase", "kern").returncode == 5
    journal_dir = ws.root / ".assemble" / "rebase" / "kern"
    backup = journal_dir / "backup.tar"
    escaped = tmp_path / "escaped.txt"
    relative = os.path.relpath(escaped, ws.root / ".assemble" / "rebase" / "kern" / "restore")
    with tarfile.open(backup) as tar:
        members = [(m, tar.extractfile(m).read() if m.isfile() else None) for m in tar.getmembers()]  # type: ignore[union-attr]
    with tarfile.open(backup, "w", format=tarfile.GNU_FORMAT) as tar:
        for member, data in members:
            if member.name == ".mtimes.json":
                mtimes = json.loads(data or b"{}")
                mtimes[f"patches/{relative}"] = 0
                data = json.dumps(mtimes).encode()
                member.size = len(data)
            tar.addfile(member, io.BytesIO(data) if data is not None else None)
        evil = tarfile.TarInfo(f"patches/{relative}")
        evil.size = 5
        tar.addfile(evil, io.BytesIO(b"owned"))
    from assembler.upstreaming.journal import digest

    with tarfile.open(backup) as tar:  # what the planted journal says the rebase wrote over: the archive's own
        planted = {m.name[len("patches/"):]: tar.extractfile(m).read() for m in tar.getmembers()  # type: ignore[union-attr]
                   if m.isfile() and m.name.startswith("patches/")}
    journal = json.loads((journal_dir / "journal.json").read_text())
    journal["wrote"] = {"patches": [digest(planted), None]}
    (journal_dir / "journal.json").write_text(json.dumps(journal))
    result = ws.assemble("rebase", "--abort", "kern")
    assert not escaped.exists()
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert "backup.tar: cannot read the journal of the rebase of kern" in result.stderr
    assert "is not a name this backup holds" in result.stderr and "Traceback" not in result.stderr
