"""realign (migration/alignment.py): continuation lines aligned under a bracket a rewrite moved
move with it; lines indented any other way stay as they were."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from assembler.migration.alignment import realign


def test_a_parameter_continuation_follows_the_renamed_callee() -> None:
    before = ('  TORCH_CHECK(a.dim() == 1,\n'
              '              "expected 1-D");\n')
    after = ('  STD_TORCH_CHECK(a.dim() == 1,\n'
             '              "expected 1-D");\n')
    assert realign(before, after) == ('  STD_TORCH_CHECK(a.dim() == 1,\n'
                                      '                  "expected 1-D");\n')


def test_a_brace_list_follows_its_brace_and_inner_lines_keep_their_place() -> None:
    before = ('  torch::checkAllContiguous("f", {{A, "A", 0},\n'
              '                                  {B, "B", 1}});\n')
    after = ('  assemble_stable::checkAllContiguous("f", {{A, "A", 0},\n'
             '                                  {B, "B", 1}});\n')
    moved = realign(before, after).split("\n")
    assert moved[1].index("{") == moved[0].index("{{") + 1


def test_a_retyped_declaration_moves_its_continuation() -> None:
    before = ('  at::Tensor out = at::empty_like(x,\n'
              '                                  options);\n')
    after = ('  Tensor out = torch::stable::empty_like(x,\n'
             '                                  options);\n')
    moved = realign(before, after).split("\n")
    assert moved[1].index("options") == moved[0].index("x,")


def test_a_macro_body_keeps_its_backslash_column() -> None:
    before = ('#define CHECK(x) TORCH_CHECK(x.is_cuda(),         \\\n'
              '                             #x " on cuda")     \\\n')
    after = ('#define CHECK(x) STD_TORCH_CHECK(x.is_cuda(),     \\\n'
             '                             #x " on cuda")     \\\n')
    lines = realign(before, after).split("\n")
    assert lines[1].index("#x") == lines[0].index("x.is_cuda")
    assert len(lines[1]) == len(before.split("\n")[1])  # the backslash did not move


def test_a_fixed_indent_a_tab_a_comment_and_a_directive_stay() -> None:
    before = ('  TORCH_CHECK(\n'
              '      cond, "fixed indent");\n'
              '  TORCH_CHECK(a,\n'
              '\t\t"tab");\n'
              '  TORCH_CHECK(a,\n'
              '              // a comment\n'
              '              "m");\n'
              '  TORCH_CHECK(a,\n'
              '#ifdef X\n'
              '              "m");\n')
    after = before.replace("TORCH_CHECK(", "STD_TORCH_CHECK(")
    lines = realign(before, after).split("\n")
    assert lines[1] == '      cond, "fixed indent");'
    assert lines[3] == '\t\t"tab");'
    assert lines[5] == '              // a comment'
    assert lines[8] == '#ifdef X'
    assert lines[6] == '                  "m");'


def test_an_unaligned_continuation_stays() -> None:
    before = ('  TORCH_CHECK(a,\n'
              '         "not under the bracket");\n')
    after = before.replace("TORCH_CHECK(", "STD_TORCH_CHECK(")
    assert realign(before, after) == after


def test_brackets_in_strings_and_comments_do_not_count() -> None:
    before = ('  f("(", a, // (\n'
              '    b);\n'
              '  TORCH_CHECK(x,\n'
              '              y);\n')
    after = before.replace("TORCH_CHECK(", "STD_TORCH_CHECK(")
    assert realign(before, after).split("\n")[3] == '                  y);'


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(["  f(a,\n", "    b);\n", "  {x,\n", "   y};\n", "// (\n", "\n", "  g();\n"]),
                max_size=12))
def test_unchanged_text_and_line_count_are_kept(lines: list[str]) -> None:
    text = "".join(lines)
    assert realign(text, text) == text
    renamed = text.replace("f(", "fff(")
    out = realign(text, renamed)
    assert out.count("\n") == renamed.count("\n")
    assert [line.strip() for line in out.split("\n")] == [line.strip() for line in renamed.split("\n")]
