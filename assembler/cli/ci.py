"""`assemble ci github|buildkite [--cuda X.Y] [--shards N] [-o FILE]`: the release fan-out as a
workflow file (builder/workflows.py), printed or written atomically; with --shards N each
dependency's compile jobs run as shard jobs before its final build, as `plan --matrix --shards N`
plans them; `ci buildkite --from-matrix FILE`: the build steps for one plan, which the
pipeline's first step uploads."""

from __future__ import annotations

import argparse
from pathlib import Path

from assembler.cli.common import cuda_version, shard_count

SYSTEMS = ("github", "buildkite")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("ci", help="write the CI fan-out workflow (plan --matrix, build --only, merge) for GitHub or Buildkite")
    parser.add_argument("system", choices=SYSTEMS, metavar="SYSTEM", help="github (Actions) or buildkite")
    parser.add_argument("--cuda", metavar="X.Y", type=cuda_version, default="13.2", help="CUDA version the jobs build with (default 13.2)")
    parser.add_argument("--output", "-o", type=Path, metavar="FILE", help="write it there (e.g. .github/workflows/release.yml); default: stdout")
    parser.add_argument("--shards", type=shard_count, default=0, metavar="N",
                        help="split each dependency's compile jobs over up to N runners before its final build "
                             "(`plan --matrix --shards N`; the jobs must share the compiler cache)")
    parser.add_argument("--from-matrix", type=Path, metavar="FILE",
                        help="buildkite: the build steps for this `plan --matrix --json` document (what the plan step uploads)")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    import json
    import sys

    from assembler.builder import workflows
    from assembler.errors import InputError

    if args.from_matrix is not None:
        if args.shards:
            raise InputError("--from-matrix takes the steps of a plan without shards",
                             hint=f"with --shards, the pipeline uploads `assemble plan --matrix --shards {args.shards} --buildkite` itself")
        if args.system != "buildkite":
            raise InputError("--from-matrix is for buildkite", hint="GitHub Actions reads the matrix itself (fromJSON)")
        try:
            include = json.loads(args.from_matrix.read_text(encoding="utf-8"))["include"]
            deps = [str(entry["dep"]) for entry in include]
            text = workflows.buildkite_steps(args.cuda, deps)
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise InputError(f"{args.from_matrix}: not a `plan --matrix --json` document ({type(error).__name__}: {error})",
                             hint="pass the output of `assemble plan --matrix --json`") from None
    elif args.system == "github":
        text = workflows.github_sharded(args.cuda, args.shards) if args.shards else workflows.github(args.cuda)
    else:
        text = workflows.buildkite(args.cuda, args.shards)
    if args.output is None:
        sys.stdout.write(text)
        return 0
    from assembler.fsutil import atomic_write

    args.output.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(args.output, text)
    print(f"wrote {args.output}", file=sys.stderr)
    return 0
