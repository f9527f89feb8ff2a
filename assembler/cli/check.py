"""`assemble check [DEP...]`: prove the sources Stable-ABI clean without compiling: one
preprocessor pass per translation unit with the build's defines and include paths."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from assembler.cli.common import add_format, cuda_version, non_negative_int, open_workspace, torch_version

if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import IO

    from assembler.check.run import CheckReport, DepCheck


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("check",
                                   help="source-level Stable-ABI proof: preprocess every translation unit, no "
                                        "compiling")
    parser.add_argument("names", nargs="*", metavar="DEP", help="dependencies to check (default: all)")
    parser.add_argument("--cuda", metavar="X.Y", type=cuda_version,
                        help="CUDA toolkit for .cu units (default: the newest already installed: local or cached "
                             "from PyPI)")
    parser.add_argument("--torch", metavar="VERSION", type=torch_version,
                        help="torch whose headers are read (default: [bundle] torch)")
    parser.add_argument("--jobs", "-j", type=non_negative_int, default=0, metavar="N",
                        help="translation units scanned at once (default 0: one per CPU)")
    parser.add_argument("--preprocess-only", action="store_true",
                        help="skip the -fsyntax-only pass on clean C++ units (it finds calls hidden by "
                             "TORCH_FEATURE_VERSION)")
    parser.add_argument("--every-unit", action="store_true",
                        help="scan every unit itself (default: units with the same directives share one scan)")
    add_format(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    import sys

    from assembler.audit.report import verdict_style
    from assembler.check.run import CheckOptions, run_check
    from assembler.report.output import emit_json, note, status
    from assembler.report.table import write

    workspace = open_workspace(args)
    options = CheckOptions(cuda=args.cuda, torch=args.torch, jobs=args.jobs, syntax=not args.preprocess_only,
                           share=not args.every_unit)

    def done(check: DepCheck) -> None:  # one line per dependency as it finishes
        how = "cached" if check.cached else f"{check.seconds:.1f} s"
        if check.error is not None:
            line = _Lines(sys.stderr)
            line.add(f"{check.dep}: not checked: {check.error.message}", paint=[("not checked", "red")])
        else:
            verdict = str(check.verdict)
            line = _Lines(sys.stderr)
            line.add(f"{check.dep}: {verdict}, {check.summary} ({how})",
                     paint=[(verdict, verdict_style(check.verdict))])
        write(line.text(), sys.stderr)

    with status("checking translation units", active=not args.json):
        report = run_check(workspace, list(args.names), options, note=note, on_dep=done)
    if args.json:
        emit_json(report.to_json())
    else:
        write(_text(report, sys.stdout), sys.stdout)
    return report.exit_code


class _Lines:
    """Lines for one stream, each wrapped to its width (COLUMNS, the terminal's) with a hanging
    indent, then words painted (so no escape counts toward a line's width)."""

    def __init__(self, stream: IO[str]) -> None:
        from assembler.report.table import layout

        self.width, self.colour = layout(stream)
        self.parts: list[str] = []

    def add(self, text: str, hang: str = "    ", paint: Sequence[tuple[str, str]] = ()) -> None:
        from assembler.report.table import paint as painted
        from assembler.report.table import paragraph

        block = paragraph(text, self.width, hang=hang)
        if self.colour:
            for word, style in paint:
                if word in block:
                    block = block.replace(word, painted(word, *style.split()), 1)
        self.parts.append(block)

    def text(self) -> str:
        return "".join(self.parts)


def _text(report: CheckReport, stream: IO[str]) -> str:
    """The report for a person: the toolchain, then per dependency its verdict and each unit's,
    every line within the width."""
    from assembler.audit.report import verdict_style

    out = _Lines(stream)
    cuda = f", nvcc {report.nvcc}" if report.nvcc else ""
    out.add(f"assemble check: torch {report.torch} headers, {report.cxx}{cuda}", hang="  ")
    for check in report.deps:
        if check.error is not None:
            out.add(f"{check.dep}: not checked: {check.error.message}", hang="  ",
                    paint=[(f"{check.dep}: not checked", "bold red")])
            if check.error.hint:
                out.add(f"  hint: {check.error.hint}", hang="        ")
            continue
        verdict = str(check.verdict)
        when = "cached, " if check.cached else ""
        out.add(f"{check.dep}: {verdict} {check.summary} ({when}{check.seconds:.1f} s, {check.obtained})", hang="  ",
                paint=[(check.dep, "bold"), (verdict, verdict_style(check.verdict))])
        for unit in check.units:
            out.add(f"  {unit.source}: {unit.verdict.value} ({', '.join(unit.passes)})", hang="      ",
                    paint=[(f": {unit.verdict.value} ", verdict_style(unit.verdict))])
            for line in unit.lines():
                out.add(f"    {line}", hang="      ")
    if not report.ok:
        out.add(f"exit {report.exit_code}: " + ("a dependency could not be checked" if any(d.error for d in report.deps)
                                                 else "not every translation unit is CLEAN"))
    return out.text()
