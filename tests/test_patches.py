"""`assemble patches`: status of each carried patch with its evidence, the per-dependency
summary, the release table (Markdown) and JSON parsed back, --offline, and a fork pinned
without a series of its own."""

from __future__ import annotations

import json

from tests.conftest import KERNEL_V1, GitWorkspace
from tests.gitrepo import Repo, git
from tests.rebase_scenarios import land_verbatim, patch_files


def status_json(ws: GitWorkspace, *args: str) -> dict:
    result = ws.assemble("patches", "--format", "json", *args)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def parse_markdown(text: str) -> list[dict[str, str]]:
    """The release table: the first table of the output (per-dependency tables follow)."""
    lines = []
    for line in text.splitlines():
        if not line.startswith("|"):
            if lines:
                break
            continue
        lines.append(line)
    header = [cell.strip() for cell in lines[0].strip("|").split("|")]
    assert set(lines[1].replace("|", "").replace(" ", "")) == {"-"}
    return [dict(zip(header, (cell.strip() for cell in line.strip("|").split("|")), strict=True)) for line in lines[2:]]


def test_status_evidence_summary_and_release_table(git_workspace: GitWorkspace) -> None:
    ws = git_workspace
    first, second = patch_files(ws)
    landed = land_verbatim(ws, first)
    report = status_json(ws)
    assert report["offline"] is False
    dep = report["deps"][0]
    assert dep["base"]["commit"] == ws.base and dep["base"]["on"] == "upstream" and dep["base"]["behind"] == 2
    assert dep["base"]["date"].startswith("2023-11-")
    assert dep["tip"] == ws.upstream.head() and dep["patches_from"] == "series"
    assert dep["counts"] == {"upstream": 1, "forwarded": 0, "local": 1, "not-needed": 0}
    assert [(p["file"], p["status"]) for p in dep["patches"]] == [(first.name, "upstream"), (second.name, "local")]
    assert dep["patches"][0]["evidence"] == {"how": "patch-id", "commit": landed, "subject": "Use stable tensor type"}
    assert dep["patches"][1]["evidence"] == {"how": "header", "note": "Forwarded: no"}
    # nothing was checked or built: "migrated on fork" is never done by default
    assert dep["migrated_on_fork"] == "not checked" and dep["migrated_upstream"] == "in progress"
    assert (dep["migration_evidence"]
            == {"summary": "no check or build of this pin and series", "check": None, "build": None})

    rows = parse_markdown(ws.assemble("patches", "--format", "markdown").stdout)
    assert rows == [{"dependency": "kern", "migrated on fork": f"not checked (2 patches on {ws.base[:12]}; no check or "
                                                               "build of this pin and series)",
                     "migrated upstream": "in progress (1 of 2 upstream)"}]
    table = ws.assemble("patches").stdout
    assert "2 commits behind main" in table and landed[:12] in table and "Forwarded: no" in table


def test_forwarded_url_and_applied_upstream_header(git_workspace: GitWorkspace) -> None:
    """Upstream merged patch 1 rewritten (no patch-id match, and it conflicts); its header
    names the upstream commit. Patch 2 is then reported from its Forwarded header."""
    ws = git_workspace
    first, second = patch_files(ws)
    rewritten = ws.upstream.commit("Stable tensors, upstream style", {
        "csrc/kern.cpp": KERNEL_V1.replace("at::Tensor add_one(const at::Tensor& x)",
                                           "torch::stable::Tensor add_one(const torch::stable::Tensor& t)")
        .replace("x + 1", "t + 1")})
    text = first.read_text().replace("Forwarded: https://git.invalid/kern/pull/7\n",
                                     "Forwarded: https://git.invalid/kern/pull/7\nApplied-Upstream: "
                                     f"commit:{rewritten[:10]}\n")
    first.write_text(text)
    second.write_text(second.read_text().replace("Forwarded: no", "Forwarded: https://git.invalid/kern/pull/8"))
    dep = status_json(ws)["deps"][0]
    one, two = dep["patches"]
    assert one["status"] == "upstream"
    assert (one["evidence"]
            == {"how": "applied-upstream", "commit": rewritten, "subject": "Stable tensors, upstream style"})
    assert (two["status"] == "forwarded"
            and two["evidence"] == {"how": "header", "url": "https://git.invalid/kern/pull/8"})
    rows = parse_markdown(ws.assemble("patches", "--format", "markdown").stdout)
    assert rows[0]["migrated upstream"] == (
        f"in progress (1 of 2 upstream, 1 forwarded: [{second.name}](https://git.invalid/kern/pull/8))")


def test_offline_uses_the_mirror_as_fetched(git_workspace: GitWorkspace) -> None:
    ws = git_workspace
    never = ws.assemble("patches", "--offline")
    assert never.returncode == 3 and "never fetched" in never.stderr and "without --offline" in never.stderr
    assert ws.assemble("patches").returncode == 0  # fetches
    land_verbatim(ws, patch_files(ws)[0])  # upstream moves after the fetch
    offline = ws.assemble("patches", "--offline", "--format", "json")
    dep = json.loads(offline.stdout)["deps"][0]
    assert dep["tip"] == ws.base and dep["counts"]["upstream"] == 0
    assert dep["mirror_fetched_at"].endswith("+00:00") and "mirror" not in dep  # a timestamp, not "fetched 3 s ago"
    assert "(offline: mirror fetched" in ws.assemble("patches", "--offline").stdout
    assert status_json(ws)["deps"][0]["counts"]["upstream"] == 1  # online again: sees the landing


def test_fork_pinned_without_series_lists_its_own_commits(git_workspace: GitWorkspace) -> None:
    ws = git_workspace
    first, _ = patch_files(ws)
    fork = Repo(ws.root / "remotes" / "kern-fork")
    fork.git("pull", "-q", str(ws.upstream.path), "main")
    fork.git("am", "-q", str(first))
    landed_in_fork = fork.head()
    fork.commit("Fork: build script\n\nForwarded: not-needed\n", {"build.sh": "make\n"})
    fork_tip = fork.commit("Fork: faster kernel\n\nForwarded: https://git.invalid/kern/pull/9\n",
                           {"csrc/fast.cpp": "// fast\n"})
    ws.upstream.git("am", "-q", str(first))  # upstream takes patch 1 as well
    landed = ws.upstream.head()
    ws.manifest.write_text(ws.manifest.read_text() + (
        '\n[deps.kernfork]\nupstream = "https://git.invalid/kern"\nsource = "https://git.invalid/kern-fork"\n'
        f'commit = "{fork_tip}"\ntrack = "main"\n'))
    report = status_json(ws, "kernfork")
    dep = report["deps"][0]
    assert dep["name"] == "kernfork" and dep["patches_from"] == "fork commits"
    assert dep["base"] == {"commit": fork_tip, "date": dep["base"]["date"], "on": "fork", "behind": 1, "own_commits": 3,
                           "fork_point": dep["base"]["fork_point"]}
    assert dep["base"]["fork_point"] == ws.base
    assert [(p["file"], p["status"]) for p in dep["patches"]] == [
        (landed_in_fork[:12], "upstream"), (git(fork.path, "rev-parse", "HEAD~1")[:12], "not-needed"),
        (fork_tip[:12], "forwarded")]
    assert dep["patches"][0]["evidence"]["commit"] == landed
    # only the torch API change is migration work, and upstream has it: the forwarded kernel and
    # the build script touch no torch API, so they do not make the migration "in progress"
    assert [p["migration"] for p in dep["patches"]] == [True, False, False]
    assert dep["migrated_upstream"] == "done"
    assert dep["migrated_upstream_evidence"] == "1 of 1 migration patches found upstream"
    rows = parse_markdown(ws.assemble("patches", "--format", "markdown").stdout)
    assert [row["dependency"] for row in rows] == ["kern", "kernfork"]
    assert (rows[1]["migrated on fork"]
            == f"not checked (3 patches on {fork_tip[:12]}; no check or build of this pin and series)")


def test_two_landed_patches_are_paired_with_their_own_commits(git_workspace: GitWorkspace) -> None:
    """Both patches land verbatim as separate upstream commits: each must be matched to its
    own commit (patch-ids pair them), before and after a checkout exists."""
    ws = git_workspace
    first, second = patch_files(ws)
    ws.upstream.git("am", "-q", str(first))
    landed_first = ws.upstream.head()
    ws.upstream.commit("Unrelated README change", {"README.md": "kern v2\n"})
    ws.upstream.git("am", "-q", str(second))
    landed_second = ws.upstream.head()
    expected = [("patch-id", landed_first, "Use stable tensor type"),
                ("patch-id", landed_second, "Register with STABLE_TORCH_LIBRARY")]
    for _ in ("series", "checkout"):
        patches = status_json(ws)["deps"][0]["patches"]
        assert [(p["evidence"]["how"], p["evidence"]["commit"], p["evidence"]["subject"]) for p in patches] == expected
        assert ws.assemble("checkout").returncode == 0


def test_the_release_table_lists_a_dependency_that_failed_with_its_error(git_workspace: GitWorkspace) -> None:
    """A dependency whose upstream cannot be read keeps its row and says why; the others are
    reported, and the exit code is the failure's."""
    ws = git_workspace
    ws.manifest.write_text(ws.manifest.read_text() + (
        '\n[deps.ghost]\nupstream = "https://git.invalid/ghost"\n'
        f'commit = "{"a" * 40}"\ntrack = "main"\n'))
    result = ws.assemble("patches", "--format", "markdown")
    assert result.returncode != 0
    rows = parse_markdown(result.stdout)
    assert [row["dependency"] for row in rows] == ["kern", "ghost"]
    assert (rows[1]["migrated on fork"].startswith("not checked (error: ")
            and rows[1]["migrated upstream"] == "not checked")
    assert "### ghost\n\nerror: " in result.stdout
    only_ghost = ws.assemble("patches", "ghost", "--format", "markdown")  # every one failed: still the table
    assert (only_ghost.returncode == result.returncode
            and [row["dependency"] for row in parse_markdown(only_ghost.stdout)] == ["ghost"])


def test_migrated_upstream_without_migration_patches_follows_the_evidence_on_the_pin() -> None:
    """An upstream pin that carries nothing (QuTLASS at a commit after its migration merged):
    upstream is migrated exactly when the pin is clean; a series of non-torch patches only is
    the same; n.a. is never the answer."""
    from assembler.check.evidence import CheckEvidence
    from assembler.series.headers import PatchStatus
    from assembler.upstreaming.verdicts import Base, DepStatus, Evidence, PatchVerdict

    base = Base("e" * 40, "2026-01-01", "upstream", 0, 0, "e" * 40)

    def status(check: CheckEvidence | None, verdicts: list[PatchVerdict] | None = None) -> DepStatus:
        return DepStatus("qutlass", "https://example.invalid/q.git", "main", "e" * 40, "fetched now", base,
                         "none" if not verdicts else "series", verdicts or [], None, check=check)

    def check(clean: int, total: int) -> CheckEvidence:
        return CheckEvidence("qutlass", clean, total, {}, "2026-01-02T00:00:00+00:00", "k", "2.13.0", "2.10")

    assert status(None).migrated_upstream == "not checked"
    assert status(check(11, 11)).migrated_upstream == "done"
    assert "the upstream commit: check: 11 of 11" in status(check(11, 11)).upstream_evidence
    assert status(check(7, 9)).migrated_upstream == "no"
    build_fix = PatchVerdict("0001-cmake.patch", "Build with CUDA 13", PatchStatus.LOCAL, Evidence.HEADER,
                             migration=False)
    assert status(check(11, 11), [build_fix]).migrated_upstream == "done"
    migration = PatchVerdict("0002-stable.patch", "Stable ABI", PatchStatus.FORWARDED, Evidence.HEADER, migration=True)
    assert status(check(11, 11), [build_fix, migration]).migrated_upstream == "in progress"
