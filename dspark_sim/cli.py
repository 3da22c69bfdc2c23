"""`dspark-sim`: the command line. Bad input ends in one line on stderr and exit code 2."""
from __future__ import annotations

import argparse
import sys
import warnings

from dspark_sim.errors import run_reporting_errors


def _add_run(sub) -> None:
    from dspark_sim.run import main_run

    p = sub.add_parser("run", help="simulate a scenario file (trace.yaml)")
    p.add_argument("scenario", help="scenario YAML")
    p.add_argument("--out", help="output directory (default runs/<name>)")
    p.add_argument("--seed", type=int, help="override the scenario's seed")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=main_run)


# Modules whose register(subparsers) adds one sub-command each, after `run`.
COMMAND_MODULES = ("dspark_sim.compare", "dspark_sim.capacity", "dspark_sim.validate",
                   "dspark_sim.acceptance.cli")


def build_parser() -> argparse.ArgumentParser:
    import importlib

    parser = argparse.ArgumentParser(prog="dspark-sim", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    _add_run(sub)
    for module in COMMAND_MODULES:
        importlib.import_module(module).register(sub)
    return parser


def _warning_line(message, category, filename, lineno, file=None, line=None):
    print(f"warning: {message}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    warnings.showwarning = _warning_line
    args = build_parser().parse_args(argv)
    return run_reporting_errors(args.func, args)


if __name__ == "__main__":
    sys.exit(main())
