"""`assemble sbom WHEEL [--format table|json]`, `assemble sbom OLD NEW`: the CycloneDX SBOM a
merged wheel carries (PEP 770), read in place; with two wheels, what changed between them."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from assembler.cli.common import add_format

if TYPE_CHECKING:
    from assembler.wheel.sbom import SbomDep


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "sbom", help="show the SBOM of a merged wheel, or what changed between two",
        description="Read *.dist-info/sboms/*.cdx.json (CycloneDX 1.6) from a wheel without extracting it: per bundled "
        "dependency the repository, pinned commit, patches (status from their DEP-3 headers) and toolchain. "
        "With OLD and NEW: pins, patches and toolchains that changed. Exit 0, or 2 on an unreadable wheel.",
    )
    parser.add_argument("wheels", nargs="+", type=Path, metavar="WHEEL", help="a wheel; two wheels (OLD NEW) to diff")
    add_format(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from assembler.errors import InputError
    from assembler.report.output import emit_json
    from assembler.wheel.sbom import diff_sboms, read_wheel_sbom

    if len(args.wheels) > 2:
        raise InputError(f"assemble sbom takes one wheel, or two to compare; got {len(args.wheels)}",
                         hint="assemble sbom OLD.whl NEW.whl")
    loaded = [read_wheel_sbom(wheel) for wheel in args.wheels]
    if len(loaded) == 2:
        changes = diff_sboms(loaded[0][2], loaded[1][2])
        if args.format == "json":
            emit_json({"old": str(args.wheels[0]), "new": str(args.wheels[1]), "changes": changes})
        else:
            _print_diff(changes)
        return 0
    member, data, deps = loaded[0]
    if args.format == "json":
        emit_json({"wheel": str(args.wheels[0]), "member": member, "serial": data.get("serialNumber"),
                   "spec_version": data.get("specVersion"), "deps": [dep.to_json() for dep in deps]})
        return 0
    _print_table(args.wheels[0], member, data, deps)
    return 0


def _print_table(wheel: Path, member: str, data: dict[str, Any], deps: list[SbomDep]) -> None:
    import sys

    from assembler.report.output import console, short
    from assembler.report.table import Cell, TextTable, clean, is_terminal, layout, paragraph, write
    from assembler.series.seriesfile import patch_label

    root = data.get("metadata", {}).get("component", {})
    title = (str(wheel), f"{member} (CycloneDX {data.get('specVersion')}): {root.get('name')} {root.get('version')}")
    table = TextTable("dependency", "commit", "patch", "status", "evidence", text=("evidence",), title=title)
    for dep in deps:
        for index, patch in enumerate(dep.patches or [None]):
            cells = [dep.name, short(dep.commit)] if index == 0 else ["", ""]
            cells += [patch.file, patch.status, patch.evidence] if patch else ["(no patches)", "", ""]
            table.add_row(*cells)
    width, _ = layout(sys.stdout)
    if table.fits(width, plain=not is_terminal(sys.stdout)):
        table.print(console.file)
    else:  # narrower: as `assemble patches` at 80 columns, the file name (never cut) under its number
        for line in title:
            write(paragraph(line, width))
        for dep in deps:
            count = {0: "no patches", 1: "1 patch"}.get(len(dep.patches), f"{len(dep.patches)} patches")
            write(f"{clean(dep.name)} {short(dep.commit)}: {count}\n")
            if not dep.patches:
                continue
            names = [patch.file for patch in dep.patches]
            patches = TextTable("patch", "status", "evidence", text=("evidence",), edge=False, notes_at="status")
            for patch in dep.patches:
                patches.add_row(patch_label(names, patch.file), patch.status, patch.evidence,
                                notes=[Cell(patch.file, "dim")])
            patches.print(console.file)
    for dep in deps:
        upstream = f" (upstream {dep.upstream})" if dep.upstream and dep.upstream != dep.source else ""
        write(paragraph(f"{dep.name}: {dep.purl}{upstream}", width, hang="  "))
    tools = sorted({f"{key} {value}" for dep in deps for key,
                    value in dep.toolchain.items() if key in ("nvcc", "torch", "cxx", "cmake")})
    write(paragraph(f"toolchain: {'; '.join(tools) or '-'}", width, hang="  "))
    write(paragraph(f"files: {sum(len(dep.files) for dep in deps)} with sha256; patch status from the DEP-3 headers at "
                    "merge time",
                    width, hang="  "))


def _print_diff(changes: list[dict[str, Any]]) -> None:
    from rich.markup import escape

    from assembler.report.output import clean, console, short

    if not changes:
        console.print("no change in dependencies, pins, patches or toolchains")
        return
    for change in changes:
        dep = change["dep"]
        if change["change"] != "changed":
            console.print(f"[bold]{escape(clean(dep))}[/]: {change['change']} (commit {short(change['commit'])})")
            continue
        console.print(f"[bold]{escape(clean(dep))}[/]:")
        if "commit" in change:
            console.print(f"  commit {short(change['commit']['old'])} -> {short(change['commit']['new'])}")
        if "source" in change:
            console.print(f"  source {escape(clean(change['source']['old']))} -> "
                          f"{escape(clean(change['source']['new']))}", soft_wrap=True)
        for patch in change.get("patches", []):
            status = patch["status"] if isinstance(patch["status"],
                                                   str) else f"{patch['status']['old']} -> {patch['status']['new']}"
            console.print(f"  patch {patch['change']}: {escape(clean(patch['file']))} "
                          f"({escape(clean(patch['subject']))}) [{status}]", soft_wrap=True)
        for key, values in change.get("toolchain", {}).items():
            console.print(f"  {escape(clean(key))}: {escape(clean(str(values['old'])))} -> "
                          f"{escape(clean(str(values['new'])))}", soft_wrap=True)
