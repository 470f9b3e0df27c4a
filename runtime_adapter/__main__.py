"""``python -m runtime_adapter serve ...``: the runtime adapter as a program (the replica image's
entry point; see ``runtime_adapter.serve``); ``python -m runtime_adapter relay ...``: the TLS relay
in front of a local engine (``runtime_adapter.tls_relay``)."""

import sys

from runtime_adapter import serve, tls_relay

COMMANDS = {"serve": serve.main, "relay": tls_relay.main}


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in COMMANDS:
        print("usage: python -m runtime_adapter serve|relay [--help] ...\n\n"
              "  serve   run one replica's engine in the foreground (inside a pod): SGLang's flags from the\n"
              "          RuntimeSpec, /drain for the preStop hook, /healthz, exit with the engine\n"
              "  relay   HTTPS on a port, relayed to an engine on loopback (a local replica's TLS)", file=sys.stderr)
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    return COMMANDS[argv[0]](argv[1:])


sys.exit(main(sys.argv[1:]))
