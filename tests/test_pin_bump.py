"""A pin edited by hand in deps.toml is reconciled at checkout (issue 22, item 2): a patch that
already landed upstream at the new pin is reported and left for `rebase --onto PIN` to drop;
the checkout is never a crash (exit 70) and never left interrupted."""

from __future__ import annotations

import json

from tests.conftest import GitWorkspace
from tests.rebase_scenarios import land_verbatim, patch_files


def test_a_pin_moved_past_a_landed_patch_is_reconciled_at_checkout(git_workspace: GitWorkspace) -> None:
    ws = git_workspace
    assert ws.assemble("checkout").returncode == 0
    first, second = (p.name for p in patch_files(ws))
    landed = land_verbatim(ws, patch_files(ws)[0])
    ws.manifest.write_text(ws.manifest.read_text().replace(ws.base, landed))  # the bump, by hand

    result = ws.assemble("checkout", "--json")
    assert result.returncode == 0, result.stderr  # was 70: zip() argument 2 is longer than argument 1
    (dep,) = json.loads(result.stdout)["deps"]
    assert dep["action"] == "updated" and dep["patches"] == 1 and dep["already_applied"] == [first]
    assert f"`assemble rebase kern --onto {landed[:12]}`" in result.stderr

    again = ws.assemble("checkout")  # not left "interrupted": a no-op that still says so
    assert again.returncode == 0 and "up-to-date" in again.stdout, again.stderr
    assert first in again.stderr
    deps = json.loads(ws.assemble("deps", "--json").stdout)
    assert deps["deps"][0]["checkout"] == "ready"

    dry = ws.assemble("rebase", "kern", "--onto", landed, "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    assert [d["file"] for d in json.loads(dry.stdout)["dropped"]] == [first]
    assert (ws.patches / first).exists()  # a dry run writes nothing

    rebased = ws.assemble("rebase", "kern", "--onto", landed, "--json")
    assert rebased.returncode == 0, rebased.stderr
    report = json.loads(rebased.stdout)
    assert report["status"] == "done" and [d["file"] for d in report["dropped"]] == [first]
    assert report["dropped"][0]["commit"] == landed
    assert [line for line in (ws.patches / "series").read_text().splitlines() if not line.startswith("#")] == [second]
    assert not (ws.patches / first).exists()
    final = ws.assemble("checkout")
    assert final.returncode == 0 and first not in final.stderr
    undone = ws.assemble("rebase", "kern", "--undo")  # the journal of that rebase reads back
    assert undone.returncode == 0, undone.stderr
    assert (ws.patches / first).exists()
