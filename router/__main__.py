"""``python -m router``: the same as ``meridian router``."""

import argparse
import sys

from router import cli

parser = argparse.ArgumentParser(prog="python -m router", description="Meridian router")
cli.add_arguments(parser)
sys.exit(cli.run(parser.parse_args()))
