"""`assemble plan --matrix [--shards N] [--json | --buildkite]`: the release as a CI matrix
(``builder.matrix``): one entry per dependency with its artifact key, whether a store holds it,
and its estimated compile cost; with --shards, each dependency's compile jobs split over N shard
jobs that run before the job that builds it whole."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from assembler.cli.build import profile_name
from assembler.cli.common import add_format, cuda_version, shard_count, torch_version

if TYPE_CHECKING:
    from assembler.builder.matrix import MatrixEntry, ShardEntry

DEFAULT_CUDA = "13.2"  # what `plan --matrix` and `ci` plan for without --cuda (one default for both)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "plan", help="the release as a GitHub Actions matrix: one job per dependency, with keys and costs",
        description="Check out, resolve the toolchain, and print one entry per dependency: its artifact key, "
                    "whether the "
        "local or the shared store ([cache] artifacts) has it, and its estimated compile cost. With --json the output "
        "is a strategy.matrix document, {\"include\": [...]}, for fromJSON(). With --shards N, each dependency's "
        "compile jobs are split over N shard jobs (`assemble build --only DEP --shard K/N`) that its final job needs; "
        "--json is then {\"shard_count\", \"shards\": {\"include\"}, \"final\": {\"include\"}}, two matrices, and "
        "--buildkite prints a Buildkite pipeline with depends_on.",
    )
    parser.add_argument("--matrix", action="store_true", required=True,
                        help="plan the CI fan-out (the only kind of plan)")
    parser.add_argument("--cuda", metavar="X.Y", type=cuda_version, default=DEFAULT_CUDA,
                        help=f"CUDA toolkit version the jobs build with (part of each key; default {DEFAULT_CUDA}, "
                             "as `ci`)")
    parser.add_argument("--profile", metavar="NAME", type=profile_name,
                        help="plan the build on this profile ([deps.X.profiles.NAME]): a pull request's reduced jobs")
    parser.add_argument("--torch", metavar="VERSION", type=torch_version,
                        help="torch to build against (default: [bundle] torch)")
    parser.add_argument("--only", action="append", default=[], metavar="DEP",
                        help="plan just this dependency (repeatable)")
    parser.add_argument("--shards", type=shard_count, default=0, metavar="N",
                        help="split each dependency's compile jobs over N runners (balanced by cost), before its "
                             "final job")
    parser.add_argument("--buildkite", action="store_true",
                        help="print a Buildkite pipeline (JSON, for `buildkite-agent pipeline upload`) instead "
                             "of a table")
    add_format(parser)  # json: the strategy.matrix document alone (cli.main leaves out the envelope)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from assembler.builder.matrix import buildkite_pipeline, matrix_document, plan_matrix, sharded_document
    from assembler.cli.common import open_workspace
    from assembler.report.output import emit_json, err_console

    workspace = open_workspace(args)
    entries, split = plan_matrix(workspace, args.cuda, args.torch, tuple(args.only),
                                 note=lambda line: err_console.print(line, markup=False, highlight=False,
                                                                     soft_wrap=True),
                                 shards=args.shards, profile=args.profile)
    if args.buildkite:
        emit_json(buildkite_pipeline(entries, split, args.cuda, args.profile))
        return 0
    if args.json:
        emit_json(sharded_document(entries, split) if args.shards else matrix_document(entries))
        return 0
    print_plan(entries, split, args.shards)
    return 0


def print_plan(entries: list[MatrixEntry], split: list[ShardEntry], shards: int) -> None:
    """The plan's table, and with --shards the shard jobs' (names and keys are never cut; the
    archs and the unit counts wrap between words)."""
    from assembler.report.output import console
    from assembler.report.table import TextTable

    table = TextTable("dependency", "key", "archs", "units", "in store", "est. compile s",
                      text=("archs", "units", "est. compile s"),
                      right=("est. compile s",))
    for entry in entries:
        where = ("local" if entry.cached else "shared" if entry.in_store
                 else "unknown" if entry.in_store is None else "-")
        units = f"{entry.cxx_units} c++ + {entry.cuda_units} cuda" if entry.units_known else "unknown"
        table.add_row(entry.dep, entry.key[:12], " ".join(entry.archs) or "-", units, where, f"{entry.cost:.0f}")
    table.print(console.file)
    if split:
        jobs = TextTable("dependency", "shard", "units", "est. compile s", "split", text=("est. compile s",),
                         right=("units", "est. compile s"),
                         title=f"shard jobs (assemble build --only DEP --shard K/{shards}), before each final build")
        for shard in split:
            jobs.add_row(shard.dep, f"{shard.index}/{shard.count}", str(len(shard.units)), f"{shard.cost:.0f}",
                         shard.split)
        jobs.print(console.file)
