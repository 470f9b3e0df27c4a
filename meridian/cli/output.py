"""``-o/--output text|json|yaml`` for every command that prints data: one flag, one printer.

JSON and YAML print the data itself (what the admin API answered, what validation or the simulator
computed), never the rendered text, so scripts read the same fields the API documents; ``text`` is
for people (tables through ``meridian.tables``)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any

import yaml

FORMATS = ("text", "json", "yaml")


def add_argument(parser: argparse.ArgumentParser, default: str | None = "text",
                 formats: tuple[str, ...] = FORMATS) -> None:
    parser.add_argument("-o", "--output", choices=list(formats), default=default,
                        help=f"{'|'.join(formats)}: text for people (default), json or yaml: the data itself")


def dumps(data: Any, fmt: str) -> str:
    """``data`` as JSON (indented) or YAML (keys in their order), ending with a newline."""
    if fmt == "json":
        return json.dumps(data, indent=2) + "\n"
    if fmt == "yaml":
        return yaml.safe_dump(data, sort_keys=False, allow_unicode=True)
    raise ValueError(f"output {fmt!r}: use json or yaml")


def emit(data: Any, fmt: str | None, text: Callable[[], str | None]) -> None:
    """Print ``data`` in ``fmt``; for ``text`` (or None) print what ``text()`` renders (nothing
    when it returns None: it printed itself)."""
    if fmt in ("json", "yaml"):
        sys.stdout.write(dumps(data, fmt))
        return
    rendered = text()
    if rendered is not None:
        print(rendered)


def structured(fmt: str | None) -> bool:
    return fmt in ("json", "yaml")
