"""One word per checkout for `assemble deps` (``CheckoutCondition``), from the state file, the
git directory and one plain git process: no GitPython, so `assemble deps` starts fast."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from assembler.git.process import WorkTree
from assembler.git.reproducible import operation_in
from assembler.git.state import CheckoutCondition, CheckoutState, CheckoutStatus, interrupted_series_am, series_digest

if TYPE_CHECKING:
    from assembler.manifest import Dependency
    from assembler.workspace import Workspace


def inspect_all(workspace: Workspace, deps: list[Dependency]) -> list[CheckoutCondition]:
    """``inspect`` of each of ``deps``, in order, their git processes running side by side: a
    `git status` walks the checkout (and its submodules), so on a workspace of real kernels,
    each with a CUTLASS submodule, one after another is most of `assemble deps`. The first
    error, in manifest order, is raised."""
    import threading  # loaded with subprocess already: no start-up cost

    found: list[CheckoutCondition | None] = [None] * len(deps)
    failed: list[BaseException | None] = [None] * len(deps)

    def one(index: int) -> None:
        try:
            found[index] = inspect(workspace, deps[index])
        except BaseException as error:  # re-raised below, in the caller's thread
            failed[index] = error

    workers = [threading.Thread(target=one, args=(index,), daemon=True) for index in range(1, len(deps))]
    for worker in workers:
        worker.start()
    if deps:
        one(0)
    for worker in workers:
        worker.join()
    for error in failed:
        if error is not None:
            raise error
    return [condition for condition in found if condition is not None]


def refuse_lost_stores(path: Path, name: str) -> None:
    """An error naming the object store that the checkout ``path`` borrows from and that is
    gone (a checkout made by an older assemble, whose mirror `assemble cache clean` removed):
    what git would read of it (HEAD, unexported commits) cannot be read, and nothing may say
    otherwise. `assemble checkout` makes the checkout own its objects again."""
    from assembler.errors import InputError
    from assembler.git.objects import borrowed, borrows

    if not borrows(path):
        return
    gone = [store for store in borrowed(path / ".git" / "objects") if not store.is_dir()]
    if gone:
        raise InputError(f"{path} borrows objects from {gone[0]}, which is gone (moved, or removed by `assemble "
                         "cache clean`)",
                         hint=f"run `assemble checkout {name}`: it copies them from the mirror again (fetched if "
                              "need be)")


def inspect(workspace: Workspace, dep: Dependency) -> CheckoutCondition:
    """The checkout's condition (see CheckoutCondition)."""
    from assembler.errors import InputError

    path = workspace.fork_path(dep)
    if not path.exists():
        return CheckoutCondition.ABSENT
    if workspace.rebase_pending(dep.name):
        return CheckoutCondition.REBASING
    state = CheckoutState.load(path)
    if state is None:
        return CheckoutCondition.FOREIGN
    tree = WorkTree(path, hint="move it away and run `assemble checkout` again")
    if not tree.git_dir.is_dir():
        raise InputError(f"{path} is not a git checkout", hint="move it away and run `assemble checkout` again")
    refuse_lost_stores(path, dep.name)
    if operation_in(tree.git_dir):
        return CheckoutCondition.INTERRUPTED if interrupted_series_am(path, state) else CheckoutCondition.STOPPED
    # One process for both HEAD and the edits (porcelain v2 names the head commit).
    lines = tree.out("status", "--porcelain=v2", "--branch", "--untracked-files=normal").splitlines()
    head = next((line.split()[2] for line in lines if line.startswith("# branch.oid ")), None)
    dirty = any(line and not line.startswith("#") for line in lines)
    if state.status == CheckoutStatus.STOPPED:
        return CheckoutCondition.ABORTED if head == state.base else CheckoutCondition.UNEXPORTED
    if state.status != CheckoutStatus.READY:
        return CheckoutCondition.INTERRUPTED
    if head != state.head:
        return CheckoutCondition.UNEXPORTED
    if dirty:
        return CheckoutCondition.DIRTY
    if state.base != dep.commit or state.series_digest != series_digest(dep):
        return CheckoutCondition.STALE
    return CheckoutCondition.READY
