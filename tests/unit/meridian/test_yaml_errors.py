"""YAML syntax errors a person can act on: file, line, column, a hint, the line with a caret, and
every file's (and every document's) errors at once."""

from __future__ import annotations

import pytest

from meridian import spec, yamlread

GOOD = "apiVersion: meridian/v1\nkind: LatencyMap\nmetadata: {name: m}\nspec: {}\n"


def _issues(text: str, file: str = "f.yaml") -> list[spec.SpecIssue]:
    with pytest.raises(spec.SpecError) as info:
        spec.load_text(text, file)
    return info.value.issues


@pytest.mark.parametrize(("text", "line", "column", "hint"), [
    ("apiVersion: meridian/v1\nkind:\tCluster\n", 2, 6, "tab character"),
    ("apiVersion: meridian/v1\nkind: 'Cluster\nmetadata: {}\n", 2, 7, "unclosed quote"),
    ("apiVersion: meridian/v1\nkind: \"Cluster\nmetadata: {}\n", 2, 7, "unclosed quote"),
    ("apiVersion: meridian/v1\nmetadata: {name: [x\nspec: {}\n", 2, 18, "unclosed bracket"),
    ("apiVersion: meridian/v1\nmetadata: {name: x\nspec: {}\n", 2, 11, "unclosed brace"),
    ("apiVersion: meridian/v1\nkind Cluster\nmetadata: {}\n", 2, 1, "missing ':'"),
    ("apiVersion: meridian/v1\nkind: Cluster: x\n", 2, 14, "':' where a value was expected"),
    ("metadata:\n  name: a\n labels: {}\n", 3, 2, "bad indentation"),
    ("spec:\n  regions:\n    - a\n   - b\n", 4, 4, "bad indentation"),
])
def test_each_syntax_error_has_a_hint_line_and_column(text, line, column, hint):
    """Tabs, unclosed quotes/brackets/braces, a missing ':', a stray ':' and bad indentation each get
    a sentence saying what is wrong, at the line and column where the fix goes."""
    (issue,) = _issues(text)
    assert (issue.file, issue.line, issue.column) == ("f.yaml", line, column), str(issue)
    assert hint in issue.message and issue.message.startswith("invalid YAML")
    assert str(issue).startswith(f"f.yaml:{line}:{column}: invalid YAML")


def test_the_offending_line_is_shown_with_a_caret_under_the_column():
    """The message shows the line itself and a caret at the column (a tab shown as an arrow)."""
    (issue,) = _issues("apiVersion: meridian/v1\nkind:\tCluster\n")
    assert issue.excerpt == "    kind:→Cluster\n         ^"
    assert str(issue).endswith("\n    kind:→Cluster\n         ^")


def test_duplicate_keys_are_errors_naming_both_lines():
    """A key given twice in one mapping is an error (YAML would keep the last silently)."""
    text = "apiVersion: meridian/v1\nkind: LatencyMap\nmetadata: {name: m}\nspec: {}\nkind: LatencyMap\n"
    (issue,) = _issues(text)
    assert (issue.line, issue.column) == (5, 1)
    assert "duplicate key 'kind' (first at line 2)" in issue.message


def test_two_broken_files_are_reported_together_with_a_valid_one_in_between():
    """Every file's syntax error is reported in one SpecError, in file order."""
    with pytest.raises(spec.SpecError) as info:
        spec.load_texts([("a.yaml", "kind: 'x\n"), ("ok.yaml", GOOD), ("b.yaml", "a:\n\tb: 1\n")])
    assert [(i.file, i.line, i.column) for i in info.value.issues] == [("a.yaml", 1, 7), ("b.yaml", 2, 1)]
    assert "unclosed quote" in info.value.issues[0].message and "tab" in info.value.issues[1].message


def test_a_broken_document_does_not_hide_the_others_errors():
    """A syntax error in one document of a file still lets the documents after it (and other files)
    be validated: their field errors are reported beside it."""
    text = GOOD + "---\nkind: [x\n---\napiVersion: meridian/v1\nkind: Clustr\nmetadata: {name: c}\nspec: {}\n"
    with pytest.raises(spec.SpecError) as info:
        spec.load_texts([("multi.yaml", text), ("other.yaml", "apiVersion: meridian/v2\n" + GOOD[24:])])
    got = [(i.file, i.line, i.document) for i in info.value.issues]
    assert got[:2] == [("multi.yaml", 6, 1), ("multi.yaml", 9, 2)] and ("other.yaml", 1, 0) in got[2:], got
    assert "unclosed bracket" in info.value.issues[0].message
    assert "Cluster" in info.value.issues[1].message  # did you mean


def test_component_config_files_get_the_same_errors(tmp_path):
    """Config files read through meridian.yamlread (router, tokens, emulator) name file:line:column."""
    path = tmp_path / "router.yaml"
    path.write_text("listen: 127.0.0.1\nport: [80\n")
    with pytest.raises(yamlread.YAMLFileError) as info:
        yamlread.load_file(path)
    assert str(info.value).startswith(f"{path}:2:7: invalid YAML: unclosed bracket")
