"""`assemble check [DEP...]`: prove the sources Stable-ABI clean without compiling: one
preprocessor pass per translation unit with the build's defines and include paths."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from assembler.cli.common import add_format, cuda_version, non_negative_int, open_workspace, torch_version

if TYPE_CHECKING:
    from rich.console import Console

    from assembler.check.run import CheckReport, DepCheck


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("check", help="source-level Stable-ABI proof: preprocess every translation unit, no compiling")
    parser.add_argument("names", nargs="*", metavar="DEP", help="dependencies to check (default: all)")
    parser.add_argument("--cuda", metavar="X.Y", type=cuda_version, help="CUDA toolkit for .cu units (default: the newest already installed: local or cached from PyPI)")
    parser.add_argument("--torch", metavar="VERSION", type=torch_version, help="torch whose headers are read (default: [bundle] torch)")
    parser.add_argument("--jobs", "-j", type=non_negative_int, default=0, metavar="N",
                        help="translation units scanned at once (default 0: one per CPU)")
    parser.add_argument("--preprocess-only", action="store_true",
                        help="skip the -fsyntax-only pass on clean C++ units (it finds calls hidden by TORCH_FEATURE_VERSION)")
    parser.add_argument("--every-unit", action="store_true",
                        help="scan every unit itself (default: units with the same directives share one scan)")
    add_format(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from rich.markup import escape

    from assembler.audit.report import verdict_style
    from assembler.check.run import CheckOptions, run_check
    from assembler.report.output import clean, emit_json, err_console, note, status

    workspace = open_workspace(args)
    options = CheckOptions(cuda=args.cuda, torch=args.torch, jobs=args.jobs, syntax=not args.preprocess_only,
                           share=not args.every_unit)

    def done(check: DepCheck) -> None:  # one line per dependency as it finishes
        how = "cached" if check.cached else f"{check.seconds:.1f} s"
        if check.error is not None:
            err_console.print(f"{check.dep}: [red]not checked[/]: {escape(clean(check.error.message))}", soft_wrap=True)
        else:
            verdict = str(check.verdict)
            err_console.print(f"{check.dep}: [{verdict_style(verdict)}]{verdict}[/], {check.summary} ({how})", soft_wrap=True, highlight=False)

    with status("checking translation units", active=not args.json):
        report = run_check(workspace, list(args.names), options, note=note, on_dep=done)
    if args.json:
        emit_json(report.to_json())
    else:
        from assembler.report.output import console

        _print(report, console)
    return report.exit_code


def _print(report: CheckReport, console: Console) -> None:
    from rich.markup import escape

    from assembler.audit.report import verdict_style
    from assembler.report.output import clean

    cuda = f", nvcc {report.nvcc}" if report.nvcc else ""
    console.print(f"assemble check: torch {report.torch} headers, {report.cxx}{cuda}", highlight=False, soft_wrap=True)
    for check in report.deps:
        if check.error is not None:
            console.print(f"[bold red]{check.dep}: not checked[/]: {escape(clean(check.error.message))}", soft_wrap=True)
            if check.error.hint:
                console.print(f"  hint: {escape(clean(check.error.hint))}", soft_wrap=True, highlight=False)
            continue
        verdict = str(check.verdict)
        when = "cached, " if check.cached else ""
        console.print(f"[bold]{check.dep}[/]: [{verdict_style(verdict)}]{verdict}[/] {check.summary} "
                      f"({when}{check.seconds:.1f} s, {check.obtained})", highlight=False, soft_wrap=True)
        for unit in check.units:
            console.print(f"  {escape(clean(unit.source))}: [{verdict_style(unit.verdict)}]{unit.verdict.value}[/] ({', '.join(unit.passes)})",
                          highlight=False, soft_wrap=True)
            for line in unit.lines():
                console.print(f"    {escape(clean(line))}", highlight=False, soft_wrap=True)
    if not report.ok:
        console.print(f"exit {report.exit_code}: " + ("a dependency could not be checked" if any(d.error for d in report.deps)
                      else "not every translation unit is CLEAN"), highlight=False)
