"""`assemble deps`: the manifest as a table (works offline; reads no network)."""

from __future__ import annotations

import argparse

from assembler.cli.common import add_format


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("deps", help="list the pinned dependencies and their checkout state")
    parser.add_argument("names", nargs="*", metavar="DEP", help="dependencies to list (default: all)")
    add_format(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from assembler.cli.common import open_workspace
    from assembler.git.condition import inspect_all
    from assembler.report import output

    workspace = open_workspace(args)
    rows: list[dict[str, str | int]] = []
    deps = workspace.manifest.select(args.names)
    for dep, condition in zip(deps, inspect_all(workspace, deps), strict=True):
        rows.append({
            "name": dep.name,
            "kind": dep.kind,
            "source": dep.source,
            "upstream": dep.upstream_url,
            "commit": dep.commit,
            "track": dep.track,
            "torch_target": dep.torch_target,
            "patches": len(dep.series),
            "checkout": condition,
        })
    if args.json:
        output.emit_json({"workspace": str(workspace.root), "deps": rows})
        return 0
    from assembler.report.table import TextTable  # not rich: its import alone is ~40 ms of a 100 ms start-up

    manifest = workspace.manifest
    table = TextTable("dependency", "source", "commit", "track", "patches", "checkout", text=("source",),
                      title=f"{manifest.bundle.name} {manifest.bundle.version} — {workspace.manifest_path}")
    short = output.short
    for row in rows:
        table.add_row(
            str(row["name"]), f"{row['kind']}: {str(row['source']).split('://')[-1]}", short(str(row["commit"])),
            str(row["track"]), str(row["patches"]), str(row["checkout"]),
        )
    table.print()
    return 0
