"""`assemble patches` reuses a dependency's classification while nothing it was computed from
changed (upstreaming/classification_cache.py), and computes it again when anything did: the series'
bytes, the tracked tip, the pin, the upstream mirror's pull-request refs. A reused answer
starts no git process, and is the same answer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import GitWorkspace
from tests.rebase_scenarios import land_verbatim, patch_files


def report(ws: GitWorkspace, *args: str) -> dict:
    result = ws.assemble("patches", "--format", "json", *args)
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert len(document["deps"]) == 1
    return document["deps"][0]


def without_time(dep: dict, *also: str) -> dict:
    """The answer less when it was classified (and, after a fetch, when the mirror was fetched)."""
    return {key: value for key, value in dep.items() if key not in ("classified", *also)}


def git_commands(trace: Path) -> list[str]:
    """The git subcommands a GIT_TRACE file records (one line per git process started)."""
    if not trace.exists():
        return []
    return [line.split("built-in: git ", 1)[1].split()[0] for line in trace.read_text().splitlines()
            if "built-in: git " in line]


def test_unchanged_inputs_reuse_the_answer_without_git(git_workspace: GitWorkspace, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    ws = git_workspace
    land_verbatim(ws, patch_files(ws)[0])
    first = report(ws)  # fetches, classifies
    assert first["classified"]["reused"] is False and first["counts"]["upstream"] == 1
    trace = tmp_path / "git-trace"
    monkeypatch.setenv("GIT_TRACE", str(trace))
    again = report(ws, "--offline")
    assert again["classified"] == {"at": first["classified"]["at"], "reused": True}
    assert without_time(again) == without_time(first)
    assert git_commands(trace) == []  # no merge-base, no cherry-mark walk, no trial replay
    monkeypatch.delenv("GIT_TRACE")
    online = report(ws)  # a fetch that brings nothing new changes nothing either
    assert online["classified"]["reused"] is True
    assert without_time(online, "mirror_fetched_at") == without_time(first, "mirror_fetched_at")
    assert online["mirror_fetched_at"] >= first["mirror_fetched_at"]  # the fetch ran; its time is news


def test_each_input_change_classifies_again(git_workspace: GitWorkspace) -> None:
    ws = git_workspace
    first_patch, second_patch = patch_files(ws)
    assert report(ws)["classified"]["reused"] is False
    assert report(ws, "--offline")["classified"]["reused"] is True

    # the series' bytes: a header now says the patch was forwarded
    second_patch.write_text(second_patch.read_text().replace("Forwarded: no",
                                                             "Forwarded: https://git.invalid/kern/pull/8"))
    dep = report(ws, "--offline")
    assert dep["classified"]["reused"] is False and dep["patches"][1]["status"] == "forwarded"
    assert report(ws, "--offline")["classified"]["reused"] is True

    # the tracked tip: upstream lands patch 1, the next fetch sees it
    land_verbatim(ws, first_patch)
    dep = report(ws)
    assert dep["classified"]["reused"] is False and dep["patches"][0]["status"] == "upstream"

    # the upstream mirror's pull-request refs: a pull request carrying patch 2 appears
    mirror = next((ws.cache / "git").glob("*kern-*.git"))
    ws.upstream.git("checkout", "-q", "-B", "pr", "main")
    ws.upstream.git("am", "-q", str(second_patch))
    ws.upstream.git("update-ref", "refs/pull/21/head", "HEAD")
    ws.upstream.git("checkout", "-q", "main")
    dep = report(ws)
    assert (mirror / "refs" / "assemble" / "pull" / "21").exists() or "refs/assemble/pull/21" in (
        mirror / "packed-refs").read_text()
    assert dep["classified"]["reused"] is False
    assert dep["patches"][1]["evidence"]["how"] == "pull-request" and dep["patches"][1]["evidence"]["note"] == "pull/21"

    # the pin
    ws.manifest.write_text(ws.manifest.read_text().replace(ws.base, ws.upstream.git("rev-parse", "main").strip()))
    dep = report(ws, "--offline")
    assert (dep["classified"]["reused"] is False
            and dep["base"]["commit"] == ws.upstream.git("rev-parse", "main").strip())


def test_a_damaged_record_is_computed_again(git_workspace: GitWorkspace) -> None:
    ws = git_workspace
    first = report(ws)
    records = list((ws.cache / "classifications").glob("*.json"))  # in the user cache (issue 21)
    assert len(records) == 1 and not (ws.root / ".assemble" / "patches").exists()
    record = records[0]
    from assembler.upstreaming.classification_cache import FORMAT

    assert json.loads(record.read_text())["format"] == FORMAT
    for damage in ("{not json",
                   json.dumps({"format": 1, "key": json.loads(record.read_text())["key"], "verdicts": "x"}), "[]"):
        record.write_text(damage)
        dep = report(ws, "--offline")
        assert dep["classified"]["reused"] is False and without_time(dep) == without_time(first)
        from assembler.upstreaming.classification_cache import FORMAT

    assert json.loads(record.read_text())["format"] == FORMAT  # rewritten whole
