"""The bundled example workspace (examples/stable-abi/) is consistent: its upstream repositories
come out with the pinned SHAs on any machine, its manifest loads, every migration series
applies onto its pin, and ``--advance`` lands the first vecadd patch upstream.

No compiles here; the build tests compile the example."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from assembler.manifest import load_manifest
from assembler.manifest.model import Dependency, Manifest
from assembler.series.headers import parse_patch_header
from tests.example import EXAMPLE, make_upstreams
from tests.gitrepo import git

EXPORT_FLAGS = ("--no-signature", "--zero-commit", "--no-numbered", "--full-index")
STABLE_INCLUDE = re.compile(r"^(torch/csrc/stable/|torch/headeronly/|torch/csrc/inductor/aoti_torch/c/)")




@pytest.fixture(scope="module")
def manifest() -> Manifest:
    return load_manifest(EXAMPLE / "deps.toml")


@pytest.fixture(scope="module")
def upstreams(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    dest = tmp_path_factory.mktemp("upstreams")
    return dest, make_upstreams(dest)


def _repo_name(url: str) -> str:
    """upstreams/<name>.git is where [mirrors] sends https://example.invalid/stable-abi/<name>.git."""
    return url.rstrip("/").rsplit("/", 1)[-1].removesuffix(".git")


def _clone_at(repo: Path, commit: str, into: Path) -> Path:
    git(into.parent, "clone", "-q", str(repo), str(into))
    git(into, "checkout", "-q", "-b", "series", commit)
    return into


def _apply(checkout: Path, dep: Dependency, names: tuple[str, ...]) -> None:
    result = subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t.invalid", "am", "-q", "-3",
         *(str(dep.patches_dir / n) for n in names)],
        cwd=checkout, capture_output=True, text=True,
        env={"PATH": "/usr/bin:/bin", "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1"},
    )
    assert result.returncode == 0, f"{dep.name}: git am -3 failed:\n{result.stdout}{result.stderr}"


def test_make_upstreams_is_deterministic_and_matches_the_pins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, upstreams: tuple[Path, dict[str, str]], manifest: Manifest
) -> None:
    _, heads = upstreams
    # A hostile setup: git identity, signing, CRLF conversion and default branch all set.
    home = tmp_path / "home"
    home.mkdir()
    (home / ".gitconfig").write_text(
        "[user]\n name = Someone Else\n email = else@example.invalid\n"
        "[commit]\n gpgsign = true\n[core]\n autocrlf = true\n[init]\n defaultBranch = trunk\n"
    )
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("GIT_AUTHOR_NAME", "Mallory")
    monkeypatch.setenv("GIT_COMMITTER_DATE", "2001-01-01T00:00:00+00:00")
    monkeypatch.setenv("TZ", "America/New_York")
    assert make_upstreams(tmp_path / "again") == heads
    assert set(heads) == {"vecadd", "scalekit", "scalekit-fork", "rowsum", "normkit", "attnkit", "gemmkit", "checkkit"}
    for dep in manifest.deps.values():
        assert dep.commit == heads[_repo_name(dep.source)], f"deps.toml pin of {dep.name} is stale"


def test_fork_carries_upstream_history(upstreams: tuple[Path, dict[str, str]], manifest: Manifest) -> None:
    dest, heads = upstreams
    scalekit = manifest.deps["scalekit"]
    assert scalekit.is_fork
    fork = dest / f"{_repo_name(scalekit.source)}.git"
    git(fork, "fetch", "-q", str(dest / "scalekit.git"), "main")
    assert git(fork, "merge-base", scalekit.commit, "FETCH_HEAD") == heads["scalekit"]
    assert git(fork, "rev-list", "--count", f"{heads['scalekit']}..{scalekit.commit}") == "2"
    assert not manifest.deps["vecadd"].is_fork


def test_manifest_loads_with_series_builds_and_verify(manifest: Manifest) -> None:
    assert manifest.bundle.name == "stable-abi-example"
    assert manifest.bundle.cuda_archs == ("9.0a",)
    assert (manifest.resolve_url("https://example.invalid/stable-abi/vecadd.git")
            == str(EXAMPLE / "upstreams" / "vecadd.git"))
    languages = set()
    for dep in manifest.deps.values():
        assert len(dep.series) >= 2
        # the helper backend copies the package; setuptools takes it from the dependency's wheel
        assert dep.build.python_packages == ((dep.name,) if dep.build.backend == "helper" else ())
        assert dep.install == {f"{dep.name}/**": "stable_abi_example/"}
        assert dep.verify.ops and dep.verify.smoke
        languages.update(ext.language for ext in dep.build.extensions)
    assert languages == {"cxx", "cuda"}
    assert ({name: dep.build.backend for name, dep in manifest.deps.items()}
            == {"vecadd": "helper", "scalekit": "helper", "rowsum": "setuptools"})
    assert manifest.deps["rowsum"].build.sources == ("csrc/rowsum.cpp",)
    assert manifest.deps["scalekit"].verify.requires_cuda
    assert not manifest.deps["vecadd"].verify.requires_cuda


@pytest.mark.parametrize("name", ["vecadd", "scalekit", "rowsum"])
def test_series_applies_and_round_trips(
    name: str, tmp_path: Path, upstreams: tuple[Path, dict[str, str]], manifest: Manifest
) -> None:
    dest, _ = upstreams
    dep = manifest.deps[name]
    checkout = _clone_at(dest / f"{_repo_name(dep.source)}.git", dep.commit, tmp_path / name)
    _apply(checkout, dep, dep.series)

    # Exported again with the export flags, every patch is byte-identical to the stored one.
    out = tmp_path / "exported"
    git(checkout, "format-patch", "-q", *EXPORT_FLAGS, "-o", str(out), f"{dep.commit}..HEAD")
    assert sorted(p.name for p in out.iterdir()) == list(dep.series)
    for patch in dep.series:
        assert (out / patch).read_bytes() == (dep.patches_dir / patch).read_bytes(), patch

    # Every patch carries a DEP-3 Forwarded field.
    forwarded = [parse_patch_header(dep.patches_dir / p).forwarded for p in dep.series]
    assert all(forwarded), forwarded
    assert forwarded[-1] == "not-needed"

    # The migrated tree includes only stable headers from torch, and defines the ops that
    # [verify] lists, with STABLE_TORCH_LIBRARY.
    defined = []
    for source in [*(s for ext in dep.build.extensions for s in ext.sources), *dep.build.sources]:
        text = (checkout / source).read_text()
        for header in re.findall(r"#include\s*<(torch/[^>]+|ATen/[^>]+|c10/[^>]+)>", text):
            assert STABLE_INCLUDE.match(header), f"{source} still includes <{header}>"
        assert f"STABLE_TORCH_LIBRARY({name}, m)" in text
        defined += [f"{name}::{schema}" for schema in re.findall(r'm\.def\("([^"]+)"\)', text)]
    assert sorted(defined) == sorted(dep.verify.ops)


def test_advance_lands_the_first_vecadd_patch_upstream(
    tmp_path: Path, upstreams: tuple[Path, dict[str, str]], manifest: Manifest
) -> None:
    _, base_heads = upstreams
    dest = tmp_path / "up"
    advanced = make_upstreams(dest, advance=True)
    assert make_upstreams(dest, advance=True) == advanced  # idempotent
    assert ({k: v for k, v in advanced.items() if k != "vecadd"}
            == {k: v for k, v in base_heads.items() if k != "vecadd"})

    vecadd = manifest.deps["vecadd"]
    repo = dest / "vecadd.git"
    new = git(repo, "rev-list", "--reverse", f"{vecadd.commit}..main").split()
    assert len(new) == 2
    landed, unrelated = new

    def patch_id(diff: str) -> str:
        return subprocess.run(["git", "patch-id", "--stable"], input=diff, capture_output=True, text=True,
                              check=True).stdout.split()[0]

    ours = (vecadd.patches_dir / vecadd.series[0]).read_text()
    assert patch_id(git(repo, "show", landed)) == patch_id(ours)
    assert (git(repo, "log", "-1", "--format=%an", landed)
            == parse_patch_header(vecadd.patches_dir / vecadd.series[0]).author.split(" <")[0])
    assert (git(repo, "diff", "--name-only", unrelated + "~1", unrelated).split()
            == ["README.md", "tests/test_add_scaled.py"])

    # The rest of the series still applies on the advanced upstream.
    checkout = _clone_at(repo, advanced["vecadd"], tmp_path / "rebased")
    _apply(checkout, vecadd, vecadd.series[1:])

    # Without --advance the repositories go back to the pinned state.
    assert make_upstreams(dest) == base_heads


def test_cli_prints_the_heads(tmp_path: Path, upstreams: tuple[Path, dict[str, str]]) -> None:
    _, heads = upstreams
    result = subprocess.run(
        [sys.executable, str(EXAMPLE / "make_upstreams.py"), str(tmp_path / "cli")], capture_output=True, text=True,
        check=True
    )
    printed = dict(line.split()[:2] for line in result.stdout.splitlines())
    assert printed == heads


def test_the_migration_example_pins_normkit(upstreams: tuple[Path, dict[str, str]]) -> None:
    """examples/stable-abi/migrate/deps.toml (the unmigrated normkit) pins upstream's head too."""
    from assembler.manifest.load import load_manifest

    _, heads = upstreams
    manifest = load_manifest(EXAMPLE / "migrate" / "deps.toml")
    assert manifest.deps["normkit"].commit == heads["normkit"]
    assert manifest.deps["normkit"].series == ()
