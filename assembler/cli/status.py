"""`assemble status [DEP...]`: per dependency, the pin, the fork's branch, its uncommitted edits
(``M file``, as git status), commits not exported yet, a rebase in progress, and the check and
build evidence, with the command that moves each one on. Offline; exit 0."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from assembler.cli.common import add_format

if TYPE_CHECKING:
    from assembler.upstreaming.fork_status import DepOverview

DESCRIPTION = """\
What `git status` and `quilt applied` say, per dependency of the workspace: the pin, the
branch assemble/<dep> in forks/<dep> and its condition, uncommitted edits (M file), commits
not exported to patches/<dep>/ yet, patches already in the pin, an `assemble rebase` in
progress, and the last `check` and build of this pin and series ("migrated on fork").
Reads the workspace only: no fetch, no classification (that is `assemble patches`)."""

def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "status", help="per dependency: pin, branch, edits, unexported commits, rebase, evidence",
        description=DESCRIPTION,
    )
    parser.add_argument("names", nargs="*", metavar="DEP", help="dependencies to show (default: all)")
    add_format(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from assembler.cli.common import open_workspace
    from assembler.report.output import emit_json
    from assembler.upstreaming.fork_status import workspace_overview

    workspace = open_workspace(args)
    found = workspace_overview(workspace, workspace.manifest.select(args.names))
    if args.json:
        emit_json({"workspace": str(workspace.root), "deps": [item.to_json() for item in found]})
        return 0
    import sys

    from assembler.report.table import layout, paragraph, write

    width, _ = layout(sys.stdout)  # a terminal's width, or COLUMNS: each line wraps between words, two deeper
    for index, item in enumerate(found):
        text = "".join(paragraph(line, width, hang=" " * (len(line) - len(line.lstrip(" ")) + 2))
                       for line in lines(item))
        write(("\n" if index else "") + text)
    return 0


def lines(item: DepOverview) -> list[str]:
    """One dependency as `git status` would put it: a head line, then one line per fact, each
    with the command that deals with it. Identifiers are never cut; SHAs are 12 characters."""
    from assembler.git.state import CheckoutCondition
    from assembler.report.output import short

    name = item.name
    out = [f"{name}: pin {short(item.pin)} ({item.kind}, track {item.track}), {_count(item.series, 'patch')}"]
    condition = item.condition
    if condition == CheckoutCondition.ABSENT:
        return [*out, f"  not checked out: `assemble checkout {name}`", *_evidence(item)]
    if condition == CheckoutCondition.FOREIGN:
        return [*out, f"  forks/{name} was not made by assemble: move it away, then `assemble checkout {name}`"]
    if condition == CheckoutCondition.INTERRUPTED:
        return [*out, f"  checkout interrupted: re-run `assemble checkout {name}`"]
    where = f"branch {item.branch}" if item.branch else "detached HEAD"
    stop = item.stop
    if stop is None:
        applied = f"{item.applied} of {_count(item.series, 'patch')} applied"
        out.append(f"  {where} at {short(item.head)}: {condition}, {applied}")
    else:  # what git's session says, not the last checkout's record
        onto = f" onto {short(stop.onto)}" if stop.onto is not None and stop.onto != item.pin else ""
        out.append(f"  {where} at {short(item.head)}: {condition}, {item.applied} of {_count(stop.total, 'patch')} "
                   f"applied{onto}; git {stop.operation} stopped at {stop.label} ({stop.step} of {stop.total})")
    if item.already_applied:
        out.append(f"  already in the pin (git am skipped): {', '.join(item.already_applied)}")
        out.append(f"    `assemble rebase {name} --onto {short(item.pin)}` drops them from the series")
    if condition == CheckoutCondition.STALE:
        out.append(f"  deps.toml or patches/{name}/ changed since: `assemble checkout {name}`")
    if item.operation is not None and item.rebase is None:
        finish = f"finish it in forks/{name} (git {item.operation} --continue), then `assemble export {name}`"
        out.append(f"    {finish}" if stop is not None else f"  stopped in git {item.operation}: {finish}")
    if item.rebase is not None:
        rebase = item.rebase
        # where git stopped is said above when git says it (the user may have gone on by hand)
        stopped = f", stopped at {rebase.stopped_at}" if rebase.stopped_at and stop is None else ""
        files = f" (conflicts in {', '.join(rebase.conflicts)})" if rebase.conflicts else ""
        out.append(f"  rebase in progress onto {short(rebase.onto)} ({rebase.onto_label}): "
                   f"{rebase.phase}{stopped}{files}")
        out.append(f"    `assemble rebase {name} --continue`, or `--abort`")
    if item.edits and (item.rebase is not None or stop is not None):
        go_on = f"`assemble rebase {name} --continue`" if item.rebase is not None or stop is None \
            else f"`git {stop.operation} --continue`"
        out.append(f"  unresolved or uncommitted ({len(item.edits)}): resolve them, `git add` them, then {go_on}")
        out += [f"    {edit.code:<2} {edit.path}" for edit in item.edits]
    elif item.edits:
        out.append(f"  uncommitted edits ({len(item.edits)}): commit them, then `assemble export {name}`")
        out += [f"    {edit.code:<2} {edit.path}" for edit in item.edits]
    if item.unexported:
        out.append(f"  not exported ({len(item.unexported)}): `assemble export {name}` writes them to patches/{name}/")
        out += [f"    {short(commit.sha)} {commit.subject}" for commit in item.unexported]
    return out + _evidence(item)


def _evidence(item: DepOverview) -> list[str]:
    check = item.check
    out = [f"  check: {check.summary} ({check.obtained})" if check is not None
           else "  check: none of this pin and series"]
    if item.build is not None:
        out.append(f"  build: {item.build.summary()}")
    else:
        out.append("  build: none of this pin and series")
    out.append(f"  migrated on fork: {item.migrated_on_fork}")
    return out


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}" + ("" if number == 1 else "es" if noun.endswith("ch") else "s")
