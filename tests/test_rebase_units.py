"""The rebase planner and its journal, in-process against real git repositories: where a
rebase starts replaying, how far it moves, which patches it leaves out and why, and the
journal's and checkout state's formats (round trip, version, refusal of a newer format).
The end-to-end rebases (conflicts, kill -9, abort) are in test_rebase.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from assembler.errors import ExitCode, InputError, NewerStateError
from assembler.git.mirrors import Mirror
from assembler.git.process import GitView
from assembler.git.scratch import Scratch
from assembler.git.state import STATE_FILE, CheckoutState, CheckoutStatus
from assembler.series.headers import PatchStatus
from assembler.upstreaming import journal as jr
from assembler.upstreaming.evidence_layers import classify
from assembler.upstreaming.journal import Dropped, Journal, Phase, Pick, Stopped
from assembler.upstreaming.patchset import from_series, series_as_commits
from assembler.upstreaming.rebase import _behind_base, _fork_point, _manifest_values, _Target
from assembler.upstreaming.verdicts import Evidence
from assembler.workspace import Workspace, open_workspace
from tests.conftest import GitWorkspace
from tests.rebase_scenarios import land_verbatim, patch_files


def _target(ws: GitWorkspace, onto: str, label: str = "main") -> _Target:
    mirror = Mirror(url="https://git.invalid/kern", fetch_url=str(ws.upstream.path), path=ws.upstream.path / ".git")
    return _Target(url=mirror.url, mirror=mirror, source=mirror, tip=ws.upstream.head(), onto=onto, label=label)


def _workspace(ws: GitWorkspace) -> Workspace:
    return open_workspace(ws.root)


# -- planning ------------------------------------------------------------------------------

def test_fork_point_of_a_pin_on_upstream_is_the_pin(git_workspace: GitWorkspace) -> None:
    ws = git_workspace
    land_verbatim(ws, patch_files(ws)[0])  # two upstream commits after the pin
    dep = _workspace(ws).manifest.deps["kern"]
    view = GitView(ws.upstream.path / ".git")
    assert _fork_point(view, dep, _target(ws, ws.upstream.head())) == (ws.base, 2)
    # nothing to cross: the pin itself
    assert _fork_point(view, dep, _target(ws, ws.base)) == (ws.base, 0)


def test_an_older_target_is_behind_the_base(git_workspace: GitWorkspace) -> None:
    ws = git_workspace
    dep = _workspace(ws).manifest.deps["kern"]
    older = ws.upstream.git("rev-parse", f"{ws.base}~1")
    target = _target(ws, older, label="v0")
    fork_point, crossed = _fork_point(GitView(ws.upstream.path / ".git"), dep, target)
    assert (fork_point, crossed) == (older, 0)
    assert _behind_base(dep, target, fork_point, explicit=False) is True
    with pytest.raises(InputError, match="older than the pinned commit"):
        _behind_base(dep, target, fork_point, explicit=True)


def test_fork_point_of_a_fork_is_where_it_left_upstream(git_workspace: GitWorkspace) -> None:
    """A pin on a fork's own commit: the merge base is where replaying starts."""
    ws = git_workspace
    ws.upstream.git("checkout", "-q", "-b", "fork", ws.base)
    own = ws.upstream.commit("Fork-only change", {"FORK.md": "ours\n"})
    ws.upstream.git("checkout", "-q", "main")
    tip = ws.upstream.commit("Upstream moves on", {"README.md": "kern v2\n"})
    manifest = ws.manifest.read_text().replace(ws.base, own)
    ws.manifest.write_text(manifest)
    dep = _workspace(ws).manifest.deps["kern"]
    assert _fork_point(GitView(ws.upstream.path / ".git"), dep, _target(ws, tip)) == (ws.base, 1)


def test_manifest_values_of_a_move_and_of_a_repository_switch(git_workspace: GitWorkspace) -> None:
    dep = _workspace(git_workspace).manifest.deps["kern"]
    assert _manifest_values(dep, dep.upstream_url, "a" * 40, switched=False) == {"commit": "a" * 40}
    other = "https://git.invalid/kern-next"
    assert (_manifest_values(dep, other, "b" * 40, switched=True)
            == {"commit": "b" * 40, "upstream": other, "source": None})


def test_classify_finds_the_landed_patch_and_reads_the_header_of_the_other(git_workspace: GitWorkspace) -> None:
    ws = git_workspace
    landed = land_verbatim(ws, patch_files(ws)[0])
    tip = ws.upstream.head()
    dep = _workspace(ws).manifest.deps["kern"]
    with Scratch([ws.upstream.path]) as scratch:
        patches = from_series(dep)
        assert series_as_commits(scratch, patches, dep.commit) is None
        verdicts = classify(scratch, patches, ws.base, tip)
    assert [(v.status, v.how) for v in verdicts] == [
        (PatchStatus.UPSTREAM, Evidence.PATCH_ID), (PatchStatus.LOCAL, Evidence.HEADER),
    ]
    assert verdicts[0].commit is not None and verdicts[0].commit.sha == landed
    assert verdicts[1].note == "Forwarded: no"
    assert verdicts[0].to_json()["status"] == "upstream" and verdicts[0].to_json()["evidence"]["how"] == "patch-id"


# -- the journal ---------------------------------------------------------------------------

def _journal(dep: str = "kern") -> Journal:
    pick = Pick(commit="c" * 40, name="0001-a.patch", subject="a", key="k" * 64)
    return Journal(
        dep=dep, phase=Phase.REPLAYING, branch="assemble/kern", old_head="1" * 40, old_base="2" * 40,
        replay_base="2" * 40, onto="3" * 40, onto_label="main", tip="3" * 40, url="https://git.invalid/kern",
        crossed=4, manifest={"commit": "3" * 40}, planned=[pick], picks=[pick],
        dropped=[Dropped("0002-b.patch", "b", Evidence.PATCH_ID, "d" * 40, "e" * 40, "upstream b")],
    )


def _begun(ws: GitWorkspace, journal: Journal) -> Workspace:
    workspace = _workspace(ws)
    jr.begin(workspace, journal, ws.patches, {})
    return workspace


def test_journal_round_trip_with_a_stopped_rebase(git_workspace: GitWorkspace) -> None:
    journal = _journal()
    workspace = _begun(git_workspace, journal)
    assert workspace.rebases_pending() == ["kern"] and workspace.rebase_pending("kern")
    journal.phase = Phase.STOPPED
    journal.stopped = Stopped(index=0, commit="c" * 40, head="1" * 40, files=["csrc/kern.cpp"])
    jr.save(workspace, journal)
    loaded = jr.load(workspace, "kern")
    assert loaded == journal
    assert loaded is not None and isinstance(loaded.stopped, Stopped) and loaded.phase is Phase.STOPPED
    data = json.loads(workspace.rebase_journal("kern").read_text())
    assert data["version"] == jr.VERSION and data["phase"] == "stopped"
    assert data["stopped"] == {"index": 0, "commit": "c" * 40, "head": "1" * 40, "files": ["csrc/kern.cpp"]}
    jr.finish(workspace, "kern")
    assert workspace.rebases_pending() == [] and jr.load(workspace, "kern") is None


def test_a_journal_without_version_is_version_1(git_workspace: GitWorkspace) -> None:
    workspace = _begun(git_workspace, _journal())
    path = workspace.rebase_journal("kern")
    data = json.loads(path.read_text())
    del data["version"]
    path.write_text(json.dumps(data))
    loaded = jr.load(workspace, "kern")
    assert loaded is not None and loaded.version == 1 and loaded.stopped is None


def test_a_newer_journal_is_refused_naming_the_file(git_workspace: GitWorkspace) -> None:
    ws = git_workspace
    workspace = _begun(ws, _journal())
    path = workspace.rebase_journal("kern")
    data = json.loads(path.read_text())
    data["version"] = jr.VERSION + 1
    data["phase"] = "a-phase-from-the-future"
    path.write_text(json.dumps(data))
    with pytest.raises(NewerStateError) as refused:
        jr.load(workspace, "kern")
    assert str(path) in refused.value.message and "written by a newer assembler; upgrade" in refused.value.message
    result = ws.assemble("rebase", "--continue", "kern")
    assert result.returncode == ExitCode.BAD_INPUT == 2, result.stderr
    assert "written by a newer assembler; upgrade" in result.stderr and "Traceback" not in result.stderr


def test_a_damaged_journal_is_an_input_error(git_workspace: GitWorkspace) -> None:
    workspace = _begun(git_workspace, _journal())
    workspace.rebase_journal("kern").write_text('{"dep": "kern", "phase": "nonsense"}')
    with pytest.raises(InputError, match="cannot read the journal"):
        jr.load(workspace, "kern")


@pytest.mark.parametrize(("field", "value"),
                         [("onto", "--output=/tmp/pwned"), ("result_head", "HEAD"), ("picks", "c" * 39)])
def test_a_journal_whose_commit_is_not_a_sha_is_an_input_error(git_workspace: GitWorkspace, field: str,
                                                               value: str) -> None:
    """Journal values reach git as arguments (range-diff, cherry-picks): one that is not a full
    SHA, such as an option, makes the journal unreadable (exit 2 naming it), never an argument."""
    ws = git_workspace
    workspace = _begun(ws, _journal())
    path = workspace.rebase_journal("kern")
    data = json.loads(path.read_text())
    if field == "picks":
        data["picks"][0]["commit"] = value
    else:
        data[field] = value
    path.write_text(json.dumps(data))
    with pytest.raises(InputError, match="where a commit SHA belongs"):
        jr.load(workspace, "kern")
    result = ws.assemble("rebase", "--continue", "kern")
    assert result.returncode == 2 and str(path) in " ".join(result.stderr.split()), result.stderr


# -- the checkout state file ---------------------------------------------------------------

def _state_path(ws: GitWorkspace) -> Path:
    return ws.fork / ".git" / STATE_FILE


def test_checkout_state_carries_a_version_and_refuses_a_newer_one(git_workspace: GitWorkspace) -> None:
    ws = git_workspace
    assert ws.assemble("checkout").returncode == 0
    data = json.loads(_state_path(ws).read_text())
    assert data["version"] == 1 and data["status"] == "ready"
    state = CheckoutState.load(ws.fork)
    assert state is not None and state.status is CheckoutStatus.READY
    del data["version"]  # written by an assembler from before the field
    _state_path(ws).write_text(json.dumps(data))
    state = CheckoutState.load(ws.fork)
    assert state is not None and state.version == 1
    assert ws.assemble("checkout").returncode == 0
    data["version"] = 2
    _state_path(ws).write_text(json.dumps(data))
    with pytest.raises(NewerStateError):
        CheckoutState.load(ws.fork)
    result = ws.assemble("deps")
    assert result.returncode == 2, result.stderr
    assert str(_state_path(ws)) in " ".join(result.stderr.split()) and "newer assembler; upgrade" in result.stderr


@pytest.mark.parametrize(("field", "value"), [("base", "--upload-pack=touch /tmp/pwned"), ("head", "main"),
                                              ("applied", {"-p": "0001.patch"})])
def test_a_checkout_state_whose_commit_is_not_a_sha_is_an_input_error(git_workspace: GitWorkspace, field: str,
                                                                      value: object) -> None:
    """The state file's commits reach git (export's rev-parse, rebase): a value that is not a
    full SHA makes the state unreadable, exit 2 naming the file, with the way out."""
    ws = git_workspace
    assert ws.assemble("checkout").returncode == 0
    data = json.loads(_state_path(ws).read_text())
    data[field] = value
    _state_path(ws).write_text(json.dumps(data))
    with pytest.raises(InputError, match="where a commit SHA belongs"):
        CheckoutState.load(ws.fork)
    for command in (["deps"], ["export", "kern"]):
        result = ws.assemble(*command)
        assert result.returncode == 2, (command, result.stderr)
        assert str(_state_path(ws)) in " ".join(result.stderr.split()) and "Traceback" not in result.stderr
