"""`assemble init [--name NAME] [--version V]`: a new workspace, deps.toml with [bundle] and its
defaults commented (tomlkit), in the current directory or -C DIR; refused where one exists. Its
first line, ``#:schema PATH``, points editors (taplo, Even Better TOML) at the shipped schema."""

from __future__ import annotations

import argparse
import re

from assembler.cli.common import add_format


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("init", help="create deps.toml for a new workspace here (or in -C DIR)")
    parser.add_argument("--name", metavar="NAME",
                        help="distribution name of the merged wheel (default: the directory's name)")
    parser.add_argument("--version", default="0.1.0", metavar="VERSION", help="the bundle's version (default 0.1.0)")
    add_format(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from assembler.errors import InputError, ManifestError
    from assembler.fsutil import atomic_write
    from assembler.manifest import MANIFEST_NAME, load_manifest
    from assembler.manifest.edit import new_manifest
    from assembler.report.output import emit_json

    directory = args.directory
    path = directory / MANIFEST_NAME
    if path.exists() or path.is_symlink():
        raise InputError(f"{path} exists already",
                         hint="edit it, or `assemble add DEP URL --commit SHA` to add a dependency")
    name = args.name or re.sub(r"[^A-Za-z0-9._-]+", "-", directory.resolve().name).strip("-._") or "kernels"
    from assembler.manifest.schema import directive

    atomic_write(path, f"{directive(path)}\n{new_manifest(name, args.version)}")  # #:schema: editors check it
    try:
        manifest = load_manifest(path)
    except ManifestError:
        path.unlink()  # nothing invalid stays written
        raise
    if args.json:
        emit_json({"manifest": str(path), "bundle": {"name": manifest.bundle.name, "version": manifest.bundle.version}})
    else:
        print(f"created {path} (bundle {manifest.bundle.name} {manifest.bundle.version}); "
              "next: `assemble add DEP URL --commit SHA`")
    return 0
