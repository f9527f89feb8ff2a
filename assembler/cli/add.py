"""`assemble add DEP URL --commit SHA [--fork URL] [--track BRANCH] [--checkout]`: a dependency
appended to deps.toml with tomlkit (comments and order kept), every value checked by the
manifest's own rules first and the whole manifest validated after, optionally checked out."""

from __future__ import annotations

import argparse

from assembler.cli.common import add_format


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("add",
                                   help="add a pinned dependency to deps.toml (and check it out with --checkout)")
    parser.add_argument("name", metavar="DEP",
                        help="its name: lower-case letters, digits, '.', '-', '_' (branch assemble/DEP)")
    parser.add_argument("url", metavar="URL", help="the upstream repository (what rebase follows)")
    parser.add_argument("--commit", required=True, metavar="SHA", help="the pinned commit, a full 40-hex SHA")
    parser.add_argument("--fork", metavar="URL", help="a fork to build from (source); the pin is a commit of it")
    parser.add_argument("--track", default="main", metavar="BRANCH",
                        help="upstream branch rebase and patches follow (default main)")
    parser.add_argument("--checkout", action="store_true", help="then check it out into forks/DEP")
    add_format(parser)
    parser.set_defaults(handler=run)


def _values(args: argparse.Namespace) -> dict[str, str]:
    """The new table's keys, each refused here with the manifest's own rule and fix (exit 2)."""
    from assembler.errors import InputError
    from assembler.manifest.load import NAME_RE, SHA_RE
    from assembler.manifest.refname import branch_problem
    from assembler.manifest.values import url_problem

    if not NAME_RE.match(args.name) or len(args.name) > 100 or branch_problem(args.name) is not None:
        raise InputError(f"{args.name[:100]!r} is not a valid dependency name",
                         hint="use lower-case letters, digits, '.', '-' and '_', starting with a letter or digit")
    for flag, url in (("URL", args.url), ("--fork", args.fork)):
        if url is not None and (problem := url_problem(url)) is not None:
            raise InputError(f"{flag} {url[:80]!r} is not a repository URL: {problem}",
                             hint="pass an https, ssh, git or file URL, or a path")
    if not SHA_RE.match(args.commit):
        raise InputError(f"--commit {args.commit[:80]!r} is not a full commit SHA",
                         hint="pins are always 40-hex SHAs: `git ls-remote URL BRANCH` names the tip")
    if (problem := branch_problem(args.track)) is not None:
        raise InputError(f"--track {args.track[:80]!r} is not a branch name: {problem}", hint="pass e.g. --track main")
    values = {"upstream": args.url}
    if args.fork is not None:
        values["source"] = args.fork
    values.update(commit=args.commit, track=args.track)
    return values


def run(args: argparse.Namespace) -> int:
    from assembler.cli.common import open_workspace
    from assembler.report.output import emit_json
    from assembler.workspace import add_dependency

    values = _values(args)
    workspace = open_workspace(args)
    dep = add_dependency(workspace, args.name, values)
    checked_out = None
    if args.checkout:
        from assembler.git.sync import sync_checkouts

        checked_out = sync_checkouts(workspace, [dep])[dep.name]
    if args.json:
        emit_json({"name": dep.name, "kind": dep.kind, "upstream": dep.upstream_url, "source": dep.source,
                   "commit": dep.commit,
                   "track": dep.track, "manifest": str(workspace.manifest_path),
                   "checkout": None if checked_out is None
                   else {"path": str(checked_out.path), "head": checked_out.head}})
        return 0
    print(f"added {dep.name} ({dep.kind}: {dep.source} at {dep.commit[:12]}, track {dep.track}) to "
          f"{workspace.manifest_path}")
    if checked_out is not None:
        print(f"{dep.name}: {checked_out.action} at {checked_out.head[:12]} -> {checked_out.path}")
    else:
        print(f"next: `assemble checkout {dep.name}`; a recipe goes in [deps.{dep.name}.build] (see "
              "docs/reference/recipes.md)")
    return 0
