"""The examples every subcommand's ``--help`` ends with (``cli._SubParsers`` adds them), one
place for all, so a new command's page is not left without one (tests/test_help.py)."""

from __future__ import annotations

import re

EXAMPLES = {
    "deps": ["assemble deps                      the manifest and each checkout's state",
             "assemble deps vecadd --json        one dependency, as JSON"],
    "checkout": ["assemble checkout                  every dependency: forks/<dep> at its pin, series applied",
                 "assemble checkout vecadd           one"],
    "export": ["assemble export vecadd             its fork's commits to patches/vecadd/ (low churn)"],
    "patches": ["assemble patches                   each patch against the tracked branch (fetches)",
                "assemble patches --offline         the mirrors as last fetched",
                "assemble patches --format markdown the release-post table"],
    "rebase": ["assemble rebase vecadd --dry-run   what a rebase onto the tracked branch would do",
               "assemble rebase vecadd             do it: drops what landed upstream, exports, moves the pin",
               "assemble rebase vecadd --onto SHA  bump the pin to SHA",
               "assemble rebase vecadd --skip      at a conflict: leave that patch out, go on",
               "assemble rebase --continue         after resolving; --abort to undo"],
    "check": ["assemble check                     every translation unit, preprocessed with the build's flags",
              "assemble check vecadd --json       one dependency, as JSON"],
    "build": ["assemble build --cuda 13.2         checkout, build, merge, audit gate -> dist/",
              "assemble build --cuda 13.2 --verify   then verify on [bundle] verify-torch",
              "assemble build --plan              the translation units and compile jobs, compiling nothing",
              "assemble build --cuda 13.2 --only vecadd --artifacts out/   one CI job of plan --matrix"],
    "plan": ["assemble plan --matrix --cuda 13.2 --json | jq -c .   the strategy.matrix of a CI release"],
    "verify": ["assemble verify dist/*.whl         on each [bundle] verify-torch",
               "assemble verify dist/X.whl --torch 2.13.0 --torch 2.14.1",
               "assemble verify dist/X.whl --python /usr/bin/python3   the torch already in that interpreter"],
    "merge": ["assemble merge out-a/ out-b/ -o dist/   the artifacts of several build --only jobs into one wheel"],
    "audit": ["assemble audit dist/X.whl          Stable ABI and abi3 report, read in place",
              "assemble audit dist/*.whl --check all   exit 1 on a finding (a CI gate)"],
    "sbom": ["assemble sbom dist/X.whl           the wheel's CycloneDX SBOM per dependency",
             "assemble sbom OLD.whl NEW.whl      what changed between two releases"],
    "size": ["assemble size dist/X.whl           bytes per dependency, extension and CUDA arch",
             "assemble size dist/X.whl --budget 400MB   exit 1 when larger"],
    "cache": ["assemble cache info                sizes per kind, each entry with its last use",
              "assemble cache prune --dry-run     what prune would remove (unused entries)",
              "assemble cache clean               remove everything not in use"],
    "completion": ['eval "$(assemble completion bash)"   in ~/.bashrc',
                   "assemble completion fish | source"],
    "status": ["assemble status                    every dependency",
               "assemble status vecadd --json      one, as JSON"],
    "init": ["assemble init --name my-kernels   deps.toml with [bundle] in this directory"],
    "add": ["assemble add vecadd https://github.com/org/vecadd --commit SHA",
            "assemble add kern URL --fork FORK_URL --commit SHA --checkout   built from a fork"],
    "ci": ["assemble ci github -o .github/workflows/release.yml",
           "assemble ci buildkite -o .buildkite/release.yml   uploads one build step per dependency",
           "assemble ci github --shards 8 -o .github/workflows/release.yml   shard jobs before each final build"],
    "assess": ["assemble assess normkit             every LibTorch use, by API family, file:line",
               "assemble assess normkit --format markdown   the same for a pull request"],
    "migrate": ["assemble migrate normkit --dry-run   each step's diff; nothing is written",
                "assemble migrate normkit           one commit per step on assemble/normkit"],
    "review": ["assemble review vecadd              every hunk of the series, by the token criterion",
               "assemble review vecadd 0002 --format markdown   one patch, for a reviewer"],
    "show": ["assemble show vecadd               the series",
             "assemble show vecadd 2             0002-*.patch: message and diff",
             "assemble show vecadd --range-diff  the last rebase: old series against new"],
}


def epilog(command: str) -> str | None:
    """The ``examples:`` block of ``command``'s --help, kept as written (see _HelpFormatter):
    each command on its line, what it does below it, so that it fits 80 columns."""
    lines = EXAMPLES.get(command)
    if lines is None:
        return None
    out = ["examples:"]
    for line in lines:
        example, *comment = re.split(r"\s{2,}", line.strip(), maxsplit=1)
        out.append(f"  {example}")
        out += [f"      {text}" for text in comment]
    return "\n".join(out)
