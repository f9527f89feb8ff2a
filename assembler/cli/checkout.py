"""`assemble checkout [DEP...]`: forks/<dep> at the pinned commit with the series applied."""

from __future__ import annotations

import argparse
import time
from typing import TYPE_CHECKING

from assembler.cli.common import add_format

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("checkout", help="create or update forks/<dep> with the series applied")
    parser.add_argument("names", nargs="*", metavar="DEP", help="dependencies to check out (default: all)")
    add_format(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from assembler.cli.common import open_workspace
    from assembler.git.sync import sync_checkouts

    started = time.perf_counter()
    workspace = open_workspace(args)
    deps = workspace.manifest.select(args.names)
    spinners = _Spinners(quiet=args.json)
    try:
        results = list(sync_checkouts(workspace, deps, spinners).values())
    finally:
        spinners.close()
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


class _Spinners:
    """One rich progress row per dependency, created on its first step: a no-op shows none
    and never imports rich."""

    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet
        self.progress: Progress | None = None
        self.tasks: dict[str, TaskID] = {}

    def __call__(self, dep: str, step: str) -> None:
        if self.quiet:
            return
        if self.progress is None:
            from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

            from assembler.report.output import err_console

            self.progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=err_console, transient=True)
            self.progress.start()
        if dep not in self.tasks:
            self.tasks[dep] = self.progress.add_task(dep)
        self.progress.update(self.tasks[dep], description=f"{dep}: {step}")

    def close(self) -> None:
        if self.progress is not None:
            self.progress.stop()
