"""``python -m runner.datasets ACTION ...``: the same as ``python -m runner datasets ACTION ...``."""

import argparse
import sys

from runner.datasets import cli


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        print(f"{self.prog}: {message}", file=sys.stderr)
        sys.exit(2)


parser = _Parser(prog="runner.datasets")
cli.add_arguments(parser)
sys.exit(cli.main(parser.parse_args()))
