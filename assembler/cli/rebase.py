"""`assemble rebase DEP [--onto REF|horizon] [--upstream URL] [--dry-run]`, `--continue`,
`--abort`: replay a dependency's series onto its moving upstream, never losing work."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from assembler.cli.common import add_format

if TYPE_CHECKING:
    from assembler.upstreaming.rebase import RebaseReport


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "rebase", help="replay a dependency's series onto its tracked upstream branch (drops what landed upstream)",
    )
    parser.add_argument("name", nargs="?", metavar="DEP",
                        help="the dependency to rebase (with --continue/--abort: optional)")
    parser.add_argument("--onto", metavar="REF|horizon", type=_ref,
                        help="branch, tag or commit to rebase onto (default: the tracked branch); "
                             "'horizon' = the newest commit the whole series applies to")
    parser.add_argument("--upstream", metavar="URL", type=_url,
                        help="follow another repository from now on (updates upstream/source)")
    parser.add_argument("--dry-run", action="store_true", help="report what would happen; change nothing")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--continue", dest="resume", action="store_true",
                      help="go on after resolving a conflict (or after a crash)")
    mode.add_argument("--abort", action="store_true", help="restore the checkout, deps.toml and patches/ as they were")
    mode.add_argument("--undo", action="store_true",
                      help="put back the state before the last finished rebase of DEP (kept until its next rebase)")
    mode.add_argument("--drop", dest="drop", metavar="PATCH", action="append",
                      help="during a stopped rebase: leave PATCH (file name, number or part of the name) out of "
                           "the new series (recorded as dropped by you); repeatable")
    mode.add_argument("--skip", dest="drop", metavar="PATCH", action="append", nargs="?", const="",
                      help="like git rebase --skip: drop the patch the rebase stopped at (or PATCH, as --drop)")
    add_format(parser)
    parser.set_defaults(handler=run)


def _ref(text: str) -> str:
    """--onto is handed to git: a branch, tag or commit name by git's rules, never an option."""
    from assembler.manifest.refname import branch_problem

    if (problem := branch_problem(text)) is not None:
        raise argparse.ArgumentTypeError(f"{text[:80]!r} is not a branch, tag or commit name: {problem}")
    return text


def _url(text: str) -> str:
    from assembler.manifest.values import url_problem

    if (problem := url_problem(text)) is not None:
        raise argparse.ArgumentTypeError(f"{text[:80]!r} is not a repository URL: {problem}")
    return text


def run(args: argparse.Namespace) -> int:
    from rich.markup import escape

    from assembler.cli.common import open_workspace
    from assembler.errors import ConflictError, InputError
    from assembler.report.output import emit_json, err_console, status
    from assembler.upstreaming import rebase
    from assembler.upstreaming.rebase import RebaseStatus

    if (args.resume or args.abort or args.undo or args.drop) and (args.onto or args.upstream or args.dry_run):
        raise InputError("--continue, --abort, --undo and --drop take no --onto, --upstream or --dry-run",
                         hint="they carry on (or undo) the rebase already started")
    if not (args.resume or args.abort or args.drop) and not args.name:
        raise InputError("which dependency?", hint="assemble rebase DEP (see `assemble deps`)")
    workspace = open_workspace(args)
    with status("rebase") as spinner:  # None off a terminal and under -q
        def step(name: str) -> None:
            if spinner is not None:
                spinner.update(f"rebase: {name}")

        if args.abort:
            report = rebase.abort(workspace, args.name)
        elif args.drop:
            report = rebase.drop(workspace, args.name, args.drop, on_step=step)
        elif args.undo:
            report = rebase.undo(workspace, workspace.manifest.select([args.name])[0])
        elif args.resume:
            report = rebase.resume(workspace, args.name, on_step=step)
        else:
            dep = workspace.manifest.select([args.name])[0]
            report = rebase.start(workspace, dep, args.onto, args.upstream, args.dry_run, on_step=step)
    if args.json:
        emit_json(report.to_json())
    else:
        print_report(report)
    for warning in report.warnings:
        err_console.print(f"[yellow]warning:[/] {escape(warning)}", soft_wrap=True)
    if report.status == RebaseStatus.DRY_RUN and report.conflicts:  # as `git merge-tree`: exit 1 when it would conflict
        from assembler.errors import CheckFailed

        names = ", ".join(conflict.name for conflict in report.conflicts)
        raise CheckFailed(
            f"{report.dep}: a rebase onto {report.onto_label} would stop: {names} "
            f"{'conflicts' if len(report.conflicts) == 1 else 'conflict'}",
            hint=f"`assemble rebase {report.dep} --onto horizon` goes as far as the series applies; or rebase "
                 "and resolve",
        )
    if report.status == RebaseStatus.STOPPED:
        conflict = report.conflicts[0]
        raise ConflictError(
            f"{report.dep}: patch {conflict.name} conflicts with {report.onto_label} in "
            f"{', '.join(conflict.files) or 'the tree'}",
            hint=f"resolve in {report.checkout} (`git checkout --conflict=zdiff3 FILE` shows the base version too), "
                 f"`git add` the files, then `assemble rebase --continue {report.dep}` (or `assemble rebase "
                 f"{report.dep} --drop {conflict.name}`, or `assemble rebase --abort {report.dep}`)",
        )
    return 0


def print_report(report: RebaseReport) -> None:
    import sys
    import textwrap

    from rich.markup import escape

    from assembler.report.output import clean, console, short, terminal_columns
    from assembler.upstreaming.rebase import RebaseStatus

    width = terminal_columns(sys.stdout)

    def say(text: str) -> None:
        """One item of the report; wrapped lines keep the item's indentation plus two, as a list does."""
        line = clean(text)  # subjects and names are data: no control character reaches the terminal
        if width is not None and len(line) > width:
            indent = " " * (len(line) - len(line.lstrip(" ")) + 2)
            line = textwrap.fill(line, width=width, subsequent_indent=indent, break_on_hyphens=False,
                                 break_long_words=False)
        console.print(escape(line), soft_wrap=True)

    verb = {RebaseStatus.DONE: "rebased", RebaseStatus.DRY_RUN: "would rebase",
            RebaseStatus.STOPPED: "stopped rebasing",
            RebaseStatus.UP_TO_DATE: "up to date with", RebaseStatus.ABORTED: "aborted the rebase onto",
            RebaseStatus.UNDONE: "undid the rebase onto"}[report.status]
    # --onto SHA: the label is the commit itself, said once
    target = (short(report.new_base) if report.new_base.startswith(report.onto_label)
              else f"{report.onto_label} {short(report.new_base)}")
    say(f"{report.dep}: {verb} {target}"
        + (f" (base {short(report.old_base)} -> {short(report.new_base)}, {report.crossed} upstream commits crossed)"
           if report.status != RebaseStatus.ABORTED and report.new_base != report.old_base else ""))
    if report.status == RebaseStatus.UNDONE:
        say(f"  restored {report.checkout}, deps.toml and patches/{report.dep} as they were before that rebase (base "
            f"{short(report.new_base)})")
        return
    if report.status == RebaseStatus.ABORTED:
        kept = " (except what was edited during the rebase: see the warnings)" if report.warnings else ""
        say(f"  restored {report.checkout}, deps.toml and patches/{report.dep} as they were before{kept}")
        return
    if report.applied:
        # a patch a line, as git status lists files: names never run off the edge
        say(f"  applied ({len(report.applied)}):")
        for name in report.applied:
            say(f"    {name}")
    for dropped in report.dropped:
        if dropped.how == "dropped-by-you":
            say(f"  dropped by you: {dropped.name} (not upstream)")
            continue
        carrier = f" = {short(dropped.commit)} {dropped.commit_subject}" if dropped.commit else ""
        say(f"  dropped as upstream: {dropped.name} ({dropped.how}{carrier})")
    for name, pull in report.forwarded.items():
        say(f"  Forwarded: trailer written to {name}: it is in upstream's {pull}")
    if report.range_diff:
        counts = {mark: sum(e.mark == mark for e in report.range_diff) for mark in "=!<>"}
        words = {"=": "unchanged", "!": "changed", "<": "left out", ">": "added"}
        # only what happened: "0 dropped" under a dropped patch read as a contradiction
        said = ", ".join(f"{counts[mark]} {word}" for mark, word in words.items() if counts[mark])
        say(f"  range-diff of the series, before -> after: {said}")
        for entry in report.range_diff:
            detail = {"!": f" ({entry.hunks} hunk{'s' if entry.hunks != 1 else ''} differ)", "<": " (left out)",
                      ">": " (added)"}.get(entry.mark, "")
            say(f"    {entry.mark} {entry.old or entry.new} {entry.subject}{detail}")
    for conflict in report.conflicts:
        say(f"  conflict: {conflict.name} in {', '.join(conflict.files)}")
    if report.horizon is not None:
        h = report.horizon
        say(f"  horizon: the whole series applies up to {short(h.commit.sha)} {h.commit.subject} "
            f"({h.position} of {h.total} first-parent commits after the base)")
        for broken in h.breaks:
            say(f"    {broken.patch}: first broken by {short(broken.commit.sha)} {broken.commit.subject}"
                + (f" ({', '.join(broken.files)})" if broken.files else ""))
    if report.export is not None:
        say(f"  patches/{report.dep}: {len(report.export['written'])} written, {len(report.export['unchanged'])} "
            f"unchanged, {len(report.export['removed'])} removed")
    if report.status in (RebaseStatus.DONE, RebaseStatus.DRY_RUN) and report.manifest:
        changes = ", ".join(f"{k} = {short(v) if k == 'commit' else v}" if v else f"{k} removed" for k,
                            v in report.manifest.items())
        say(f"  deps.toml: {changes}" + (" (not written: dry run)" if report.status == RebaseStatus.DRY_RUN else ""))
    if report.next:
        say("  next:")
        for line in report.next:
            say(f"    {line}")
