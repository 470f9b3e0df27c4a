"""Every `meridian ...` command in docs/operations.md (and docs/kubernetes.md when present) exists,
with every flag it uses: each is run with --help (in process) and its flags are looked up in the
help text of that (sub)command."""

from __future__ import annotations

import contextlib
import io
import pathlib
import re
import shlex

import pytest

from meridian.cli import main as cli

ROOT = pathlib.Path(__file__).resolve().parents[3]
DOCS = [p for p in (ROOT / "docs" / "operations.md", ROOT / "docs" / "kubernetes.md") if p.exists()]
STOP = {"|", ">", ">>", "<", ";", "&&", "||", "#"}


def commands(path: pathlib.Path) -> list[tuple[int, list[str]]]:
    """(line number, argv after `meridian`) of every command line and inline code span."""
    found = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        candidates = [line.strip().removeprefix("$ ")] + re.findall(r"`(meridian [^`]+)`", line)
        for text in candidates:
            if not text.startswith("meridian ") and text != "meridian":
                continue
            text = text.split(" #", 1)[0]
            try:
                words = shlex.split(text)
            except ValueError:
                words = text.split()
            argv = []
            for word in words[1:]:
                if word in STOP or word.startswith(("#", ">")):
                    break
                argv.append(word)
            found.append((number, argv))
    return found


def help_text(argv: list[str]) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(argv + ["--help"])
    return code, out.getvalue() + err.getvalue()


CASES = [pytest.param(path, number, argv, id=f"{path.name}:{number}:{' '.join(argv)[:60]}")
         for path in DOCS for number, argv in commands(path)]


def test_the_doc_has_commands():
    """The operator's guide names the commands it relies on (so the check below is not empty)."""
    names = {argv[0] for _, _, argv in (c.values for c in CASES) if argv}
    assert {"apply", "plan", "get", "state", "scheduler", "validate"} <= names


@pytest.mark.parametrize("path, number, argv", CASES)
def test_command_and_flags_exist(path, number, argv):
    """The command runs with --help, and each flag it uses is in that help."""
    if not argv or argv[0].startswith("-"):
        code, text = help_text([])
        assert code == 0 and all(f in text for f in argv), f"{path.name}:{number}: meridian {' '.join(argv)}"
        return
    assert argv[0] in cli.COMMANDS, f"{path.name}:{number}: no command 'meridian {argv[0]}'"
    scope = [argv[0]]
    if len(argv) > 1 and not argv[1].startswith("-"):
        code, text = help_text(argv[:2])
        if code == 0 and f"meridian {argv[0]} {argv[1]}" in text:
            scope = argv[:2]
    code, text = help_text(scope)
    assert code == 0, f"{path.name}:{number}: 'meridian {' '.join(scope)} --help' exited {code}: {text[-500:]}"
    for word in argv[len(scope):]:
        if word.startswith("-") and len(word) > 1 and not re.match(r"^-\d", word):
            flag = word.split("=", 1)[0]
            assert re.search(rf"(^|[\s,\[]){re.escape(flag)}([\s,=\]]|$)", text, re.M), \
                f"{path.name}:{number}: 'meridian {' '.join(argv)}': no flag {flag} in 'meridian {' '.join(scope)} --help'"


def test_a_wrong_flag_is_caught():
    """The flag lookup refuses a flag the command does not have."""
    code, text = help_text(["state", "import"])
    assert code == 0 and "--force" in text and "--forse" not in text
