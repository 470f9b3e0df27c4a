"""Reading YAML that people write: a syntax error becomes a sentence a person can act on, located at
a line and column, with the offending line and a caret under the column; duplicate keys (which
PyYAML silently resolves to the last one) are errors too.

This is the one place that turns PyYAML's ``problem``/``context`` pairs into hints, for the spec
loader (``meridian.spec.loader``), the simulator's scenario files and every component's YAML
config files (router, scheduler tokens, emulator)."""

from __future__ import annotations

import dataclasses
import pathlib
from typing import Any

import yaml

__all__ = ["YAMLProblem", "YAMLFileError", "describe", "duplicate_keys", "safe_load", "load_file"]


@dataclasses.dataclass(frozen=True)
class YAMLProblem:
    """A located YAML problem: 1-based ``line`` and ``column``, a ``hint`` saying what is wrong and
    how to fix it, and ``excerpt``: the offending line with a caret under the column."""

    line: int | None
    column: int | None
    hint: str
    excerpt: str = ""

    def render(self, file: str) -> str:
        where = f"{file}:{self.line}:{self.column}" if self.line and self.column else file
        text = f"{where}: invalid YAML: {self.hint}"
        return f"{text}\n{self.excerpt}" if self.excerpt else text


class YAMLFileError(ValueError):
    """A YAML file (or text) that cannot be read as data; ``problems`` holds every one found."""

    def __init__(self, file: str, problems: list[YAMLProblem]):
        self.file = file
        self.problems = list(problems)
        super().__init__("\n".join(p.render(file) for p in self.problems))


def excerpt(text: str, line: int | None, column: int | None) -> str:
    """``line`` of ``text`` (1-based) indented, and a caret under ``column`` (tabs shown as '→'
    so the caret lines up)."""
    if not line:
        return ""
    lines = text.splitlines()
    if line > len(lines):
        return "    (end of file)"
    shown = lines[line - 1].replace("\t", "→")
    caret = " " * max((column or 1) - 1, 0) + "^"
    return f"    {shown}\n    {caret}"


def _mark(mark: Any) -> tuple[int | None, int | None]:
    return (mark.line + 1, mark.column + 1) if mark is not None else (None, None)


def describe(exc: yaml.YAMLError, text: str) -> YAMLProblem:
    """A YAML error as a located, human sentence. For a quote or bracket left open, the location
    is where it opened (where the fix goes), and the hint says where parsing noticed."""
    problem = str(getattr(exc, "problem", None) or exc).strip()
    context = str(getattr(exc, "context", None) or "")
    at = getattr(exc, "problem_mark", None)
    opened = getattr(exc, "context_mark", None)
    line, column = _mark(at)
    if isinstance(exc, yaml.reader.ReaderError):
        before = text[:exc.position] if isinstance(exc.position, int) else ""
        line, column = before.count("\n") + 1, len(before) - (before.rfind("\n") + 1) + 1
        code = exc.character if isinstance(exc.character, int) else ord(str(exc.character)[:1] or "?")
        return YAMLProblem(line, column, f"a character YAML does not allow (U+{code:04X}); remove it or write it "
                                         "as an escape inside a double-quoted string", excerpt(text, line, column))
    seen = f"line {line}" if line else "the end of the file"
    hint: str
    if "'\\t'" in problem or "\t" in problem:
        hint = "a tab character: YAML indents with spaces only (replace the tab with spaces)"
    elif "quoted scalar" in context and opened is not None:
        quote = text.splitlines()[opened.line][opened.column] if opened.line < len(text.splitlines()) else "'"
        line, column = _mark(opened)
        hint = f"unclosed quote: the string opened here with {quote} is never closed (parsing reached {seen}); " \
               f"add the closing {quote}"
    elif "flow sequence" in context and opened is not None:
        line, column = _mark(opened)
        hint = f"unclosed bracket: the '[' here has no matching ']' (parsing reached {seen}, {problem}); close it, " \
               "or separate its items with ','"
    elif "flow mapping" in context and opened is not None:
        line, column = _mark(opened)
        hint = f"unclosed brace: the '{{' here has no matching '}}' (parsing reached {seen}, {problem}); close " \
               "it, or separate its entries with ','"
    elif "could not find expected ':'" in problem:
        line, column = _mark(opened) if opened is not None else (line, column)
        hint = "missing ':' after a key: write 'key: value' (or, if this line continues the value above, " \
               "indent it further or quote the value)"
    elif "mapping values are not allowed here" in problem:
        hint = "a ':' where a value was expected: quote a value that contains ': ' (key: \"a: b\"), or put a " \
               "nested mapping on its own, further-indented line"
    elif "expected <block end>" in problem or "did not find expected key" in problem \
            or "did not find expected '-'" in problem:
        hint = "bad indentation: this line does not line up with the keys (or '- ' items) it belongs with; " \
               "indent siblings by the same number of spaces"
    elif "undefined alias" in problem:
        hint = f"{problem}: an alias (*name) must refer to an anchor (&name) defined before it"
    elif "found unexpected end of stream" in problem:
        hint = "the file ends inside an unfinished value (an unclosed quote, bracket or block?)"
    else:
        hint = problem + (f" ({context})" if context else "")
    return YAMLProblem(line, column, hint, excerpt(text, line, column))


def duplicate_keys(node: yaml.Node, text: str) -> list[YAMLProblem]:
    """Every key that appears twice in one mapping of ``node`` (iterative; ``<<`` merges aside)."""
    found: list[YAMLProblem] = []
    stack = [node]
    seen_nodes: set[int] = set()
    while stack:
        current = stack.pop()
        if id(current) in seen_nodes:
            continue
        seen_nodes.add(id(current))
        if isinstance(current, yaml.MappingNode):
            first: dict[str, int] = {}
            for key, value in current.value:
                stack.append(value)
                if not isinstance(key, yaml.ScalarNode) or key.value == "<<":
                    continue
                line, column = _mark(key.start_mark)
                if key.value in first:
                    found.append(YAMLProblem(
                        line, column,
                        f"duplicate key {key.value!r} (first at line {first[key.value]}): YAML would silently keep "
                        "only the last one; remove or rename one of them",
                        excerpt(text, line, column)))
                else:
                    first[key.value] = line or 0
        elif isinstance(current, yaml.SequenceNode):
            stack.extend(current.value)
    found.sort(key=lambda p: (p.line or 0, p.column or 0))
    return found


def safe_load(text: str, file: str = "<input>") -> Any:
    """One YAML document as plain data (SafeLoader); raises YAMLFileError with a located hint on a
    syntax error or a duplicate key."""
    try:
        loader = yaml.SafeLoader(text)
    except yaml.YAMLError as exc:  # a character YAML forbids is found as the reader starts
        raise YAMLFileError(file, [describe(exc, text)]) from None
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        dupes = duplicate_keys(node, text)
        if dupes:
            raise YAMLFileError(file, dupes)
        return loader.construct_document(node)
    except yaml.YAMLError as exc:
        raise YAMLFileError(file, [describe(exc, text)]) from None
    finally:
        loader.dispose()


def load_file(path: str | pathlib.Path) -> Any:
    """``safe_load`` of a file's text; OSError propagates (callers word it for their setting)."""
    return safe_load(pathlib.Path(path).expanduser().read_text(), str(path))
