"""`assemble audit PATH... [--json] [--check torch|abi3|all] [-v]`: Stable-ABI and abi3 audit, wheels read in place."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from assembler.audit.gate import CheckKind, Verdict
from assembler.cli.common import add_format


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "audit",
        help="prove wheels, directories or shared objects use only the torch stable ABI and the CPython limited API",
        description=(
            "Read every ELF shared object (wheels in place, without extracting) and report its torch ABI "
            f"({Verdict.STABLE} / {Verdict.UNSTABLE} / {Verdict.NO_TORCH}, minimum torch), CPython limited-API use "
            "against the abi3 tag, and DT_NEEDED. Exit 0 ok, 1 a --check failed, 2 unreadable input."
        ),
    )
    parser.add_argument("paths", nargs="*", type=Path, metavar="PATH", help="wheel, directory or shared object")
    add_format(parser)
    parser.add_argument(
        "--check", choices=[kind.value for kind in CheckKind], default=None,
        help="exit 1 when an object uses unstable LibTorch symbols, imports a torch symbol its DT_NEEDED "
             "libraries do not "
        "provide (UNRESOLVED), or Requires-Dist torch is below the symbol floor "
        "(torch); when an object leaves the limited API, needs a newer Python than the abi3 tag, uses CPython in a "
        "wheel not tagged abi3, or Requires-Python is too low (abi3; objects without CPython symbols always pass); "
        "or any of them (all)",
    )
    parser.add_argument(
        "--torch-lib", type=Path, default=None, metavar="DIR",
        help="resolve each object's torch symbols against this torch's libraries (site-packages/torch/lib), over the "
        "shipped table of a CUDA torch's libraries (default: the shipped table alone); UNRESOLVED fails --check "
        "torch/all",
    )
    parser.add_argument(
        "--torch-table", type=Path, default=None, metavar="JSON",
        help="torch shim version table to use or refresh (default: the one shipped with assembler)",
    )
    parser.add_argument(
        "--refresh-torch-table", action="store_true",
        help="merge the TORCH_FEATURE_VERSION guards of a torch's shim headers into the table, then exit",
    )
    parser.add_argument(
        "--from-torch", default=sys.executable, metavar="PYTHON|WHEEL",
        help="with --refresh-torch-table: a Python with torch installed, or a torch wheel (default: this Python)",
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from assembler.audit.torchdata import DEFAULT_TABLE
    from assembler.errors import CheckFailed, InputError

    table = args.torch_table or DEFAULT_TABLE
    if args.refresh_torch_table:
        return _refresh(args.from_torch, table)
    if not args.paths:
        raise InputError("assemble audit needs at least one PATH", hint="assemble audit dist/*.whl")

    import threading

    from assembler.audit import audit_paths
    from assembler.audit.gate import findings

    # Output modules (rich) load while the audit inflates members: start-up is most of the budget.
    loader = threading.Thread(target=_import_output, args=(args.json,), daemon=True)
    loader.start()
    from assembler.audit.wheel_scan import unreadable

    reports = audit_paths(args.paths, table_path=table, torch_lib=args.torch_lib, keep_going=True)
    loader.join()
    from assembler.report.output import console, emit_json

    if args.json:
        payload = [r.to_json() for r in reports]
        emit_json(payload[0] if len(payload) == 1 else {"reports": payload})
    else:
        from assembler.audit.report import render

        for report in reports:
            if (line := _profile_line(report.path)) is not None:  # first: what was built, then what it is
                console.print(line, markup=False, highlight=False, soft_wrap=True)
            render(report, console, verbose=args.verbose, legend=report is reports[-1])
    broken = unreadable(reports)
    if broken:  # every other object's verdict is in the report above; the run still says no
        more = f" (and {len(broken) - 1} more object(s))" if len(broken) > 1 else ""
        raise InputError(broken[0] + more, hint="the report lists every other object's verdict")
    if args.check:
        failed = [finding for r in reports for finding in findings(r, args.check)]
        from assembler.audit.report import print_failures

        print_failures(failed)
        if failed:
            raise CheckFailed(f"--check {args.check}: {len(failed)} finding(s)")
    return 0


def _profile_line(path: str) -> str | None:
    """A merged wheel built on a build profile says so (its assembler.json's per-dependency
    "profile"), so a smoke bundle is never taken for a release; None for anything else."""
    import json
    import re

    from assembler.audit.limits import MAX_JSON_DOCUMENT
    from assembler.audit.member import read_small_member
    from assembler.audit.zipindex import read_index
    from assembler.errors import AssembleError

    if not path.endswith(".whl"):
        return None
    try:
        members = read_index(path, re.compile(rb"^[^/]+\.dist-info/assembler\.json$"))
        deps = json.loads(read_small_member(members[0], MAX_JSON_DOCUMENT))["deps"] if members else {}
        profiled = {name: str(dep["profile"]) for name,
                    dep in deps.items() if isinstance(dep, dict) and dep.get("profile")}
    except (AssembleError, OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    if not profiled:
        return None
    return (f"build profile: {', '.join(f'{name} {profile}' for name, profile in profiled.items())} "
            "(a reduced build, not a release)")


def _import_output(json_only: bool) -> None:
    import assembler.report.output

    if not json_only:
        import assembler.audit.report  # noqa: F401


def _refresh(source: str, table: Path) -> int:
    from assembler.audit.torchheaders import refresh_table
    from assembler.report.output import console

    summary = refresh_table(source, table)
    console.print(
        f"torch {summary.torch_version}: {summary.confirmed} guarded shim symbols confirmed, "
        f"{len(summary.added)} added, {len(summary.changed)} changed -> {summary.path}"
    )
    for name in summary.added:
        console.print(f"  added {name}")
    for name in summary.changed:
        console.print(f"  changed {name}")
    return 0
