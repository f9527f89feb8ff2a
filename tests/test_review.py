"""`assemble review`: the token criterion on real patches. The example's vecadd series is
migration work only; a change the test plants in it (a different tensor, an operator, a
message) is FLAGGED with the tokens that differ, exit 1, until a Migration-Review trailer names
the hunk. The criterion itself: whitespace and comments, API vocabulary, everything else."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from assembler.migration.review import Hunk, HunkVerdict, judge, parse_patch, vocabulary
from assembler.migration.rules import load_rules
from tests.conftest import run_assemble
from tests.example import EXAMPLE

PORT = "0002-Port-add_scaled-to-torch-stable-Tensor-and-STABLE_TO.patch"
WORDS = vocabulary(load_rules())


@pytest.fixture(name="ws")
def ws_fixture(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    shutil.copytree(EXAMPLE, ws,
                    ignore=shutil.ignore_patterns("forks", "upstreams", ".assemble", "dist", "__pycache__"))
    return ws


def _review(ws: Path, *args: str) -> tuple[int, dict]:
    result = run_assemble("-C", str(ws), "review", *args, "--json")
    return result.returncode, json.loads(result.stdout)


def _plant(ws: Path, old: str, new: str) -> None:
    patch = ws / "patches" / "vecadd" / PORT
    text = patch.read_text()
    assert text.count(old) == 1
    patch.write_text(text.replace(old, new))


def test_the_example_series_is_migration_work_only(ws: Path) -> None:
    code, doc = _review(ws, "vecadd")
    assert code == 0 and doc["flagged"] == 0
    verdicts = [(p["patch"][:4], h["id"], h["verdict"]) for p in doc["patches"] for h in p["hunks"]]
    assert verdicts == [("0001", "csrc/add_scaled.cpp#1", "api-only"), ("0002", "csrc/add_scaled.cpp#1", "api-only"),
                        ("0002", "csrc/add_scaled.cpp#2", "api-only")]
    assert doc["patches"][2]["hunks"] == []  # 0003 changes Python only: not this criterion's


def test_a_planted_unrelated_change_is_flagged_until_acknowledged(ws: Path) -> None:
    _plant(ws, "+  torch::stable::Tensor out = torch::stable::empty_like(x);",
           "+  torch::stable::Tensor out = torch::stable::empty_like(y);")
    code, doc = _review(ws, "vecadd", PORT)
    assert code == 1 and doc["ok"] is False and doc["flagged"] == 1
    hunks = {h["id"]: h for h in doc["patches"][0]["hunks"]}
    assert hunks["csrc/add_scaled.cpp#1"]["verdict"] == "api-only"
    flagged = hunks["csrc/add_scaled.cpp#2"]
    assert (flagged["verdict"], flagged["removed_tokens"], flagged["added_tokens"]) == ("flagged", ["x"], ["y"])
    markdown = run_assemble("-C", str(ws), "review", "vecadd", PORT, "--format", "markdown")
    assert markdown.returncode == 1
    assert "| [csrc/add_scaled.cpp#2](forks/vecadd/csrc/add_scaled.cpp#L15) | FLAGGED | x | y |  |" in markdown.stdout
    # piped: plain columns within 80 (#22)
    table = run_assemble("-C", str(ws), "review", "vecadd", PORT, env={"COLUMNS": "80"})
    assert table.returncode == 1 and not any("\u2500" <= ch <= "\u257f" for ch in table.stdout), table.stdout
    assert max(len(line) for line in table.stdout.splitlines()) <= 80, table.stdout
    assert f"{PORT}:" in table.stdout.split()  # the patch file name whole
    # as its --help example names it
    by_number = run_assemble("-C", str(ws), "review", "vecadd", "0002", env={"COLUMNS": "80"})
    assert by_number.stdout == table.stdout, by_number.stderr
    assert any(line.split()[:3] == ["csrc/add_scaled.cpp#2", "(+15)", "FLAGGED"]
               for line in table.stdout.splitlines()), table.stdout

    # A trailer naming another hunk acknowledges nothing, and is itself an error.
    _plant(ws, "\nForwarded:", "\nMigration-Review: csrc/add_scaled.cpp#7 no such hunk\nForwarded:")
    code, doc = _review(ws, "vecadd", PORT)
    assert code == 1 and doc["patches"][0]["unknown_acknowledgements"] == ["csrc/add_scaled.cpp#7 no such hunk"]
    _plant(ws, "Migration-Review: csrc/add_scaled.cpp#7 no such hunk",
           "Migration-Review: csrc/add_scaled.cpp:15 out follows y now")
    code, doc = _review(ws, "vecadd", PORT)
    assert code == 0 and doc["acknowledged"] == 1
    assert doc["patches"][0]["hunks"][1]["acknowledged"] == "out follows y now"


def test_an_unknown_patch_is_bad_input(ws: Path) -> None:
    result = run_assemble("-C", str(ws), "review", "vecadd", "0009-nope.patch", "--json")
    assert result.returncode == 2 and "not a patch of vecadd's series" in json.loads(result.stdout)["error"]["message"]


def _judged(removed: str, added: str) -> Hunk:
    hunk = Hunk("a.cpp", 1, 1, 1, "@@ -1 +1 @@", removed.splitlines(), added.splitlines())
    judge(hunk, WORDS)
    return hunk


@pytest.mark.parametrize(("removed", "added"), [
    ("int x = f(a,b);  // old note", "int x = f(a, b);  /* a new note */"),
    ("if (a) {\n  g();\n}", "if (a) { g(); }"),
])
def test_whitespace_and_comments_are_format_only(removed: str, added: str) -> None:
    assert _judged(removed, added).verdict is HunkVerdict.FORMAT


@pytest.mark.parametrize(("removed", "added"), [
    ("at::Tensor y = x.contiguous().view({-1});",
     "torch::stable::Tensor y = torch::stable::view(torch::stable::contiguous(x), {-1});"),
    ('TORCH_CHECK(x.scalar_type() == at::kFloat, "x: float32");',
     'STD_TORCH_CHECK(x.scalar_type() == torch::headeronly::ScalarType::Float, "x: float32");'),
    ("#include <torch/extension.h>", "#include <torch/csrc/stable/library.h>\n#include <torch/csrc/stable/ops.h>"),
    ("const float* p = t.data_ptr<float>();", "const float* p = t.const_data_ptr<float>();"),
    ('m.impl("op", &ns::op);', 'm.impl("op", TORCH_BOX(&ns::op));'),
    # a C++ source spells the stable names short after migrate's using-declarations
    ("#include <torch/extension.h>\nat::Tensor f(at::ScalarType d);",
     "#include <torch/csrc/stable/tensor.h>\nusing torch::stable::Tensor;\nusing torch::headeronly::ScalarType;\n"
     "Tensor f(ScalarType d);"),
])
def test_torch_api_vocabulary_is_api_only(removed: str, added: str) -> None:
    assert _judged(removed, added).verdict is HunkVerdict.API


@pytest.mark.parametrize(("removed", "added", "old", "new"), [
    # a literal
    ("at::Tensor y = x.view({-1});", "torch::stable::Tensor y = torch::stable::view(x, {-2});", ["1"], ["2"]),
    ("if (i < n) {", "if (i <= n) {", ["<"], ["<="]),  # an operator
    # a message
    ('TORCH_CHECK(ok, "bad input");', 'STD_TORCH_CHECK(ok, "bad shape");', ['"bad input"'], ['"bad shape"']),
    # an overflow fix
    ("int64_t n = a * b;", "int64_t n = static_cast<int64_t>(a) * b;", [], ["static_cast", "<", "int64_t", ">"]),
])
def test_anything_else_is_flagged_with_its_tokens(removed: str, added: str, old: list[str], new: list[str]) -> None:
    hunk = _judged(removed, added)
    assert (hunk.verdict, hunk.removed_tokens, hunk.added_tokens) == (HunkVerdict.FLAGGED, old, new)


def test_a_using_declaration_of_another_name_is_flagged() -> None:
    assert _judged("at::Tensor f();",
                   "using torch::stable::Tensor;\nusing std::vector;\nTensor f();").verdict is HunkVerdict.FLAGGED


def test_a_reordering_is_flagged_and_says_so() -> None:
    hunk = _judged("at::Tensor o = at::empty({n}, t.options());",
                   "torch::stable::Tensor o = torch::stable::new_empty(t, {n});")
    assert hunk.verdict is HunkVerdict.FLAGGED and hunk.reordered


def test_parse_patch_reads_hunks_per_file_and_trailers() -> None:
    text = (EXAMPLE / "patches" / "vecadd" / PORT).read_text()
    subject, acks, hunks = parse_patch(text.replace("\nForwarded:",
                                                    "\nMigration-Review: csrc/add_scaled.cpp#2 ok\nForwarded:"))
    assert subject.startswith("Port add_scaled to torch::stable::Tensor")
    assert acks == ["csrc/add_scaled.cpp#2 ok"]
    assert [(h.id, h.old_start, h.new_start, len(h.removed), len(h.added)) for h in hunks] == [
        ("csrc/add_scaled.cpp#1", 1, 1, 3, 4), ("csrc/add_scaled.cpp#2", 14, 15, 10, 10)]


@pytest.mark.parametrize("rewrite_id", ["cuda-guard", "cuda-guard-device"])
def test_what_the_guard_rewrites_make_is_api_only(rewrite_id: str) -> None:
    """migrate's own output passes review: the guard rewrites keep every token but the API's
    (on FlashMLA an earlier form dropped `{(char) ... }` and review flagged three hunks)."""
    from tests.test_migrate_rewrites import EXAMPLES

    before, after = EXAMPLES[rewrite_id]
    assert _judged(before, after).verdict is HunkVerdict.API
