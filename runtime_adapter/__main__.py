"""``python -m runtime_adapter serve ...``: the runtime adapter as a program (the replica image's
entry point; see ``runtime_adapter.serve``)."""

import sys

from runtime_adapter import serve

COMMANDS = {"serve": serve.main}


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in COMMANDS:
        print("usage: python -m runtime_adapter serve [--help] ...\n\n"
              "  serve   run one replica's engine in the foreground (inside a pod): SGLang's flags from the\n"
              "          RuntimeSpec, /drain for the preStop hook, /healthz, exit with the engine", file=sys.stderr)
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    return COMMANDS[argv[0]](argv[1:])


sys.exit(main(sys.argv[1:]))
