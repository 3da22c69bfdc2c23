"""Fit every built-in acceptance preset and write dspark_sim/acceptance/presets.json.

    python benchmarks/fit_acceptance.py [--seed N] [--jobs N] [--out PATH] [--markdown]

A driver of :mod:`dspark_sim.acceptance.builtin`: prints, for every preset, the target
accepted length, the fitted value and the independent serving replay. docs/acceptance.md's
blocks are made from the written presets.json alone (:mod:`dspark_sim.reports.acceptance`, through
``benchmarks/doc_blocks.py``).
"""
from __future__ import annotations

import argparse
import json
import os
import sys

from dspark_sim.acceptance.builtin import fit_builtin, format_table
from dspark_sim.acceptance.preset import BUILTIN_PATH
from dspark_sim.metrics.outdir import atomic_write_text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=20260705)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--out", default=str(BUILTIN_PATH))
    parser.add_argument("--markdown", action="store_true", help="print the table as markdown (docs/acceptance.md)")
    args = parser.parse_args(argv)
    doc, fitted = fit_builtin(args.seed, args.jobs)
    print(format_table([job for job, _ in fitted], [r for _, r in fitted], markdown=args.markdown))
    atomic_write_text(args.out, json.dumps(doc, indent=1) + "\n")
    print(f"wrote {len(doc['presets'])} presets to {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
