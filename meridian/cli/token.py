"""``meridian token new`` and ``meridian token hash``: make a token and the form in which the
scheduler stores it.

    meridian token new > alice.token                 # 32 random bytes, URL-safe base64
    meridian token hash < alice.token                # sha256:<hex>, for the tokens files

The token is read from standard input (or ``--file``), never from the command line, where ``ps``
and shell history would show it. The digest is what goes into ``--tokens-file`` (``clusters``,
``routers``, ``admins[].token``) and ``--admin-token-file``: the scheduler keeps and compares
SHA-256 digests only (see docs/security.md for why SHA-256 suits machine-made tokens)."""

from __future__ import annotations

import argparse
import hashlib
import pathlib
import secrets
import sys

MIN_TOKEN_CHARS = 20
NEW_TOKEN_BYTES = 32


def stored_form(token: str) -> str:
    """What the scheduler's token files hold for ``token``: ``sha256:<64 hex>`` of the stripped text
    (the scheduler strips whitespace the same way when it reads a presented token)."""
    return "sha256:" + hashlib.sha256(token.strip().encode()).hexdigest()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    sub.add_parser("new", help="print a new random token (32 bytes, URL-safe base64)")
    hasher = sub.add_parser("hash", help="print the stored form (sha256:<hex>) of a token read from stdin")
    hasher.add_argument("--file", help="read the token from this file instead of standard input")


def run(args: argparse.Namespace) -> int:
    if args.action == "new":
        print(secrets.token_urlsafe(NEW_TOKEN_BYTES))
        return 0
    try:
        text = pathlib.Path(args.file).expanduser().read_text() if args.file else sys.stdin.read()
    except OSError as exc:
        print(f"token hash: cannot read {args.file}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    token = text.strip()
    if not token:
        print("token hash: no token given (pipe it in: `meridian token hash < TOKEN_FILE`)", file=sys.stderr)
        return 1
    if "\n" in token:
        print("token hash: the input has several lines; give one token", file=sys.stderr)
        return 1
    if len(token) < MIN_TOKEN_CHARS:
        print(f"warning: the token has {len(token)} characters; use `meridian token new` for one that cannot be "
              "guessed", file=sys.stderr)
    print(stored_form(token))
    return 0
