"""`assemble checkout [DEP...]`: forks/<dep> at the pinned commit with the series applied."""

from __future__ import annotations

import argparse
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from assembler.git.state import CheckoutResult
    from assembler.manifest import Dependency
    from assembler.workspace import Workspace


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("checkout", help="create or update forks/<dep> with the series applied")
    parser.add_argument("names", nargs="*", metavar="DEP")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from assembler.git.state import CheckoutResult, CheckoutState, is_up_to_date, series_digest
    from assembler.workspace import open_workspace

    started = time.perf_counter()
    workspace = open_workspace(args.workspace)
    deps = workspace.manifest.select(args.names)
    results: list[CheckoutResult] = []
    with workspace.lock():
        pending = []
        for dep in deps:
            path = workspace.fork_path(dep)
            state = CheckoutState.load(path) if path.exists() else None
            if state is not None and is_up_to_date(state, dep, series_digest(dep)):
                results.append(CheckoutResult.unchanged(dep, path, state))
            else:
                pending.append(dep)
        if pending:
            # git, gitpython and rich are imported only when there is work: a no-op stays fast.
            results += _checkout(workspace, pending, quiet=args.json)
    order = [dep.name for dep in deps]
    results.sort(key=lambda r: order.index(r.dep))
    elapsed = time.perf_counter() - started
    if args.json:
        from assembler.report.output import emit_json

        emit_json({
            "seconds": round(elapsed, 3),
            "deps": [
                {"name": r.dep, "path": str(r.path), "action": r.action, "head": r.head, "patches": r.applied, "fetched": r.fetched}
                for r in results
            ],
        })
        return 0
    for r in results:
        fetched = ", fetched" if r.fetched else ""
        print(f"{r.dep}: {r.action} at {r.head[:12]} ({r.applied} patches{fetched}) -> {r.path}")
    return 0


def _checkout(workspace: Workspace, deps: list[Dependency], quiet: bool) -> list[CheckoutResult]:
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    from assembler.git.checkout import checkout
    from assembler.report.output import err_console

    results = []
    with Progress(
        SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
        console=err_console, transient=True, disable=quiet,
    ) as progress:
        for dep in deps:
            task = progress.add_task(dep.name)
            results.append(checkout(workspace, dep, lambda step, t=task, d=dep: progress.update(t, description=f"{d.name}: {step}")))
            progress.remove_task(task)
    return results
