"""Symbolic links in a dependency's checkout (#29 items 4 and 7).

Item 4: a migration patch adds links (git mode 120000) to a python package of a helper recipe;
the build dereferenced them into the wheel (/etc/passwd, /proc/self/environ). Now a link whose
target leaves the checkout is refused, naming it relative to the workspace, before any
toolchain or backend runs; `build --plan` and `check` refuse it too.

Item 7: a link cycle under a source glob (``csrc/a -> .`` with ``csrc/**/*.cpp``) hung `check`
and `build --plan` (Python's glob follows directory links: 2^40 paths for two such links). A
glob now enters no directory link. Every run that could hang is a subprocess with a timeout,
so a hang fails the test instead of stalling the suite.

The links are real, committed in the fork, exported as a patch with `assemble export` and
applied again by `git am` in a fresh checkout.
"""

from __future__ import annotations

import json
import shutil
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from assembler.builder import links
from assembler.builder.backends import BuildFailure
from assembler.builder.backends.skbuild import unpack
from assembler.errors import InputError
from assembler.manifest.globs import expand
from assembler.wheel.artifact import archive_payload
from tests.gitrepo import git

HANG = 60  # seconds: far above what these runs take (a few seconds); a hang ends there, as a failure


@pytest.fixture(name="cache")
def cache_fixture(tmp_path: Path) -> Path:
    """An empty cache: nothing here needs a toolkit or torch (refusals come before them)."""
    cache = tmp_path / "cache"
    cache.mkdir()
    return cache


def run(ws: Path, cache: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The real CLI in a subprocess; a run that hangs fails here (TimeoutExpired) after HANG s."""
    import os

    env = {**os.environ, "ASSEMBLE_CACHE": str(cache), "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "assembler", "-C", str(ws), *args], env=env, capture_output=True,
                          text=True, check=False, timeout=HANG)


def commit_links(ws: Path, cache: Path, dep: str, made: dict[str, str], message: str,
                 files: dict[str, str] | None = None) -> Path:
    """Commit ``made`` (path -> link target) as real symbolic links in forks/<dep> (and ``files``),
    export the commit into patches/<dep>/ (`assemble export`), and remove the fork, so the next
    command checks it out again and `git am` makes the links (mode 120000) from the patch."""
    fork = ws / "forks" / dep
    if not fork.exists():
        assert run(ws, cache, "checkout", dep).returncode == 0
    for name, text in (files or {}).items():
        (fork / name).parent.mkdir(parents=True, exist_ok=True)
        (fork / name).write_text(text)
        git(fork, "add", name)
    for name, target in made.items():
        path = fork / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.symlink_to(target)
        git(fork, "add", name)
    git(fork, "commit", "-q", "-m", message)
    exported = run(ws, cache, "export", dep)
    assert exported.returncode == 0, exported.stderr
    series = (ws / "patches" / dep / "series").read_text()
    patch = ws / "patches" / dep / series.split()[-1]
    assert not made or "new file mode 120000" in patch.read_text()  # links, as a patch carries them
    shutil.rmtree(fork)
    return patch


def set_sources(ws: Path, old: str, new: str) -> None:
    manifest = ws / "deps.toml"
    text = manifest.read_text()
    assert old in text
    manifest.write_text(text.replace(old, new))


# -- item 4: a link out of the checkout is refused, before anything is built ---------------------

SECRETS = {
    "vecadd/passwd": "/etc/passwd",  # absolute
    "vecadd/environ": "../../../../../../../../../../proc/self/environ",  # .. out of the tree
    "vecadd/hop": "../csrc/next",  # a chain: in the tree first, then out
    "csrc/next": "../../../../../../../../../../etc/hostname",
    "vecadd/gone": "../../elsewhere/missing",  # dangling, outside
    "vecadd/config": "../.git/config",  # git's own files are not the dependency's
}


def test_a_patch_linking_out_of_the_checkout_is_refused_before_the_build(example_ws: Path, cache: Path) -> None:
    commit_links(example_ws, cache, "vecadd", SECRETS, "Ship a few extras")
    result = run(example_ws, cache, "build", "--cuda", "13.2", "--only", "vecadd")
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    for name, target in SECRETS.items():
        assert f"forks/vecadd/{name} -> {target}" in result.stderr
    assert "it leads to an absolute path" in result.stderr and "it leads above the checkout" in result.stderr
    assert f"via vecadd/hop -> csrc/next -> {SECRETS['csrc/next']}" in result.stderr
    assert "it leads into git's own .git" in result.stderr
    assert "hint:" in result.stderr and "assemble export vecadd" in result.stderr
    # refused before any toolchain, build tree or artifact
    assert not (cache / "toolchains").exists() and not (cache / "venvs").exists() and not (cache / "artifacts").exists()
    assert not (example_ws / ".assemble" / "build").exists() and not (example_ws / "dist").exists()

    plan = run(example_ws, cache, "build", "--plan", "--json", "--only", "vecadd")
    assert plan.returncode == 2
    error = json.loads(plan.stdout)["deps"][0]["error"]
    assert error["exit_code"] == 2 and "forks/vecadd/vecadd/passwd -> /etc/passwd" in error["message"]


def test_a_setuptools_dependency_is_refused_the_same_way(example_ws: Path, cache: Path) -> None:
    """Its own setup.py decides what it copies (package data through links): the whole tree counts."""
    set_sources(example_ws, 'sources = ["csrc/rowsum.cpp"]', "")  # units unknown: --plan checks the links all the same
    commit_links(example_ws, cache, "rowsum", {"rowsum/data/key": "/etc/hostname"}, "Add data")
    for args in (("build", "--cuda", "13.2", "--only", "rowsum"), ("build", "--plan", "--only", "rowsum")):
        result = run(example_ws, cache, *args)
        assert result.returncode == 2, (args, result.stdout, result.stderr)
        assert "forks/rowsum/rowsum/data/key -> /etc/hostname (it leads to an absolute path)" in result.stderr


def test_links_inside_the_checkout_are_built_as_before(example_ws: Path, cache: Path) -> None:
    """A link to a file or directory of the checkout, and a cycle, lead nowhere outside: kept."""
    commit_links(example_ws, cache, "vecadd", {"vecadd/readme": "../README.md", "vecadd/sources": "../csrc",
                                              "vecadd/loop": "loop2", "vecadd/loop2": "loop"}, "Link inside")
    plan = run(example_ws, cache, "build", "--plan", "--only", "vecadd")
    assert plan.returncode == 0, plan.stderr
    assert "csrc/add_scaled.cpp" in plan.stdout


def test_check_refuses_a_link_out_of_the_checkout(example_ws: Path, private_cache: Path) -> None:
    """`check` preprocesses what the build compiles: a header linked out of the tree would be read
    (and its lines quoted in the diagnostics)."""
    commit_links(example_ws, private_cache, "vecadd", {"csrc/secret.h": "/etc/passwd"}, "Add a header")
    result = run(example_ws, private_cache, "check", "vecadd")
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert "forks/vecadd/csrc/secret.h -> /etc/passwd" in result.stdout + result.stderr
    assert "Traceback" not in result.stderr


def test_every_escape_is_found_without_looking_outside(tmp_path: Path) -> None:
    """The rule on a real tree, link by link; an unreadable outside directory proves that
    nothing outside is looked at (a lookup there would fail differently)."""
    root = tmp_path / "dep"
    (root / "pkg" / "deep").mkdir(parents=True)
    (root / ".git").mkdir()
    (root / ".git" / "config").write_text("[core]\n")
    (root / "pkg" / "mod.py").write_text("")
    outside = tmp_path / "outside"
    outside.mkdir()
    cases = {
        "abs": ("/etc/passwd", "it leads to an absolute path"),
        "up": ("..", "it leads above the checkout"),
        "pkg/up": ("../../outside/x", "it leads above the checkout"),
        "pkg/round": ("../../dep/pkg/mod.py", "it leads above the checkout"),  # out and back: depends on the name
        "pkg/deep/chain": ("../via", "it leads to an absolute path, via pkg/deep/chain -> pkg/via -> /etc"),
        "pkg/via": ("/etc", "it leads to an absolute path"),
        "pkg/dangling": ("missing/../../..", "it leads above the checkout"),
        "pkg/after-file": ("mod.py/../../..", "it leads above the checkout"),
        "pkg/git": ("../.git/config", "it leads into git's own .git"),
        "pkg/deep/through": ("../../pkg/deep/../../.git", "it leads into git's own .git"),
    }
    inside = {"pkg/ok": "mod.py", "pkg/deep/parent": "..", "pkg/self": ".", "pkg/a": "b", "pkg/b": "a",
              "pkg/dangling-inside": "nothing/here", "pkg/deep/up-and-in": "../../pkg/mod.py"}
    for name, target in [*((n, t) for n, (t, _) in cases.items()), *inside.items()]:
        (root / name).symlink_to(target)
    (root / ".git" / "ignored").symlink_to("/etc/passwd")  # git's own directory is not walked
    outside.chmod(0)
    try:
        found = {item.link: (item.target, item.why) for item in links.escaping_links(root)}
    finally:
        outside.chmod(0o755)
    assert found == cases
    assert links.resolve(root, "pkg/deep/parent/deep/parent/ok") == links.Resolved("pkg/mod.py")
    assert links.resolve(root, "pkg/a").path is not None  # a cycle: ELOOP on reading, nothing leaves
    assert links.resolve(root, "/etc/passwd").path is None
    with pytest.raises(InputError) as refused:
        links.refuse_escaping(tmp_path, "dep", root)
    assert refused.value.message.startswith("dep: 10 symbolic links in dep lead out of the dependency's tree")
    assert "and 2 more" in refused.value.message and refused.value.exit_code == 2


# -- the second line: what is packed into an artifact is a regular file ------------------------

def _zip_with_link(path: Path, name: str) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("pkg/__init__.py", "")
        info = zipfile.ZipInfo(name)
        info.external_attr = (stat.S_IFLNK | 0o777) << 16
        archive.writestr(info, "/etc/passwd")
    return path


def test_an_archive_member_that_is_a_link_never_becomes_a_file(tmp_path: Path) -> None:
    wheel = _zip_with_link(tmp_path / "x-0-cp39-abi3-linux_x86_64.whl", "pkg/passwd")
    with pytest.raises(BuildFailure, match=r"'pkg/passwd' is not a regular file \(mode 120000\)"):
        unpack(wheel, tmp_path / "files")
    with pytest.raises(InputError, match=r"pkg/passwd is not a regular file \(mode 120000\) in an artifact's archive"):
        archive_payload(wheel)


def test_a_link_made_during_the_build_fails_it(example_ws: Path, private_cache: Path) -> None:
    """After the backend's tools ran, the checkout is judged again. Here the dependency's own CMake
    (the cmake backend) makes a link in its python package while configuring, after the first
    check passed: the build fails (exit 6) naming it, and no artifact holds /etc/hostname."""
    manifest = example_ws / "deps.toml"
    text = manifest.read_text()
    start, end = text.index("[deps.vecadd.build]"), text.index("[deps.vecadd.install]")
    manifest.write_text(f'{text[:start]}[deps.vecadd.build]\ncmake-dir = "leak"\npython-packages = '
                        f'["vecadd"]\n\n{text[end:]}')
    own = 'file(CREATE_LINK /etc/hostname "${CMAKE_CURRENT_SOURCE_DIR}/../vecadd/hostname" SYMBOLIC)\n'
    commit_links(example_ws, private_cache, "vecadd", {}, "Own build", files={"leak/CMakeLists.txt": own})
    result = run(example_ws, private_cache, "build", "--cuda", "13.2", "--only", "vecadd")
    assert result.returncode == 6, (result.stdout, result.stderr)
    assert "forks/vecadd/vecadd/hostname -> /etc/hostname (it leads to an absolute path)" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (example_ws / ".assemble" / "artifacts" / "vecadd").exists()
    assert not list((private_cache / "artifacts").rglob("files.zip"))


# -- item 7: link cycles under a source glob ------------------------------------------------------

def test_source_globs_enter_no_directory_link(tmp_path: Path) -> None:
    root = tmp_path / "dep"
    (root / "csrc" / "sub").mkdir(parents=True)
    (root / "csrc" / "k.cpp").write_text("")
    (root / "csrc" / "sub" / "j.cpp").write_text("")
    (root / "csrc" / ".hidden.cpp").write_text("")
    (root / "csrc" / "a").symlink_to(".")
    (root / "csrc" / "b").symlink_to("..")
    (root / "csrc" / "c").symlink_to("/")
    (root / "csrc" / "l.cpp").symlink_to("k.cpp")
    script = (f"from pathlib import Path\nfrom assembler.manifest.globs import expand\n"
              f"for p in ['csrc/**/*.cpp', 'csrc/**', 'csrc/*/*.cpp', 'csrc/a/*.cpp', '**/**/*.cpp']:\n"
              f"    print(p, expand(Path({str(root)!r}), p))\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=HANG, check=True)
    assert done.stdout.splitlines() == [
        "csrc/**/*.cpp ['csrc/k.cpp', 'csrc/l.cpp', 'csrc/sub/j.cpp']",
        "csrc/** ['csrc/a', 'csrc/b', 'csrc/c', 'csrc/k.cpp', 'csrc/l.cpp', 'csrc/sub/j.cpp']",  # links as themselves
        "csrc/*/*.cpp ['csrc/sub/j.cpp']",
        "csrc/a/*.cpp []",  # a literal link is not entered either
        "**/**/*.cpp ['csrc/k.cpp', 'csrc/l.cpp', 'csrc/sub/j.cpp']",
    ]
    with pytest.raises(ValueError):
        expand(root, "../*.cpp")
    with pytest.raises(ValueError):
        expand(root, "/etc/*")


def test_a_link_cycle_under_a_source_glob_neither_hangs_plan_nor_check(example_ws: Path, private_cache: Path) -> None:
    set_sources(example_ws, 'sources = ["csrc/add_scaled.cpp"]', 'sources = ["csrc/**/*.cpp"]')
    commit_links(example_ws, private_cache, "vecadd", {"csrc/a": ".", "csrc/b": "..", "csrc/c/d": "../.."}, "Loops")
    plan = run(example_ws, private_cache, "build", "--plan", "--json", "--only", "vecadd")
    assert plan.returncode == 0, plan.stderr
    units = json.loads(plan.stdout)["deps"][0]["units"]
    assert [unit["source"] for unit in units] == ["csrc/add_scaled.cpp"]  # once, through no link
    checked = run(example_ws, private_cache, "check", "--json", "vecadd")
    assert checked.returncode == 0, (checked.stdout, checked.stderr)
    assert "csrc/add_scaled.cpp" in checked.stdout

    # a link out of the tree under the glob: refused at once, nothing outside listed
    commit_links(example_ws, private_cache, "vecadd", {"csrc/e": "/"}, "Root")
    for args in (("build", "--plan", "--only", "vecadd"), ("check", "vecadd")):
        result = run(example_ws, private_cache, *args)
        assert result.returncode == 2, (args, result.stdout, result.stderr)
        said = " ".join((result.stdout + result.stderr).split())  # a report wraps its long lines at the width
        assert "forks/vecadd/csrc/e -> / (it leads to an absolute path)" in said
