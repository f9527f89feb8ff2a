"""Bring a set of checkouts up to date for `assemble checkout` and `assemble build`.

Up-to-date checkouts are recognised from their state file alone; git and gitpython are
loaded only when a checkout needs work, which keeps a no-op run close to interpreter start-up.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from assembler.errors import AssembleError, ConflictError
from assembler.git.objects import borrows
from assembler.git.state import CheckoutResult, pinned_state
from assembler.manifest import Dependency
from assembler.workspace import Workspace, locked

Step = Callable[[str, str], None]  # (dependency, step) for progress displays


def refuse_during_rebase(workspace: Workspace, deps: list[Dependency]) -> None:
    """A half-done rebase must be finished or undone before anything reads or resets the fork."""
    stopped = [dep.name for dep in deps if workspace.rebase_pending(dep.name)]
    if stopped:
        name = stopped[0]
        raise ConflictError(
            f"a rebase of {name} is in progress in {workspace.forks_dir / name}",
            hint=f"finish it with `assemble rebase {name} --continue`, or undo it with `assemble rebase {name} "
                 "--abort`",
        )


@locked
def sync_checkouts(workspace: Workspace, deps: list[Dependency],
                   on_step: Step = lambda *_: None) -> dict[str, CheckoutResult]:
    """Every checkout of ``deps`` up to date; refused during a rebase; the first failure raises."""
    refuse_during_rebase(workspace, deps)
    return {dep.name: _sync_one(workspace, dep, on_step) for dep in deps}


@locked
def sync_each(
    workspace: Workspace, deps: list[Dependency], on_step: Step = lambda *_: None,
) -> tuple[dict[str, CheckoutResult], dict[str, AssembleError]]:
    """Like :func:`sync_checkouts`, but keeps going past a dependency that fails, so one
    unreachable mirror does not hide the state of the others: (results, failures by name)."""
    refuse_during_rebase(workspace, deps)
    results: dict[str, CheckoutResult] = {}
    failures: dict[str, AssembleError] = {}
    for dep in deps:
        try:
            results[dep.name] = _sync_one(workspace, dep, on_step)
        except AssembleError as error:
            failures[dep.name] = error
    return results, failures


def _sync_one(workspace: Workspace, dep: Dependency, on_step: Step) -> CheckoutResult:
    path = workspace.fork_path(dep)
    state = pinned_state(path, dep)
    if state is not None and not borrows(path):  # one that borrows objects is made to own them (git.objects)
        return CheckoutResult.unchanged(dep, path, state)
    from assembler.git.checkout import checkout

    return checkout(workspace, dep, functools.partial(on_step, dep.name))
