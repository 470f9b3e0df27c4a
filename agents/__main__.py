"""``python -m agents --cluster FILE [--name CLUSTER]``: the same as ``meridian agent``."""

import argparse
import sys

from agents import cli

parser = argparse.ArgumentParser(prog="python -m agents", description="Run one cluster's Meridian agent.")
cli.add_arguments(parser)
sys.exit(cli.run(parser.parse_args()))
