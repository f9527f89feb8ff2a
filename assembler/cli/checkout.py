"""`assemble checkout [DEP...]`: forks/<dep> at the pinned commit with the series applied."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from assembler.cli.common import add_format, failures_json, print_failures

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

    from assembler.errors import AssembleError
    from assembler.git.state import CheckoutResult
    from assembler.workspace import Workspace


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("checkout", help="create or update forks/<dep> with the series applied")
    parser.add_argument("names", nargs="*", metavar="DEP", help="dependencies to check out (default: all)")
    add_format(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from assembler.cli.common import open_workspace
    from assembler.git.sync import sync_each

    started = time.perf_counter()
    workspace = open_workspace(args)
    deps = workspace.manifest.select(args.names)
    spinners = _Spinners(quiet=args.json)
    try:
        done, failures = sync_each(workspace, deps, spinners)
    finally:
        spinners.close()
    results = [done[dep.name] for dep in deps if dep.name in done]
    elapsed = time.perf_counter() - started
    # keep going: every dependency is tried; the exit code is the first failure's
    code = int(next(iter(failures.values())).exit_code) if failures else 0
    _report_failures(failures, len(deps))
    _report_already_applied(workspace, results)
    if args.json:
        from assembler.report.output import emit_json

        emit_json({
            "seconds": round(elapsed, 3),
            "ok": not failures,
            "deps": [
                {"name": r.dep, "path": str(r.path), "action": r.action, "head": r.head, "patches": r.applied,
                 "fetched": r.fetched,
                 "already_applied": list(r.already_applied), "edits": list(r.edits)}
                for r in results
            ],
            "failures": failures_json(failures),
        })
        return code
    here = Path.cwd()
    for r in results:
        fetched = ", fetched" if r.fetched else ""
        # the fork relative to where assemble was started when it is below (forks/vecadd fits 80 columns); --json has it
        # whole
        shown = r.path.relative_to(here) if r.path.is_relative_to(here) else r.path
        print(f"{r.dep}: {r.action} at {r.head[:12]} ({r.applied} patches{fetched}) -> {shown}")
        for edit in r.edits:  # kept, as `git checkout` keeps and lists them
            print(f"  {edit}")
    return code


def _report_already_applied(workspace: Workspace, results: list[CheckoutResult]) -> None:
    """Patches that changed nothing at the pin (a pin moved by hand past them): named on stderr
    with the rebase that drops them from the series; the checkout itself is complete."""
    from assembler.report.output import note

    for r in results:
        if r.already_applied:
            pin = workspace.manifest.deps[r.dep].commit
            note(f"{r.dep}: already in the pinned commit {pin[:12]}, so git am skipped: "
                 f"{', '.join(r.already_applied)}; `assemble rebase {r.dep} --onto {pin[:12]}` drops "
                 f"{'it' if len(r.already_applied) == 1 else 'them'} from patches/{r.dep}/")


def _report_failures(failures: dict[str, AssembleError], total: int) -> None:
    """Every failure on stderr (also with --json: its document carries them too)."""
    print_failures(failures)
    if failures and total > 1:
        print(f"checkout: {len(failures)} of {total} dependencies failed ({', '.join(failures)})", file=sys.stderr)


class _Spinners:
    """One rich progress row per dependency on a terminal, created on its first step (a no-op
    shows none and never imports rich); one line per step otherwise."""

    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet
        self.progress: Progress | None = None
        self.tasks: dict[str, TaskID] = {}

    def __call__(self, dep: str, step: str) -> None:
        import sys

        from assembler.report import output

        if self.quiet or output.settings.verbosity < 0:
            return
        if not sys.stderr.isatty():  # a CI log or a file: one line per step as it happens, never a redraw
            output.note(f"{dep}: {step}")
            return
        if self.progress is None:
            from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

            from assembler.report.output import err_console

            self.progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                                     console=err_console, transient=True)
            self.progress.start()
        if dep not in self.tasks:
            self.tasks[dep] = self.progress.add_task(dep)
        self.progress.update(self.tasks[dep], description=f"{dep}: {step}")

    def close(self) -> None:
        if self.progress is not None:
            self.progress.stop()
