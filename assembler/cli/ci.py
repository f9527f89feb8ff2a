"""`assemble ci github|buildkite [--cuda X.Y] [--shards N] [--assembler-requirement REQ] [-o FILE]`:
the release fan-out as a workflow file (builder/workflows.py), printed or written atomically;
with --shards N each dependency's compile jobs run as shard jobs before its final build, as
`plan --matrix --shards N` plans them; `ci buildkite --from-matrix FILE`: the build steps for one
plan, which the pipeline's first step uploads (`--from-pipeline FILE`: a sharded plan's pipeline).
Every job installs assembler from where this one came from, or from --assembler-requirement."""

from __future__ import annotations

import argparse
from pathlib import Path

from assembler.cli.build import profile_name
from assembler.cli.common import add_format, cuda_version, shard_count
from assembler.cli.plan import DEFAULT_CUDA

SYSTEMS = ("github", "buildkite")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("ci",
                                   help="write the CI fan-out workflow (plan --matrix, build --only, merge) for GitHub "
                                        "or Buildkite")
    parser.add_argument("system", choices=SYSTEMS, metavar="SYSTEM", help="github (Actions) or buildkite")
    parser.add_argument("--cuda", metavar="X.Y", type=cuda_version, default=DEFAULT_CUDA,
                        help=f"CUDA version the jobs build with (default {DEFAULT_CUDA}, as `plan --matrix`)")
    parser.add_argument("--profile", metavar="NAME", type=profile_name,
                        help="a pull request's workflow: every plan and build on this build profile "
                             "([deps.X.profiles.NAME]; its wheel is labelled +cuXY.NAME); without it, the release "
                             "workflow on the full build")
    parser.add_argument("--output", "-o", type=Path, metavar="FILE",
                        help="write it there (e.g. .github/workflows/release.yml); default: stdout")
    parser.add_argument("--shards", type=shard_count, default=0, metavar="N",
                        help="split each dependency's compile jobs over up to N runners before its final build "
                             "(`plan --matrix --shards N`; the jobs must share the compiler cache)")
    parser.add_argument("--assembler-requirement", metavar="REQ",
                        help="what the jobs pip-install assembler from: a path in the repository (. for a clone of "
                             "assembler) or a requirement ('assembler @ git+https://HOST/OWNER/assembler@COMMIT'); "
                             "default: where this assemble was installed from, when a runner can install it too")
    parser.add_argument("--from-matrix", type=Path, metavar="FILE",
                        help="buildkite: the build steps for this `plan --matrix --json` document "
                             "(what the plan step uploads)")
    parser.add_argument("--from-pipeline", type=Path, metavar="FILE",
                        help="buildkite: this `plan --matrix --shards N --buildkite` pipeline, "
                             "each step installing assembler first")
    add_format(parser)  # json: {system, profile, output, install, workflow}; the workflow text is "workflow"
    parser.set_defaults(handler=run)


def _repository(directory: Path) -> Path:
    """The root a CI runner checks out: the git repository holding the workspace (the nearest
    deps.toml upward from ``directory``), else the workspace, else ``directory``."""
    start = next((d for d in (directory, *directory.parents) if (d / "deps.toml").is_file()), directory)
    return next((d for d in (start, *start.parents) if (d / ".git").exists()), start)


def _needs_s3(directory: Path) -> bool:
    """Whether the workspace's artifact store is s3:// (the jobs then need assembler[s3], boto3)."""
    from assembler.manifest.load import MANIFEST_NAME, load_manifest

    manifest = next((d / MANIFEST_NAME for d in (directory, *directory.parents) if (d / MANIFEST_NAME).is_file()), None)
    return manifest is not None and (load_manifest(manifest).cache.artifacts or "").startswith("s3://")


def run(args: argparse.Namespace) -> int:
    import json
    import sys

    from assembler.builder import workflows
    from assembler.errors import InputError

    install = workflows.assembler_requirement(args.assembler_requirement, args.directory, _repository(args.directory))
    if _needs_s3(args.directory):
        install = install.with_extra("s3")
    if args.from_matrix is not None or args.from_pipeline is not None:
        if args.system != "buildkite":
            raise InputError("--from-matrix and --from-pipeline are for buildkite",
                             hint="GitHub Actions reads the matrix itself (fromJSON)")
        if args.from_matrix is not None and args.from_pipeline is not None:
            raise InputError("--from-matrix and --from-pipeline exclude each other",
                             hint="--from-matrix for a plan without shards, --from-pipeline for one with")
        if args.shards:
            raise InputError("--from-matrix and --from-pipeline take a plan that is made already",
                             hint=f"with --shards, the pipeline uploads `assemble plan --matrix --shards {args.shards} "
                                  "--buildkite` itself")
        source = args.from_matrix or args.from_pipeline
        try:
            document = json.loads(source.read_text(encoding="utf-8"))
            if args.from_matrix is not None:
                deps = [str(entry["dep"]) for entry in document["include"]]
                text = workflows.buildkite_steps(args.cuda, deps, install, args.profile)
            else:
                text = json.dumps(workflows.with_install(document, install), indent=2) + "\n"
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
            made_by = "plan --matrix --json" if args.from_matrix is not None else "plan --matrix --shards N --buildkite"
            raise InputError(f"{source}: not a `{made_by}` document ({type(error).__name__}: {error})",
                             hint=f"pass the output of `assemble {made_by}`") from None
    elif args.system == "github":
        text = (workflows.github_sharded(args.cuda, args.shards, install, args.profile) if args.shards
                else workflows.github(args.cuda, install, args.profile))
    else:
        text = workflows.buildkite(args.cuda, install, args.shards, args.profile)
    if args.output is not None:
        from assembler.fsutil import atomic_write

        args.output.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(args.output, text)
        print(f"wrote {args.output}", file=sys.stderr)
    if args.json:
        from assembler.report.output import emit_json

        emit_json({"system": args.system, "cuda": args.cuda, "profile": args.profile, "shards": args.shards,
                   "output": None if args.output is None else str(args.output),
                   "install": {"requirement": install.requirement, "origin": install.origin}, "workflow": text})
    elif args.output is None:
        sys.stdout.write(text)
    return 0
