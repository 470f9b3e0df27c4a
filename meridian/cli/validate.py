"""``meridian validate FILE...``: check spec files as one set; print every error with its file,
line, field path and a suggestion. Exit 0 when valid, 1 when not."""

from __future__ import annotations

import argparse
import json
import sys

from meridian import spec


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("files", nargs="+", metavar="FILE", help="YAML spec files (several documents each)")
    parser.add_argument("-o", "--output", choices=["text", "json"], default="text")


def run(args: argparse.Namespace) -> int:
    try:
        result = spec.load_files(args.files)
    except spec.SpecError as exc:
        if args.output == "json":
            json.dump({"valid": False, "errors": [i.to_dict() for i in exc.issues]}, sys.stdout, indent=2)
            print()
        else:
            for issue in exc.issues:
                print(str(issue), file=sys.stderr)
            print(f"{len(exc.issues)} error(s) in {len({i.file for i in exc.issues})} file(s)", file=sys.stderr)
        return 1
    if args.output == "json":
        docs = [{"file": d.file, "line": d.line, "kind": d.kind, "name": d.name} for d in result.documents]
        json.dump({"valid": True, "documents": docs}, sys.stdout, indent=2)
        print()
    else:
        for d in result.documents:
            print(f"{d.file}:{d.line}: {d.kind}/{d.name} valid")
        print(f"{len(result.documents)} document(s) valid")
    return 0
