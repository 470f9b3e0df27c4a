"""Broken specs yield every error at once, each with its file, line, field path and a hint.

Each broken file under broken/ marks the lines that must produce an error with a trailing
`# expect: <field path> | <text the message contains>` comment."""

from __future__ import annotations

import pathlib
import re

import pytest

from meridian import spec
from meridian.cli import main as cli

BROKEN = pathlib.Path(__file__).parent / "broken"
EXPECT = re.compile(r"#\s*expect:\s*(\S+)\s*\|\s*(.+?)\s*$")


def _expectations(path: pathlib.Path) -> list[tuple[int, str, str]]:
    out = []
    for lineno, line in enumerate(path.read_text().splitlines(), start=1):
        m = EXPECT.search(line)
        if m:
            out.append((lineno, m.group(1), m.group(2)))
    return out


@pytest.mark.parametrize("name", sorted(p.name for p in BROKEN.glob("*.yaml")))
def test_every_error_reported_at_its_line(name):
    """Each marked line yields an error with that line, field path and message; nothing else is reported."""
    path = BROKEN / name
    with pytest.raises(spec.SpecError) as info:
        spec.load_files([path])
    got = [(i.line, i.path, i.message) for i in info.value.issues]
    for line, field, text in _expectations(path):
        matches = [g for g in got if g[0] == line and g[1] == field and text in g[2]]
        assert matches, f"no error at line {line} {field} containing {text!r}; got:\n" + "\n".join(map(str, got))
    assert len(got) == len(_expectations(path)), "unexpected extra errors:\n" + "\n".join(map(str, got))
    assert all(i.file == str(path) for i in info.value.issues)


def test_cli_prints_all_errors_and_exits_1(capsys):
    """`meridian validate` prints every error as file:line: path: message and exits 1."""
    path = BROKEN / "deployment.yaml"
    assert cli.main(["validate", str(path)]) == 1
    err = capsys.readouterr().err
    assert f"{path}:11: spec.resources.gpu_types.0: unknown GPU type 'H10'; did you mean 'H100'?" in err
    assert "7 error(s) in 1 file(s)" in err


def test_cli_exit_codes(capsys, repo_root):
    """Exit 0 for the shipped examples, 2 for a usage error, 1 for an unreadable file."""
    examples = sorted(str(p) for p in pathlib.Path(repo_root, "examples").glob("*.yaml"))
    assert cli.main(["validate", *examples]) == 0
    assert cli.main(["validate"]) == 2
    assert cli.main(["no-such-command"]) == 2
    assert cli.main([]) == 2
    assert cli.main(["validate", "/nonexistent/x.yaml"]) == 1
    assert "cannot read file" in capsys.readouterr().err


def test_validate_reads_directories_and_refuses_an_empty_set(capsys, repo_root, tmp_path):
    """A directory stands for its *.yaml files, as for apply and plan; an empty file or a directory
    with no spec file is exit 1 saying so, where it used to print "0 document(s) valid" and pass."""
    assert cli.main(["validate", str(pathlib.Path(repo_root, "examples"))]) == 0
    assert "document(s) valid" in capsys.readouterr().out
    empty = tmp_path / "empty.yaml"
    empty.write_text("# nothing yet\n")
    assert cli.main(["validate", str(empty)]) == 1
    assert f"no documents in {empty}" in capsys.readouterr().err
    (tmp_path / "none").mkdir()
    assert cli.main(["validate", str(tmp_path / "none")]) == 1
    assert "no spec files in" in capsys.readouterr().err


def test_invalid_yaml_has_a_line():
    """A YAML syntax error names the line where the fix goes (an unclosed '[' : where it opened)."""
    with pytest.raises(spec.SpecError) as info:
        spec.load_text("apiVersion: meridian/v1\nkind: Cluster\nmetadata: {name: [x\n", "bad.yaml")
    (issue,) = info.value.issues
    assert issue.file == "bad.yaml" and issue.line == 3 and "invalid YAML" in issue.message


def test_duplicate_names_across_files():
    """Two documents of one kind with one name are an error naming both places."""
    doc = "apiVersion: meridian/v1\nkind: LatencyMap\nmetadata: {name: m}\nspec: {}\n"
    with pytest.raises(spec.SpecError, match=r"b.yaml:1: metadata.name: duplicate LatencyMap 'm' \(first at a.yaml:1\)"):
        spec.load_texts([("a.yaml", doc), ("b.yaml", doc)])
