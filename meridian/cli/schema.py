"""``meridian schema``: print the JSON Schema of the spec language, for editors (e.g. the YAML
language server's ``# yaml-language-server: $schema=...``), as YAML, or the Markdown spec reference.
(``-o`` here is the file to write, as it always was; ``--format`` chooses json, yaml or markdown.)"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys

from meridian import spec
from meridian.cli import output
from meridian.spec import reference


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-o", "--out", metavar="FILE", help="write to FILE instead of standard output")
    parser.add_argument("--format", "--output-format", choices=["json", "yaml", "markdown"], default="json",
                        help="json: JSON Schema (default); yaml: the same schema as YAML; markdown: the spec "
                             "reference in docs/")


def run(args: argparse.Namespace) -> int:
    if args.out in ("json", "yaml", "markdown", "table", "wide") and not pathlib.Path(args.out).exists():
        # Every other command's -o is the output format: `schema -o yaml` used to write a file named yaml.
        fmt = args.out if args.out in ("json", "yaml", "markdown") else "json, yaml or markdown"
        print(f"meridian schema: -o/--out is the file to write; for the format use --format {fmt} "
              f"(and -o FILE to write it to a file)", file=sys.stderr)
        return 2
    if args.format == "markdown":
        text = reference.render()
    elif args.format == "yaml":
        text = output.dumps(spec.json_schema(), "yaml")
    else:
        text = json.dumps(spec.json_schema(), indent=2, sort_keys=True) + "\n"
    if args.out:
        pathlib.Path(args.out).write_text(text)
    else:
        print(text, end="")
    return 0
