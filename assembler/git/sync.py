"""Bring a set of checkouts up to date for `assemble checkout` and `assemble build`.

Up-to-date checkouts are recognised from their state file alone; git and gitpython are
loaded only when a checkout needs work, which keeps a no-op run close to interpreter start-up.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from assembler.errors import ConflictError
from assembler.git.state import CheckoutResult, CheckoutState, is_up_to_date, series_digest
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
            hint=f"finish it with `assemble rebase {name} --continue`, or undo it with `assemble rebase {name} --abort`",
        )


@locked
def sync_checkouts(workspace: Workspace, deps: list[Dependency], on_step: Step = lambda *_: None) -> dict[str, CheckoutResult]:
    """Every checkout of ``deps`` up to date; refused during a rebase."""
    refuse_during_rebase(workspace, deps)
    results: dict[str, CheckoutResult] = {}
    for dep in deps:
        path = workspace.fork_path(dep)
        state = CheckoutState.load(path) if path.exists() else None
        if state is not None and is_up_to_date(state, dep, series_digest(dep)):
            results[dep.name] = CheckoutResult.unchanged(dep, path, state)
            continue
        from assembler.git.checkout import checkout

        results[dep.name] = checkout(workspace, dep, functools.partial(on_step, dep.name))
    return results
