"""`assemble checkout [DEP...]`: forks/<dep> at the pinned commit with the series applied."""

from __future__ import annotations

import argparse
import time

from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from assembler.git.checkout import CheckoutResult, checkout
from assembler.report.output import console, emit_json, err_console, short
from assembler.workspace import open_workspace


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("checkout", help="create or update forks/<dep> with the series applied")
    parser.add_argument("names", nargs="*", metavar="DEP")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    workspace = open_workspace(args.workspace)
    deps = workspace.manifest.select(args.names)
    results: list[CheckoutResult] = []
    started = time.perf_counter()
    with workspace.lock(err_console), Progress(
        SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
        console=err_console, transient=True, disable=args.json,
    ) as progress:
        for dep in deps:
            task = progress.add_task(dep.name)
            results.append(checkout(workspace, dep, lambda step, t=task, d=dep: progress.update(t, description=f"{d.name}: {step}")))
            progress.remove_task(task)
    elapsed = time.perf_counter() - started
    if args.json:
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
        console.print(f"{r.dep}: {r.action} at {short(r.head)} ({r.applied} patches{fetched}) -> {r.path}")
    return 0
