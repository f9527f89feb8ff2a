"""`assemble show DEP [PATCH]`: a dependency's series, or one patch (its message and diff, as
`git show` prints a commit); `assemble show DEP --range-diff`: the last rebase's full
`git range-diff`, kept in its journal. Reads files only (no git)."""

from __future__ import annotations

import argparse

from assembler.cli.common import add_format

DESCRIPTION = """\
Without PATCH: the series of DEP, one patch per line (the number PATCH takes, file, subject).
With PATCH: that patch file, its message and diff, as `git show` or `quilt diff -P` print it.
PATCH is a file name of the series, its number (0002 or 2) or a part of its name found in one
patch only. --range-diff prints the full `git range-diff` of the last rebase of DEP (of the
rebase in progress, else of the last one finished), which the rebase report summarises."""

def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "show", help="print a dependency's series, one patch's diff, or the last rebase's range-diff",
        description=DESCRIPTION,
    )
    parser.add_argument("name", metavar="DEP", help="the dependency")
    parser.add_argument("patch", nargs="?", metavar="PATCH",
                        help="a patch of its series: file name, number or part of the name")
    parser.add_argument("--range-diff", action="store_true", help="the full range-diff of the last rebase of DEP")
    add_format(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from assembler.cli.common import open_workspace
    from assembler.errors import InputError
    from assembler.report.output import clean, clean_block, emit_json

    workspace = open_workspace(args)
    dep = workspace.manifest.select([args.name])[0]
    if args.range_diff:
        if args.patch is not None:
            raise InputError("--range-diff takes no PATCH", hint=f"`assemble show {dep.name} --range-diff`")
        from assembler.upstreaming.journal import last_range_diff

        found = last_range_diff(workspace, dep.name)
        if found is None:
            raise InputError(f"{dep.name}: no rebase recorded (none in progress, and no finished one kept for --undo)",
                             hint=f"`assemble rebase {dep.name}` records one; `assemble patches {dep.name}` shows the "
                                  "series' status")
        text, pending = found
        if args.json:
            emit_json({"dep": dep.name, "range_diff": text, "rebase": "in progress" if pending else "last finished"})
        else:
            print(clean_block(text), end="" if text.endswith("\n") else "\n")
        return 0
    from assembler.series.headers import parse_patch_header

    if args.patch is None:
        headers = [parse_patch_header(dep.patches_dir / name) for name in dep.series]
        if args.json:
            emit_json({"dep": dep.name, "patches": [{"file": h.file, "subject": h.subject} for h in headers]})
            return 0
        if not headers:
            print(f"{dep.name}: no patches (patches/{dep.name}/series is empty or absent)")
        from assembler.series.seriesfile import patch_label

        for name, header in zip(dep.series, headers, strict=True):
            # the number `show DEP N` takes: the file's own (0002 after 0001 was dropped), never
            # its place in the series; "-" for a file without a number of its own
            label = patch_label(dep.series, name)
            print(f"{str(int(label)) if label.isdigit() else '-':>4}  {clean(header.file)}\n      "
                  f"{clean(header.subject)}")
        return 0
    name = _patch_name(dep.series, args.patch, dep.name)
    path = dep.patches_dir / name
    text = path.read_text(encoding="utf-8", errors="replace")
    if args.json:
        emit_json({"dep": dep.name, "patch": name, "path": str(path), "subject": parse_patch_header(path).subject,
                   "text": text})
    else:
        print(clean_block(text), end="" if text.endswith("\n") else "\n")
    return 0


def _patch_name(series: tuple[str, ...], wanted: str, dep: str) -> str:
    import difflib

    from assembler.errors import InputError
    from assembler.series.seriesfile import find_patch

    found = find_patch(series, wanted)
    if found is not None:
        return found
    several = [name for name in series if wanted.lower() in name.lower()]
    close = difflib.get_close_matches(wanted, series, n=1, cutoff=0.5)
    hint = (f"it names several: {', '.join(several)}" if len(several) > 1 else f"did you mean {close[0]}?" if close
            else f"`assemble show {dep}` lists the series")
    raise InputError(f"{dep}: no patch {wanted[:80]!r} in the series", hint=hint)
