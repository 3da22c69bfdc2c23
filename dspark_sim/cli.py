"""`dspark-sim`: the command line. Bad input ends in one line on stderr and exit code 2."""
from __future__ import annotations

import argparse
import sys
import warnings

from dspark_sim.errors import ArgumentParser, run_reporting_errors


# Modules whose register(subparsers) adds one sub-command each, in this order.
COMMAND_MODULES = ("dspark_sim.commands.run", "dspark_sim.commands.compare", "dspark_sim.commands.capacity",
                   "dspark_sim.commands.validate", "dspark_sim.commands.calibrate", "dspark_sim.commands.trace",
                   "dspark_sim.commands.engine_fit")


def build_parser() -> argparse.ArgumentParser:
    import importlib

    parser = ArgumentParser(prog="dspark-sim", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    for module in COMMAND_MODULES:
        importlib.import_module(module).register(sub)
    return parser


def _warning_line(message, category, filename, lineno, file=None, line=None):
    print(f"warning: {message}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    warnings.showwarning = _warning_line
    args = build_parser().parse_args(argv)
    return run_reporting_errors(args.func, args, program=f"dspark-sim {args.command}")


if __name__ == "__main__":
    sys.exit(main())
