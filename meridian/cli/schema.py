"""``meridian schema``: print the JSON Schema of the spec language, for editors (e.g. the YAML
language server's ``# yaml-language-server: $schema=...``), or the Markdown spec reference."""

from __future__ import annotations

import argparse
import json
import pathlib

from meridian import spec
from meridian.spec import reference


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-o", "--out", metavar="FILE", help="write to FILE instead of standard output")
    parser.add_argument("--format", choices=["json", "markdown"], default="json",
                        help="json: JSON Schema (default); markdown: the spec reference in docs/")


def run(args: argparse.Namespace) -> int:
    if args.format == "markdown":
        text = reference.render()
    else:
        text = json.dumps(spec.json_schema(), indent=2, sort_keys=True) + "\n"
    if args.out:
        pathlib.Path(args.out).write_text(text)
    else:
        print(text, end="")
    return 0
