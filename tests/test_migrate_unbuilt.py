"""`assemble migrate` on a line the build does not compile (the CUDA branch of attnkit, the
example's FlashAttention-shaped library, built here without ATTNKIT_WITH_CUDA): a TORCH_CHECK
whose message is literals only becomes STD_TORCH_CHECK, proven by the probe migrate compiles
under the target with the real g++ and torch; one that streams a local into its message is
left and reported at its line. A dry run compiles nothing, so it rewrites neither."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from tests.build_support import assemble, example_copy, uncompiled_uses

pytestmark = pytest.mark.integration

STREAM = "  cudaStream_t stream = at::cuda::getCurrentCUDAStream();\n"
LITERAL = '  TORCH_CHECK(q.is_cuda(), "attnkit: a CUDA build takes CUDA tensors");\n'
STREAMED = '  TORCH_CHECK(d <= 256, "attnkit: head size ", d, " is over 256");\n'


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True).stdout


def test_a_literal_check_on_a_line_the_build_skips_is_rewritten_by_the_probe(tmp_path: Path,
                                                                            private_cache: Path) -> None:
    ws = example_copy(tmp_path / "ws") / "migrate"
    assert assemble("-C", str(ws), "checkout", "attnkit", cache=private_cache).returncode == 0
    fork = ws / "forks" / "attnkit"
    source = fork / "csrc" / "attnkit.cpp"
    text = source.read_text()
    assert STREAM in text
    source.write_text(text.replace(STREAM, STREAM + LITERAL + STREAMED))
    _git(fork, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-am", "Check CUDA tensors")

    planned = assemble("-C", str(ws), "migrate", "attnkit", "--dry-run", "--json", cache=private_cache)
    assert planned.returncode == 0, planned.stderr[-3000:]
    plan = json.loads(planned.stdout)
    assert plan["proof"]["unbuilt"] is None  # nothing compiled, nothing rewritten there
    assert [use for use in uncompiled_uses(plan) if use.endswith(" torch-check")] == [
        "csrc/attnkit.cpp:55 torch-check", "csrc/attnkit.cpp:56 torch-check"]  # at their lines once migrated

    done = assemble("-C", str(ws), "migrate", "attnkit", "--no-check", "--json", cache=private_cache)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    unbuilt = report["proof"]["unbuilt"]
    assert unbuilt["rewrites"] == ["torch-check"] and unbuilt["rewritten"] == 1, unbuilt
    assert unbuilt["probe"]["ok"] is True and unbuilt["probe"]["error"] is None
    migrated = source.read_text()
    assert LITERAL.replace("TORCH_CHECK", "STD_TORCH_CHECK") in migrated
    assert re.search(r"(?<!STD_)TORCH_CHECK\(d <= 256, \"attnkit: head size \", d", migrated)
    assert "#include <torch/headeronly/util/Exception.h>" in migrated
    # the streamed one is left, at its line now, and nothing else of the build is
    rest = [use for use in uncompiled_uses(report) if use.endswith(" torch-check")]
    assert len(rest) == 1 and migrated.splitlines()[int(rest[0].split(":")[1].split()[0]) - 1] == STREAMED.rstrip("\n")
    assert _git(fork, "status", "--porcelain") == ""


def test_no_probe_without_a_literal_check_on_a_skipped_line() -> None:
    """The probe compiles only where it can prove something: a skipped line whose check streams
    a local is no reason to start the compile model (it would fail the test if called)."""
    from assembler.migration.migrate import ProofSummary, _with_unbuilt_probe
    from assembler.migration.rewrite import FileRewrite, load_rewrites

    def no_compile() -> None:
        raise AssertionError("nothing here needs the probe")

    rewrites = load_rewrites()
    text = '#ifdef GPU\nTORCH_CHECK(n > 0, "n is ", n);\n#endif\nTORCH_CHECK(ok, "built");\n'
    files = {Path("a.cpp"): FileRewrite(text, [True, False, True, True, True])}
    summary = ProofSummary()
    assert _with_unbuilt_probe(no_compile, rewrites, files, "2.10", summary) is rewrites
    assert summary.unbuilt is None
