"""The ``calibrate`` sub-command; dspark_sim/cli.py calls ``register`` on its sub-parsers.

The fitter (scipy.optimize, matplotlib) is imported only when calibrate runs,
so registering costs every other sub-command nothing.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from dspark_sim.names import DOMAINS, DRAFTERS

DESCRIPTION = ("Fit an acceptance preset (preset.json, usable as speculation.acceptance.preset_file) and "
               "STS temperatures in SGLang's JSON format (sts.json) from a table of accepted lengths or "
               "acceptance by position, or from a log of (confidences, accepted length) per request-step. "
               "Prints ECE before and after STS.")


def register(subparsers) -> argparse.ArgumentParser:
    """Add ``calibrate`` to an argparse sub-parser set; the parsed namespace carries ``func=run``."""
    p = subparsers.add_parser(
        "calibrate", help="fit an acceptance preset and STS temperatures from your own numbers",
        description=DESCRIPTION)
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--table", metavar="FILE",
                        help="CSV/YAML of accepted lengths per dataset or acceptance by position")
    source.add_argument("--log", metavar="FILE",
                        help="CSV/JSONL of request-steps: confidences c1..cG (or logits) and accepted drafts")
    p.add_argument("--drafter", default="dspark", choices=DRAFTERS, help="drafter of the base preset")
    p.add_argument("--target", default="qwen3-8b", help="target model of the base preset (nearest is used)")
    p.add_argument("--domain", choices=DOMAINS, help="--log only: the log's domain (default: all domains)")
    p.add_argument("--out", default="calibration", metavar="DIR",
                   help="output folder, written whole (default: calibration)")
    p.add_argument("--name", help="dataset label in sts.json (default: the input's file name)")
    p.add_argument("--seed", type=int, default=0, help="seed of the fitting draws")
    p.add_argument("--plot", action="store_true", help="also write reliability.png (before/after STS)")
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    """Fit, write the outputs, print ECE before/after; bad input raises InputError."""
    from dspark_sim.acceptance import calibrate, inputs
    from dspark_sim.config import check_int
    from dspark_sim.limits import MAX_SEED
    from dspark_sim.metrics.outdir import atomic_dir, check_out

    check_int(args.seed, "--seed", 0, MAX_SEED)
    out = check_out(Path(args.out))
    source = Path(args.table or args.log)
    name = args.name or source.name
    if args.table:
        cal = calibrate.from_table(inputs.read_table(source), args.drafter, args.target, seed=args.seed, name=name)
    else:
        cal = calibrate.from_log(inputs.read_log(source), args.drafter, args.target, domain=args.domain,
                                 seed=args.seed, name=name)
    with atomic_dir(out) as tmp:  # the folder whole: no file of it without the others
        paths = calibrate.write(cal, tmp, drafter=args.drafter, target=args.target, seed=args.seed,
                                plot=args.plot)
    _print(cal)
    for path in paths:
        print(f"wrote {out / path.name}")
    return 0


def _print(cal) -> None:
    """ECE before/after STS by position, then target vs fitted accepted length by domain."""
    sts = cal.sts
    print(f"STS on {sts['dataset']} ({sts['num_samples']} request-steps)")
    print(f"{'pos':>3} {'temp':>7} {'ECE before':>10} {'ECE after':>9}")
    for k, (t, b, a) in enumerate(zip(sts["temperatures"], sts["ece_before"], sts["ece_after"]), start=1):
        print(f"{k:>3} {t:7.3f} {100 * b:9.2f}% {100 * a:8.2f}%")
    print(f"{'domain':6} {'target':>7} {'fitted':>7}  source")
    for preset, report in zip(cal.presets, cal.reports):
        target = report.get("target_accept_len")
        fitted = report.get("sim_accept_len")
        cells = f"{target:7.3f} {fitted:7.3f}" if target is not None else f"{'-':>7} {'-':>7}"
        print(f"{preset.domain:6} {cells}  {report['source']}")
