"""`assemble cache dir|info|prune|clean`: where the shared cache is, what it holds, and making it
smaller without touching what a running command holds: prune removes what is unused, clean
everything (uv's two words)."""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from assembler.cli.common import add_format, number

if TYPE_CHECKING:
    from assembler.cache import Entry, PruneResult

SCHEMA = 1
PRUNE_DAYS = 30.0  # `cache prune`: an entry not used for this long counts as unused


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "cache", help="show or prune the shared cache (mirrors, toolchains, environments, artifacts)",
        description="The cache ($ASSEMBLE_CACHE, else the user cache directory) holds git mirrors, CUDA toolchains, "
                    "torch environments and build artifacts shared by every workspace.",
    )
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    for name, text in (("dir", "print the cache directory"),
                       ("info", "sizes per kind, and every entry with its last use")):
        sub = actions.add_parser(name, help=text)
        add_format(sub)
    prune = actions.add_parser(
        "prune", help="remove unused entries: not used for 30 days and not the workspace's (as uv's prune)",
        description="Remove the cache entries nobody uses: leftovers of killed runs, and entries not used for "
                    f"--older-than DAYS (default {PRUNE_DAYS:g}) that the current workspace (the nearest deps.toml "
                    "upward, if any) does not use. An entry a running assemble holds (its lock) is kept and listed "
                    "as in use. `assemble cache clean` removes everything.",
        epilog="examples:\n  assemble cache prune --dry-run      what would go\n"
               "  assemble cache prune --older-than 0  every entry the workspace does not use",
    )
    prune.add_argument("--older-than", type=_days, default=PRUNE_DAYS, metavar="DAYS",
                       help=f"only entries not used for this many days (default {PRUNE_DAYS:g}; fractions allowed; 0: "
                            "any age)")
    prune.add_argument("--keep", action="store_true",
                       help="require a workspace and keep what it uses (its mirrors, last build's artifacts and "
                            "toolchain, its torch environments); without --keep they are kept when there is one")
    prune.add_argument("--dry-run", action="store_true", help="list what would be removed, remove nothing")
    add_format(prune)
    clean = actions.add_parser(
        "clean", help="remove every entry (never one a running command holds), as uv's cache clean",
        description="Remove every cache entry, of any age and whichever workspace uses it: mirrors, toolchains, "
                    "environments and artifacts are made again when next needed. Checkouts in forks/ own their objects "
                    "and need no mirror. An entry a running assemble holds is kept and listed as in use.",
        epilog="examples:\n  assemble cache clean --dry-run      list everything that would go, with its size",
    )
    clean.add_argument("--dry-run", action="store_true", help="list what would be removed, remove nothing")
    add_format(clean)
    parser.set_defaults(handler=run)


def _days(text: str) -> float:
    value = number(text, float, "a number of days")
    if value < 0:
        raise argparse.ArgumentTypeError("the number of days cannot be negative")
    return value


def _age(when: float) -> str:
    days = (time.time() - when) / 86400
    return f"{days * 24:.1f} h" if days < 1 else f"{days:.1f} d"


def run(args: argparse.Namespace) -> int:
    from assembler import cache
    from assembler.report.output import emit_json

    root = cache.cache_root()
    result: dict[str, Any] = {"schema": SCHEMA, "command": "cache", "ok": True, "action": args.action,
                              "root": str(root)}
    if args.action == "dir":
        if args.format == "json":
            emit_json(result)
        else:
            print(root)
        return 0
    if args.action == "info":
        from assembler.toolchain.installer import uv_cache_dir

        result["uv_cache"] = uv_cache_dir()  # environments hard-link to it (their bytes are mostly shared with it)
        entries = cache.cache_entries(root)
        totals = cache.summary(entries)
        result.update(kinds=totals, total_bytes=sum(t["bytes"] for t in totals.values()),
                      entries=[entry.to_json() for entry in entries])
        if args.format == "json":
            emit_json(result)
        else:
            _info_table(root, totals, entries, result["uv_cache"])
        return 0
    keep: list[Path] = []
    older_than = None if args.action == "clean" else args.older_than
    if args.action == "prune":
        keep = _workspace_entries(args, root)
    pruned = cache.prune(older_than, keep, dry_run=args.dry_run, root=root)
    result.update(dry_run=args.dry_run, older_than_days=older_than, **pruned.to_json())
    if args.format == "json":
        emit_json(result)
    else:
        _prune_table(pruned, args.dry_run)
    return 0


def _workspace_entries(args: argparse.Namespace, root: Path) -> list[Path]:
    """What the workspace at hand uses, which prune keeps: the nearest deps.toml upward from -C
    DIR or the cwd; none outside a workspace, unless --keep asked for one (then an error)."""
    from assembler.builder.evidence import workspace_keys
    from assembler.cli.common import open_workspace
    from assembler.errors import ManifestError
    from assembler.manifest import find_workspace

    if args.workspace is None and not args.keep:
        try:
            find_workspace(Path.cwd())
        except ManifestError:  # no deps.toml here or above (a deps.toml that does not load is an error below)
            return []
    return workspace_keys(open_workspace(args), root)


def _info_table(root: Path, totals: dict[str, dict[str, int]], entries: list[Entry], uv_cache: str | None) -> None:
    import sys

    from assembler.report.table import TextTable, layout, paragraph, write
    from assembler.wheel.size import format_size

    width, _ = layout(sys.stdout)
    write(f"cache: {root}\n")  # an identifier, whole on its line
    table = TextTable("kind", "entries", "size", right=("entries", "size"), edge=False)
    for kind, total in totals.items():
        table.add_row(kind, str(total["count"]), format_size(total["bytes"]))
    table.add_row("total", str(sum(t["count"] for t in totals.values())),
                  format_size(sum(t["bytes"] for t in totals.values())))
    table.print()
    if uv_cache:
        write(paragraph(f"environments hard-link their files from uv's cache {uv_cache}: most of their size is "
                        "shared with it",
                        width, hang="  "))
    # One line per entry, its name last. A mirror is named by the URL it mirrors: its directory
    # name is that URL cut to its last 60 characters and a digest (git/mirrors.mirror_path), which
    # loses the host and owner. A name that cannot share the line goes on the next, indented,
    # broken only after a "/" when wider than the width; nothing is cut.
    lines = []
    for entry in entries:
        leftover = " (leftover of a killed run)" if entry.leftover else ""
        head = f"{entry.kind:<12}  {format_size(entry.bytes):>10}  {_age(entry.last_used) + ' ago':>10}"
        label = _entry_label(entry) + leftover
        if width is None or len(head) + 2 + len(label) <= width:
            lines.append(f"{head}  {label}\n")
        else:
            lines.append(head + "\n" + paragraph(f"  {label}", width, hang="    "))
    write("".join(lines))


def _entry_label(entry: Entry) -> str:
    """How a person tells an entry apart: a mirror's URL (its directory name when it has none),
    else its name."""
    if entry.kind != "mirrors":
        return entry.name
    from assembler.git.mirrors import origin_url

    return origin_url(entry.path) or entry.name


def _prune_table(pruned: PruneResult, dry_run: bool) -> None:
    from assembler.report.output import console
    from assembler.wheel.size import format_size

    verb = "would remove" if dry_run else "removed"
    for entry in pruned.removed:
        console.print(f"{verb} {entry.kind} {entry.name} ({format_size(entry.bytes)})", soft_wrap=True)
    for entry in pruned.in_use:
        console.print(f"kept {entry.kind} {entry.name}: in use by a running assemble", soft_wrap=True)
    freed = sum(entry.bytes for entry in pruned.removed)
    console.print(f"{verb} {len(pruned.removed)} entries, {format_size(freed)}; kept {len(pruned.in_use)} in use, "
                  f"{len(pruned.kept)} of the workspace, {len(pruned.recent)} used recently", soft_wrap=True)
