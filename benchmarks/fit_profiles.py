"""Turn this repository's measured raw timings into its shipped profiles (``dspark-profile fit``).

    python benchmarks/fit_profiles.py            # every profiles/h200/raw/raw_<model>.json
    python benchmarks/fit_profiles.py --synthetic   # dry run on roofline data, scratch output
    python benchmarks/fit_profiles.py --levels-only # only the leave-one-level-out errors, fits kept
    python benchmarks/fit_profiles.py --post-only   # only the terms fitted after the rest (raw/ probes)

Fits ``profiles/<gpu>/<model>.json`` with its SGLang tables and projections
(:mod:`dspark_sim.profiling.pipeline`), plots ``docs/img/profile_fit_<model>.png`` and puts
the held-out error table into ``docs/profiles.md``.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from dspark_sim.profiling.cli import fit, fit_parser

REPO = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gpu", default="h200", help="the GPU the raw files were measured on")
    ap.add_argument("--folds", type=int, default=10)
    ap.add_argument("--models", nargs="*", help="only these models")
    ap.add_argument("--synthetic", action="store_true", help="dry run on roofline data with noise")
    ap.add_argument("--levels-only", action="store_true",
                    help="only the leave-one-level-out errors of the shipped profiles (fitted numbers kept)")
    ap.add_argument("--post-only", action="store_true",
                    help="only the terms fitted after the rest, every other fitted number kept: spread, shared "
                         "prefixes, power limit, drafters in a served step, mixed steps (spread rows of "
                         "raw_<model>.json, the probes under raw/ and prefill_clocks.json)")
    args = ap.parse_args(argv)
    flags = ["--gpu", args.gpu, "--folds", str(args.folds)] + (["--models", *args.models] if args.models else [])
    flags += ["--levels-only"] if args.levels_only else []
    flags += ["--post-only"] if args.post_only else []
    if args.synthetic:
        return fit(fit_parser().parse_args(flags + ["--synthetic"]))
    command = "python benchmarks/fit_profiles.py" + (f" --gpu {args.gpu}" if args.gpu != "h200" else "")
    return fit(fit_parser().parse_args(flags + [
        "--raw-dir", str(REPO / "profiles" / args.gpu / "raw"), "--out-dir", str(REPO / "profiles"),
        "--img-dir", str(REPO / "docs" / "img"), "--docs", str(REPO / "docs" / "profiles.md"),
        "--command", command]))


if __name__ == "__main__":
    sys.exit(main())
