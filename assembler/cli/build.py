"""`assemble build --cuda X.Y`: every dependency as an abi3 Stable-ABI artifact, merged into one
audited wheel. With --only, just the named artifacts (one CI runner each; `assemble merge`)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from assembler.cli.common import add_format, cuda_version, non_negative_int, positive_float, torch_version

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress, TaskID

    from assembler.builder.pipeline import BuildFailed, BuildReport
    from assembler.report.output import Heartbeat
    from assembler.workspace import Workspace

PHASE_STYLE = {
    "checking": "dim", "queued": "dim", "configuring": "cyan", "compiling": "cyan", "installing": "cyan",
    "cached": "green", "built": "green", "compiled": "green", "failed": "bold red",
}


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("build", help="build every dependency (cached) and merge one audited abi3 wheel")
    parser.add_argument("--cuda", metavar="X.Y", type=cuda_version,
                        help="CUDA toolkit version (local, else from PyPI); required unless --plan")
    parser.add_argument("--plan", action="store_true",
                        help="check out, then list each dependency's backend, translation units x archs and compile "
                             "jobs; compile nothing")
    parser.add_argument("--torch", metavar="VERSION", type=torch_version,
                        help="torch to build against (default: [bundle] torch)")
    parser.add_argument("--jobs", "-j", type=jobs_count, default=0, metavar="N|auto",
                        help="compiler processes in all (default auto: the fewer of the CPUs and what the available "
                             "memory holds of one compile's peak, measured in the dependency's last build, else "
                             "5 GiB per nvcc job, 1.5 GiB per g++ job)")
    parser.add_argument("--memory-gb", type=positive_float, default=None, metavar="GB",
                        help="memory the compilers may use together (default: 90%% of what is available)")
    parser.add_argument("--profile", metavar="NAME", type=profile_name,
                        help="build each dependency that defines [deps.X.profiles.NAME] reduced by it (the others in "
                             "full); the wheel is labelled +cuXY.NAME, never a release")
    # --verify needs the merged wheel, which --only makes only with --partial (else: verify after `assemble merge`)
    parser.add_argument("--only", action="append", default=[], metavar="DEP",
                        help="build just this dependency's artifact, no merge unless --partial (repeatable)")
    parser.add_argument("--partial", action="store_true",
                        help="with --only: merge, gate (and --verify) just those into a wheel labelled "
                             "+cuXY.partial.DEP in dist/partial/, never a release")
    parser.add_argument("--verify", action="store_true",
                        help="after the audit gate, run `assemble verify` on [bundle] verify-torch (exit 1 on "
                             "any FAIL)")
    parser.add_argument("--shard", metavar="K/N",
                        help="with one --only: compile only shard K of N of its compile jobs into the "
                        "compiler cache, link nothing (`assemble plan --matrix --shards N`); a final build then links")
    parser.add_argument("--artifacts", type=Path, metavar="DIR",
                        help="artifact directory (default: .assemble/artifacts)")
    parser.add_argument("--output", "-o", type=Path, metavar="DIR",
                        help="where the wheel goes (default: <workspace>/dist)")
    parser.add_argument("--allow-unstable", action="append", default=[], metavar="DEP",
                        help="let DEP's extensions pass the audit gate though UNSTABLE (recorded in the summary)")
    add_format(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from assembler.builder.pipeline import BuildFailed, BuildOptions, run_build
    from assembler.cli.common import open_workspace
    from assembler.report.output import err_console

    workspace = open_workspace(args)
    if args.plan:
        return _plan(workspace, tuple(args.only), args.json, args.profile)
    if args.cuda is None:
        from assembler.errors import InputError

        raise InputError("build needs --cuda X.Y (the CUDA toolkit to compile with)",
                         hint="pass e.g. --cuda 13.2, or --plan to compile nothing")
    from assembler.builder.shards import parse_shard

    options = BuildOptions(
        shard=parse_shard(args.shard) if args.shard is not None else None,
        cuda=args.cuda, torch=args.torch, jobs=args.jobs, only=tuple(args.only), artifacts=args.artifacts,
        output=args.output, allow_unstable=tuple(args.allow_unstable), verify=args.verify, partial=args.partial,
        memory=int(args.memory_gb * (1 << 30)) if args.memory_gb else None, profile=args.profile,
    )
    with _Progress(logs=workspace.state_dir) as progress:
        report = run_build(workspace, options, note=progress.note, on_event=progress.event)
    if isinstance(report.error, BuildFailed):
        _print_failures(report.error, err_console)
    _emit(report, args.json)
    if report.error is not None:
        raise report.error
    return 0


def jobs_count(text: str) -> int:
    """--jobs: ``auto`` (0: builder.memory.choose_jobs decides) or a number of compiler processes."""
    return 0 if text == "auto" else non_negative_int(text)


def profile_name(text: str) -> str:
    """--profile NAME: a profile's name as deps.toml may spell it (a segment of the wheel's version)."""
    from assembler.manifest.load import PROFILE_NAME_RE

    if not PROFILE_NAME_RE.match(text):
        raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a profile name: 1 to 32 lowercase letters and digits, "
                                         "starting with a letter (as [deps.X.profiles.NAME] names it)")
    return text


def _plan(workspace: Workspace, only: tuple[str, ...], as_json: bool, profile: str | None = None) -> int:
    """`build --plan`: the plan on stdout (JSON or text); exit 2 when a dependency cannot be planned."""
    from assembler.builder.planner import plan_build, render
    from assembler.report.output import console, emit_json, note

    plan = plan_build(workspace, only, note=(lambda _: None) if as_json else note, profile=profile)
    if as_json:
        emit_json(plan.to_json())
    else:
        render(plan, lambda line: console.print(line, markup=False, highlight=False, soft_wrap=True))
    if plan.error is not None:
        raise plan.error
    return 0


def _print_failures(failure: BuildFailed, console: Console) -> None:
    from assembler.builder.builder import format_failure

    for outcome in failure.failed:
        if outcome.unstable:
            continue  # the error line names each include
        if console.is_terminal:
            console.rule(f"{outcome.dep}: first error in {outcome.log}", style="red")
        else:  # a rule fills the (wide, piped) width: a plain heading instead
            console.print(f"--- {outcome.dep}: first error in {outcome.log} ---", markup=False, highlight=False)
        console.print(format_failure(outcome), markup=False, highlight=False)


class _Progress:
    """Per-dependency progress on stderr while building; silent only under -q (--json keeps
    stderr's progress: the document goes to stdout).

    On a terminal: one live rich row per dependency. Otherwise (a CI log, a file): one line per
    phase change and per unit finished (ninja's ``[k/N]``, setuptools' compile lines), with the
    elapsed time, never a redraw; when nothing was printed for ``output.HEARTBEAT_S``, a line per
    dependency still at work; and under CI (GITHUB_ACTIONS, CI) each finished dependency's
    build log in a ``::group::`` section."""

    def __init__(self, logs: Path) -> None:
        import sys
        import threading
        import time

        from assembler.report import output

        self.quiet = output.settings.verbosity < 0
        self.guard = threading.Lock()  # events come from every build's thread, beats from the heartbeat's
        self.logs = logs
        self.started = time.monotonic()
        self.phases: dict[str, tuple[str, int | None]] = {}  # each dependency's last line: phase, units done
        self.lines: dict[str, str] = {}  # ... and what a heartbeat says of it
        self.tasks: dict[str, TaskID] = {}
        self.progress: Progress | None = None
        self.beat: Heartbeat | None = None
        if not self.quiet and sys.stderr.isatty():
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                SpinnerColumn,
                TextColumn,
                TimeElapsedColumn,
            )

            self.progress = Progress(
                SpinnerColumn(), TextColumn("{task.description}"), BarColumn(bar_width=24), MofNCompleteColumn(),
                TimeElapsedColumn(), console=output.err_console, transient=False,
            )

    def __enter__(self) -> _Progress:
        from assembler.report import output

        if self.progress is not None:
            self.progress.start()
        elif not self.quiet:
            self.beat = output.current_heartbeat()
            self.beat.describe = self.still_running
        return self

    def __exit__(self, *exc: object) -> None:
        if self.progress is not None:
            self.progress.stop()
        if self.beat is not None:
            self.beat.describe = None

    def note(self, message: str) -> None:
        from assembler.report import output

        if not self.quiet:
            with self.guard:
                self.lines.clear()  # the checkout and toolchain steps: the heartbeat repeats the note
            output.note(message)

    def still_running(self) -> list[str]:
        """The heartbeat's lines: each dependency at work, its phase and units done, with the time
        now; before any build began (a fetch, an environment install), the last note."""
        import time

        from assembler.builder.outcome import BuildOutcome

        now = time.monotonic()
        with self.guard:
            lines = list(self.lines.items())
            phases = dict(self.phases)
        if not lines:
            return self.beat.repeat(now) if self.beat is not None else []
        return [f"{line}: still running ({now - self.started:.1f} s)" for dep, line in lines
                if phases[dep][0] not in (*BuildOutcome, "checking", "queued")]

    def event(self, dep: str, phase: str, done: int | None, total: int | None, unit: str | None = None) -> None:
        from assembler.builder.outcome import BuildOutcome

        finished = phase in tuple(BuildOutcome)
        if self.progress is not None:
            self._row(dep, phase, done, total, finished)
            return
        if self.quiet or self.phases.get(dep) == (phase, done):
            return
        import time

        from assembler.report import output

        counts = f" {done}/{total}" if done is not None and total else f" unit {done}" if done is not None else ""
        line = f"{dep}: {phase}{counts}" + (f" {unit}" if unit else "")
        with self.guard:
            self.phases[dep] = (phase, done)
            self.lines[dep] = f"{dep}: {phase}" + (f" ({done}/{total} done)" if done is not None and total
                                                   else f" ({done} done)" if done is not None else "")
        output.note(f"{line} ({time.monotonic() - self.started:.1f} s)")
        if finished and phase != BuildOutcome.CACHED and output.in_ci():
            self._group(dep)

    def _row(self, dep: str, phase: str, done: int | None, total: int | None, finished: bool) -> None:
        assert self.progress is not None
        if dep not in self.tasks:
            self.tasks[dep] = self.progress.add_task(dep, total=None)
        task = self.tasks[dep]
        style = PHASE_STYLE.get(phase, "")
        description = f"{dep:<16} [{style}]{phase}[/]"
        if finished:
            self.progress.update(task, description=description, total=1, completed=1)
            self.progress.stop_task(task)
        elif done is not None:
            self.progress.update(task, description=description, total=total, completed=done)
        else:
            self.progress.update(task, description=description)

    def _group(self, dep: str) -> None:
        """The dependency's build log as a collapsed section of the CI log. The log is the build's
        output, so workflow commands in it are switched off (::stop-commands::) while it prints."""
        import os
        import secrets
        import sys

        from assembler.builder.builder import build_log, open_build_log
        from assembler.errors import InputError

        log = build_log(self.logs, dep)
        try:  # never through a link: a log committed as one would print a file of this machine into CI
            with os.fdopen(open_build_log(log, os.O_RDONLY), errors="replace") as handle:
                text = handle.read()
        except (OSError, InputError):
            return
        token = secrets.token_hex(16)
        sys.stderr.write(f"::group::{dep} build log ({log})\n::stop-commands::{token}\n{text}"
                         f"{'' if text.endswith(chr(10)) or not text else chr(10)}::{token}::\n::endgroup::\n")
        sys.stderr.flush()


def _emit(report: BuildReport, as_json: bool) -> None:
    from rich.markup import escape

    from assembler.report.output import console, emit_json, err_console, short

    if as_json:
        for warning in report.warnings:  # stderr is the log's, whatever stdout carries
            err_console.print(f"warning: {warning}", markup=False, highlight=False, soft_wrap=True)
        emit_json(report.as_dict())
        return
    from assembler.audit.report import verdict_style
    from assembler.builder.outcome import BuildOutcome
    from assembler.report.table import Cell, TextTable

    # Names, SHAs and verdicts are never cut; how it was built and the archs wrap between words.
    table = TextTable("dep", "commit", "patches", "build", "archs", "min torch", "verdict", text=("build", "archs"),
                      title=f"{report.bundle} for CUDA {report.cuda}, torch {report.torch}"
                      + (f", profile {report.profile}" if report.profile else ""))
    for dep in report.deps:
        build = {BuildOutcome.CACHED: Cell("cached"), BuildOutcome.BUILT: Cell(f"built {dep.seconds:.1f}s"),
                 BuildOutcome.COMPILED: Cell(f"shard {dep.shard['shard']}/{dep.shard['count']} compiled "
                                             f"{dep.seconds:.1f}s"
                                             if dep.shard else "compiled"),
                 }.get(dep.status, Cell(str(dep.status), "red"))
        verdict = "-" if dep.verdict is None else str(dep.verdict)
        table.add_row(dep.dep, short(dep.commit), str(dep.patches), build, " ".join(dep.archs) or "-",
                      dep.min_torch or dep.torch_target, Cell(verdict, *verdict_style(dep.verdict).split()))
    table.print(console.file)
    for name in report.allowed_unstable:
        console.print(f"[yellow]allowed UNSTABLE:[/] {name} (--allow-unstable)")
    for warning in report.warnings:
        err_console.print(f"[yellow]warning:[/] {escape(warning)}", soft_wrap=True)
    if report.size is not None:
        from assembler.report.table import layout, paragraph, write
        from assembler.wheel.size import summary_lines

        width = layout(console.file)[0]  # wrapped between words where a width is known (it ran to 111 columns)
        for line in summary_lines(report.size):
            write(paragraph(line, width, hang="  "), console.file)
    if report.wheel is not None and report.partial:
        console.print(f"partial wheel (not a release; lacks {', '.join(report.partial)}): {report.wheel}",
                      highlight=False, soft_wrap=True)
    elif report.wheel is not None:
        console.print(f"wheel: {report.wheel}", highlight=False, soft_wrap=True)
    elif report.error is not None:
        console.print("[red]no wheel[/] (see the error below)")
    elif report.artifacts is not None:
        console.print(f"artifacts: {report.artifacts} (merge with `assemble merge`)", highlight=False, soft_wrap=True)
    if report.verified is not None:
        report.verified.render(console)
