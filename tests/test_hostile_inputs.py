"""Issue 10: hostile or broken manifests, series and environments. Each case of the issue's
"Why" (the wheel/ELF ones live in the audit tests) runs the real CLI on a real git workspace
and checks: the documented exit code, one error line naming the file (and line) and no
traceback, nothing written outside the workspace, and no process started from a value."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.conftest import GitWorkspace
from tests.gitrepo import git


def _edit(ws: GitWorkspace, old: str, new: str) -> None:
    text = ws.manifest.read_text()
    assert old in text
    ws.manifest.write_text(text.replace(old, new))


def _refused(result: subprocess.CompletedProcess[str], *needles: str, code: int = 2) -> None:
    assert result.returncode == code, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr, result.stderr
    # one error line (and its hint) after any progress lines ("kern: clone", printed one per
    # phase when stderr is not a terminal)
    lines = result.stderr.strip().splitlines()
    errors = [i for i, line in enumerate(lines) if line.startswith("error: ")]
    assert len(errors) == 1, result.stderr
    assert all(re.fullmatch(r"[\w.+-]+: [\w .,()-]+", line) for line in lines[:errors[0]]), result.stderr
    assert all(line.startswith("hint: ") for line in lines[errors[0] + 1:]), result.stderr
    for needle in needles:
        assert needle in result.stderr, (needle, result.stderr)


def _files(root: Path) -> set[Path]:
    return {p for p in root.rglob("*")} if root.exists() else set()


# -- command execution from deps.toml ------------------------------------------------------------

def test_option_like_track_runs_nothing_in_patches(git_workspace: GitWorkspace, tmp_path: Path) -> None:
    pwned = tmp_path / "pwned"
    assert git_workspace.assemble("checkout").returncode == 0  # the mirror exists and has been fetched
    _edit(git_workspace, 'track = "main"', f'track = "--upload-pack=touch {pwned};git-upload-pack"')
    result = git_workspace.assemble("patches", "kern")
    _refused(result, "deps.toml:13:1: deps.kern.track:", "is not a valid branch name", "starts with '-'")
    assert not pwned.exists()


def test_option_like_onto_runs_nothing_in_rebase_dry_run(git_workspace: GitWorkspace, tmp_path: Path) -> None:
    pwned = tmp_path / "pwned"
    assert git_workspace.assemble("checkout").returncode == 0
    result = git_workspace.assemble("rebase", "kern", "--dry-run", "--onto",
                                    f"--upload-pack=touch {pwned};git-upload-pack")
    _refused(result, "--onto", "starts with '-'")
    assert not pwned.exists()


def test_refspec_in_track_is_refused(git_workspace: GitWorkspace) -> None:
    _edit(git_workspace, 'track = "main"', 'track = "main:refs/heads/evil"')
    _refused(git_workspace.assemble("deps"), "deps.kern.track", "contains ':'")


@pytest.mark.parametrize(("url", "reason"), [
    ("https://git.invalid/kern\\nx", "control character"),
    ("--upload-pack=touch pwned", "starts with '-'"),
    ("ext::sh -c touch% pwned", "transport::address"),
    ("ssh://-oProxyCommand=touch pwned/x", "starts with '-'"),
    ("-oProxyCommand=x@host:path", "starts with '-'"),
    ("gopher://host/x", "scheme 'gopher'"),
])
def test_hostile_urls_are_refused_before_any_mirror_exists(git_workspace: GitWorkspace, url: str, reason: str) -> None:
    _edit(git_workspace, 'upstream = "https://git.invalid/kern"', f'upstream = "{url}"')
    result = git_workspace.assemble("checkout")
    _refused(result, "deps.toml:11:1: deps.kern.upstream:", reason)
    assert not (git_workspace.cache / "git").exists() or not any((git_workspace.cache / "git").iterdir())


def test_ordinary_urls_and_mirror_prefixes_are_accepted(git_workspace: GitWorkspace) -> None:
    _edit(git_workspace, '"https://git.invalid/" = "remotes/"',
          '"https://git.invalid/" = "remotes/"\n"git@github.com:" = "/srv/git-mirrors/github.com/"\n"ssh://git@host/" '
          '= "file:///srv/m/"')
    _edit(git_workspace, 'track = "main"', 'track = "release/2.10"\nsource = "git@github.com:org/kern.git"')
    result = git_workspace.assemble("deps", "--json")
    assert result.returncode == 0, result.stderr


# -- writes outside the workspace ----------------------------------------------------------------

def test_series_entry_climbing_out_is_refused(git_workspace: GitWorkspace, tmp_path: Path) -> None:
    series = git_workspace.patches / "series"
    first = series.read_text().splitlines()[1]
    shutil.move(git_workspace.patches / first, tmp_path / "q.patch")  # exists, four levels up
    series.write_text(series.read_text().replace(first, "../../../q.patch"))
    before = _files(tmp_path) - _files(git_workspace.root)
    result = git_workspace.assemble("checkout")
    _refused(result, f"{series}:2:1:", "'../../../q.patch'", "path separator")
    assert _files(tmp_path) - _files(git_workspace.root) - _files(git_workspace.cache) <= before


def test_absolute_series_entry_is_refused(git_workspace: GitWorkspace) -> None:
    series = git_workspace.patches / "series"
    first = series.read_text().splitlines()[1]
    series.write_text(series.read_text().replace(first, str(git_workspace.patches / first)))
    _refused(git_workspace.assemble("deps"), f"{series}:2:1:", "path separator")


@pytest.mark.parametrize("entry", ["-p1.patch", ".hidden.patch", "a\\b.patch"])
def test_series_entries_are_plain_names(git_workspace: GitWorkspace, entry: str) -> None:
    series = git_workspace.patches / "series"
    series.write_text(series.read_text() + entry + "\n")
    _refused(git_workspace.assemble("deps"), f"{series}:4:1:", "series entry")


def test_patches_outside_the_workspace_needs_the_opt_in(git_workspace: GitWorkspace, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    shutil.copytree(git_workspace.patches, outside)
    _edit(git_workspace, 'track = "main"', 'track = "main"\npatches = "../outside"')
    _refused(git_workspace.assemble("deps"), "deps.toml:14:1: deps.kern.patches:", "leaves the workspace",
             "ASSEMBLE_PATCHES_OUTSIDE_WORKSPACE=1")
    allowed = subprocess.run([sys.executable, "-m", "assembler", "-C", str(git_workspace.root), "deps", "--json"],
                             capture_output=True, text=True,
                             env={**os.environ, "ASSEMBLE_PATCHES_OUTSIDE_WORKSPACE": "1"})
    assert allowed.returncode == 0, allowed.stderr
    assert '"patches": 2' in allowed.stdout


@pytest.mark.parametrize(("value", "reason"), [
    ("/etc", "leaves the workspace"), (".", "is the workspace itself"), ("forks/kern", "inside forks/"),
])
def test_patches_path_must_be_inside_and_not_assembles_own(git_workspace: GitWorkspace, value: str,
                                                           reason: str) -> None:
    _edit(git_workspace, 'track = "main"', f'track = "main"\npatches = "{value}"')
    _refused(git_workspace.assemble("deps"), "deps.kern.patches", reason)


# -- loss -------------------------------------------------------------------------------------------

def test_typod_patches_directory_is_an_error(git_workspace: GitWorkspace) -> None:
    _edit(git_workspace, 'track = "main"', 'track = "main"\npatches = "patches/kernn"')
    _refused(git_workspace.assemble("deps"), "deps.toml:14:1: deps.kern.patches:", "does not exist")


def test_missing_default_patches_directory_is_an_empty_series(git_workspace: GitWorkspace) -> None:
    shutil.rmtree(git_workspace.patches)
    result = git_workspace.assemble("deps", "--json")
    assert result.returncode == 0, result.stderr
    assert '"patches": 0' in result.stdout


def test_patches_directory_that_is_a_file_is_an_error(git_workspace: GitWorkspace) -> None:
    shutil.rmtree(git_workspace.patches)
    git_workspace.patches.write_text("0001-x.patch\n")
    _refused(git_workspace.assemble("deps"), str(git_workspace.patches), "not a directory")


def test_export_with_patches_on_another_filesystem(git_workspace: GitWorkspace, tmp_path: Path) -> None:
    """patches/ is a tmpfs mount (in a private mount namespace), .assemble/ is not: the swap
    crosses filesystems (EXDEV) and must still replace the series in one step."""
    if shutil.which("unshare") is None or subprocess.run(["unshare", "-rm", "true"], capture_output=True).returncode:
        pytest.skip("needs unshare -rm (user and mount namespaces) for a second filesystem")
    assert git_workspace.assemble("checkout").returncode == 0
    (git_workspace.fork / "NOTES.md").write_text("notes\n")
    git(git_workspace.fork, "add", "NOTES.md")
    git(git_workspace.fork, "commit", "-q", "-m", "Add notes")
    saved, out = tmp_path / "saved", tmp_path / "out"
    patches_root = git_workspace.root / "patches"
    shutil.copytree(patches_root, saved)
    script = ('mount -t tmpfs tmpfs "$1" && cp -a "$2/." "$1/" && shift 3 && "$@"; rc=$?; '
              'cp -a "$P/." "$O/"; exit $rc')
    env = {**os.environ, "ASSEMBLE_CACHE": str(git_workspace.cache), "P": str(patches_root), "O": str(out)}
    out.mkdir()
    result = subprocess.run(
        ["unshare", "-rm", "sh", "-c", script, "sh", str(patches_root), str(saved), "-",
         sys.executable, "-m", "assembler", "-C", str(git_workspace.root), "export", "kern"],
        capture_output=True, text=True, env=env,
    )
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    series = (out / "kern" / "series").read_text().splitlines()
    assert series[0] == "# migration to the Stable ABI" and len(series) == 4 and series[3].startswith("0003-")
    assert sorted(p.name for p in out.iterdir()) == ["kern"]  # no .kern.old, no staging copy left


# -- tracebacks turned into one-line errors --------------------------------------------------------

def test_bad_install_glob_is_a_manifest_error(git_workspace: GitWorkspace) -> None:
    with git_workspace.manifest.open("a") as handle:
        handle.write('\n[deps.kern.install]\n"[z-a]*" = "pkg/"\n')
    _refused(git_workspace.assemble("deps"), "deps.toml:16:1: deps.kern.install:", "'[z-a]*'", "not a valid glob")


def test_series_that_is_a_directory(git_workspace: GitWorkspace) -> None:
    series = git_workspace.patches / "series"
    series.unlink()
    series.mkdir()
    (series / "x").write_text("")
    for name in list(git_workspace.patches.glob("*.patch")):
        name.unlink()
    _refused(git_workspace.assemble("deps"), f"{series}: is a directory")


def test_series_that_is_not_utf8(git_workspace: GitWorkspace) -> None:
    series = git_workspace.patches / "series"
    series.write_bytes(series.read_bytes() + b"caf\xe9.patch\n")
    _refused(git_workspace.assemble("deps"), f"{series}:4:4: not UTF-8")


@pytest.mark.parametrize("which", ["deps.toml", "series"])
def test_byte_order_mark_is_named(git_workspace: GitWorkspace, which: str) -> None:
    path = git_workspace.manifest if which == "deps.toml" else git_workspace.patches / "series"
    path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
    _refused(git_workspace.assemble("deps"), f"{path}:1:1: starts with a UTF-8 byte-order mark (BOM)")


def test_deeply_nested_toml_is_a_manifest_error(git_workspace: GitWorkspace) -> None:
    with git_workspace.manifest.open("a") as handle:
        handle.write("\n[extra]\nx = " + "[" * 100_000 + "]" * 100_000 + "\n")
    _refused(git_workspace.assemble("deps"), "TOML nested too deeply")


def test_killed_merge_leftovers_are_removed_on_the_next_merge(tmp_path: Path) -> None:
    """A `.stem.PID.tmp` of a process that is gone (here: a real process killed with SIGKILL)
    is removed by remove_stale, which merge calls on dist/; one of a live process is kept."""
    from assembler.fsutil import remove_stale

    victim = subprocess.Popen(["sleep", "60"])
    victim.kill()
    victim.wait()
    live = subprocess.Popen(["sleep", "60"])
    try:
        dead_tmp = tmp_path / f".bundle-1.0.0+cu132.{victim.pid}.tmp"
        live_tmp = tmp_path / f".bundle-1.0.0+cu132.{live.pid}.tmp"
        dead_dir = tmp_path / f".kern.{victim.pid}.tmp"
        for path in (dead_tmp, live_tmp):
            path.write_bytes(b"\0" * 4096)
        dead_dir.mkdir()
        (dead_dir / "series").write_text("")
        keep = tmp_path / "bundle-1.0.0-cp39-abi3-linux_x86_64.whl"
        keep.write_bytes(b"")
        assert sorted(remove_stale(tmp_path)) == sorted([dead_tmp, dead_dir])
        assert live_tmp.exists() and keep.exists()
    finally:
        live.kill()
        live.wait()


# -- in a private mount namespace: a second file system, a full disk, a read-only workspace ------

def _namespaces_work() -> bool:
    return (shutil.which("unshare") is not None
            and subprocess.run(["unshare", "-rm", "true"], capture_output=True).returncode == 0)


needs_namespaces = pytest.mark.skipif(not _namespaces_work(), reason="needs unshare -rm (user and mount namespaces)")


def _assemble_in_namespace(ws: GitWorkspace, setup: str, *args: str, keep: Path | None = None,
                           env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`assemble -C WS ARGS` after the shell commands ``setup`` (mounts, with $W the workspace
    and $C the cache), in a mount namespace that ends with the command; ``keep`` receives a
    copy of patches/ as the command left it (the mounts vanish with the namespace)."""
    script = f'set -e; {setup}; set +e; "$@"; rc=$?; [ -n "$K" ] && cp -a "$W/patches/." "$K/"; exit $rc'
    full_env = {**os.environ, "ASSEMBLE_CACHE": str(ws.cache), "W": str(ws.root), "C": str(ws.cache),
                "K": str(keep or ""), "COLUMNS": "200", **(env or {})}
    if keep is not None:
        keep.mkdir()
    return subprocess.run(["unshare", "-rm", "sh", "-c", script, "sh", sys.executable, "-m", "assembler", "-C",
                           str(ws.root), *args],
                          capture_output=True, text=True, env=full_env)


READ_ONLY = ('mount --bind "$W" "$W"; mount -o remount,ro,bind "$W"; mount --bind "$C" "$C"; mount -o remount,ro,bind '
             '"$C"')


@needs_namespaces
def test_read_only_commands_work_on_a_read_only_workspace_and_cache(git_workspace: GitWorkspace) -> None:
    """chmod does not stop root, so the workspace and the cache are read-only bind mounts."""
    ws = git_workspace
    assert ws.assemble("checkout").returncode == 0
    assert ws.assemble("patches").returncode == 0  # fetched once
    wheel = ws.root / "dist" / "demo-1.0-cp39-abi3-linux_x86_64.whl"
    wheel.parent.mkdir()
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("demo/__init__.py", "")
        archive.writestr("demo-1.0.dist-info/WHEEL",
                         "Wheel-Version: 1.0\nRoot-Is-Purelib: false\nTag: cp39-abi3-linux_x86_64\n")
        archive.writestr("demo-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: demo\nVersion: 1.0\n")
        archive.writestr("demo-1.0.dist-info/RECORD", "")
    expected = {args: ws.assemble(*args) for args in [("deps", "--json"), ("patches", "--offline", "--format", "json"),
                                                       ("rebase", "kern", "--dry-run", "--json"),
                                                      ("checkout", "--json"),
                                                       ("audit", str(wheel), "--json")]}
    before = {p: p.stat().st_mtime_ns for p in ws.root.rglob("*") if p.is_file()}
    for args, writable in expected.items():
        assert writable.returncode == 0, (args, writable.stderr)
        result = _assemble_in_namespace(ws, READ_ONLY, *args)
        assert result.returncode == 0, (args, result.stderr)
        assert "Traceback" not in result.stderr
        if args[0] != "checkout":  # checkout reports its own timing
            def same(text: str) -> str:
                # the writable `checkout` above fetched after `patches` ran: only the fetch time moved
                text = re.sub(r'"mirror_fetched_at": "[^"]*"', '"mirror_fetched_at": "..."', text)
                return re.sub(r"fetched \d+ \w+ ago", "fetched ... ago", text)

            assert same(result.stdout) == same(writable.stdout), args
    assert not (ws.root / ".assemble" / "lock").exists() or (ws.root / ".assemble" / "lock") in before


@needs_namespaces
def test_writing_on_a_read_only_workspace_is_the_environment_exit_code(git_workspace: GitWorkspace) -> None:
    ws = git_workspace
    ws.cache.mkdir()
    result = _assemble_in_namespace(ws, READ_ONLY, "checkout")  # nothing checked out yet: it must write
    _refused(result, "Read-only file system", "hint: the file system is read-only", code=9)


@needs_namespaces
def test_full_disk_during_export_keeps_the_series(git_workspace: GitWorkspace, tmp_path: Path) -> None:
    """patches/ on a tmpfs with room for the series but not for a second copy of it (7
    inodes): the export fails with exit 9 naming the disk, and the series is untouched."""
    ws = git_workspace
    assert ws.assemble("checkout").returncode == 0
    (ws.fork / "NOTES.md").write_text("notes\n")
    git(ws.fork, "add", "NOTES.md")
    git(ws.fork, "commit", "-q", "-m", "Add notes")
    saved = tmp_path / "saved"
    shutil.copytree(ws.root / "patches", saved)
    original = {p.name: p.read_bytes() for p in (saved / "kern").iterdir()}
    setup = f'mount -t tmpfs -o nr_inodes=7 tmpfs "$W/patches"; cp -a "{saved}/." "$W/patches/"'
    result = _assemble_in_namespace(ws, setup, "export", "kern", keep=tmp_path / "out")
    _refused(result, "No space left on device", "hint: free space", code=9)
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["kern"]  # no partial copy left
    assert {p.name: p.read_bytes() for p in (tmp_path / "out" / "kern").iterdir()} == original


# -- loss and leftovers in export ----------------------------------------------------------------

def test_empty_commit_is_refused_at_export(git_workspace: GitWorkspace) -> None:
    ws = git_workspace
    assert ws.assemble("checkout").returncode == 0
    before = {p.name: p.read_bytes() for p in ws.patches.iterdir()}
    git(ws.fork, "commit", "-q", "--allow-empty", "-m", "Nothing at all")
    empty = git(ws.fork, "rev-parse", "HEAD")
    _refused(ws.assemble("export", "kern"), f"commit {empty[:12]} (Nothing at all) changes nothing")
    assert {p.name: p.read_bytes() for p in ws.patches.iterdir()} == before


def test_export_staging_of_a_killed_export_is_removed(git_workspace: GitWorkspace) -> None:
    ws = git_workspace
    assert ws.assemble("checkout").returncode == 0
    victim = subprocess.Popen(["sleep", "60"])
    victim.kill()
    victim.wait()
    leftover = ws.root / ".assemble" / f"export-{victim.pid}-x1y2"
    (leftover / "staged").mkdir(parents=True)
    (leftover / "staged" / "0001-big.patch").write_bytes(b"x" * 100_000)
    result = ws.assemble("export", "kern")
    assert result.returncode == 0, result.stderr
    assert not leftover.exists()
    assert not list((ws.root / ".assemble").glob("export-*"))


# -- mirrors -------------------------------------------------------------------------------------

def test_half_made_mirror_is_made_again(git_workspace: GitWorkspace) -> None:
    """A mirror directory without its origin (what a crash, or the old ValueError on a URL
    with a newline, left behind) must not break every later run."""
    ws = git_workspace
    assert ws.assemble("checkout").returncode == 0
    mirror = next((ws.cache / "git").glob("*.git"))
    shutil.rmtree(mirror)
    git(mirror.parent, "init", "-q", "--bare", str(mirror))  # HEAD, but no remote
    shutil.rmtree(ws.fork)
    result = ws.assemble("checkout")
    assert result.returncode == 0, result.stderr
    assert git(mirror, "config", "remote.origin.url").endswith("remotes/kern")
    assert not list(mirror.parent.glob(".*.tmp"))


def test_url_with_a_newline_creates_no_mirror(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The git layer refuses it too (a URL may come from a checkout's .gitmodules)."""
    from assembler.errors import InputError
    from assembler.git.mirrors import open_mirror
    from assembler.manifest.model import Manifest

    monkeypatch.setenv("ASSEMBLE_CACHE", str(tmp_path / "cache"))
    manifest = Manifest(path=tmp_path / "deps.toml", bundle=None, mirrors={}, deps={})  # type: ignore[arg-type]
    with pytest.raises(InputError, match="control character"):
        open_mirror(manifest, "https://git.invalid/kern\n[core]\n\tsshCommand = touch pwned")
    assert not (tmp_path / "cache").exists() or not list((tmp_path / "cache").rglob("*"))


# -- the environment and the one error path ------------------------------------------------------

def test_lock_timeout_takes_units_and_refuses_garbage(git_workspace: GitWorkspace) -> None:
    env = {"ASSEMBLE_CACHE": str(git_workspace.cache)}
    from tests.conftest import run_assemble

    ok = run_assemble("-C", str(git_workspace.root), "checkout", env={**env, "ASSEMBLE_LOCK_TIMEOUT": "10m"})
    assert ok.returncode == 0, ok.stderr
    bad = run_assemble("-C", str(git_workspace.root), "checkout", env={**env, "ASSEMBLE_LOCK_TIMEOUT": "ten minutes"})
    _refused(bad, "ASSEMBLE_LOCK_TIMEOUT='ten minutes' is not a duration", "10m")


def test_unexpected_exception_is_one_line_unless_debug(monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """A bug (here: a handler that raises) is exit 70 with one line; --debug shows the traceback."""
    from assembler import cli
    from assembler.cli import deps

    def broken(args: object) -> int:
        raise RuntimeError("boom\nsecond line")

    monkeypatch.setattr(deps, "run", broken)
    assert cli.main(["deps"]) == 70
    err = capsys.readouterr().err
    assert err.splitlines()[0] == "error: internal error: RuntimeError: boom" and "Traceback" not in err
    with pytest.raises(RuntimeError):
        cli.main(["--debug", "deps"])


def test_argument_errors_take_the_error_path(capsys: pytest.CaptureFixture[str]) -> None:
    from assembler import cli

    assert cli.main(["rebase", "kern", "--onto", "a..b"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: assemble rebase: argument --onto: 'a..b' is not a branch, tag or commit name: it "
                          "contains '..'")
    assert "hint: see `assemble rebase --help`" in err


@needs_namespaces
def test_full_disk_under_git_is_the_environment_exit_code(git_workspace: GitWorkspace) -> None:
    """forks/ on a 64 KiB tmpfs: git's clone fails with ENOSPC, reported as git's own line
    with exit 9 (not a traceback, not exit 2)."""
    ws = git_workspace
    (ws.root / "forks").mkdir()
    result = _assemble_in_namespace(ws, 'mount -t tmpfs -o size=64k tmpfs "$W/forks"', "checkout")
    _refused(result, "git clone failed:", "No space left on device", "hint: free space", code=9)


def test_a_mirror_name_never_starts_like_an_option(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The slug is the URL's last 60 characters: cut there, "-9_popen-gw0_..." was a name
    git takes for a switch, and a leading dot a hidden directory."""
    from assembler.git.mirrors import mirror_path
    from assembler.manifest.model import Manifest

    monkeypatch.setenv("ASSEMBLE_CACHE", str(tmp_path / "cache"))
    manifest = Manifest(path=tmp_path / "deps.toml", bundle=None, mirrors={}, deps={})  # type: ignore[arg-type]
    for cut in ("-", ".", "-.-"):
        url = "file:///" + "x" * 40 + "/" + cut + "y" * (60 - len(cut))
        assert mirror_path(manifest, url).name[0] == "y"
