"""`dspark-sim validate`: the simulator against a real engine run of the same trace (:mod:`dspark_sim.validation.validate`)."""
from __future__ import annotations

import json
import os
from pathlib import Path

from dspark_sim.errors import InputError
from dspark_sim.metrics.outdir import check_out
from dspark_sim.validation.validate import format_rows, validate


def default_out(real: Path) -> Path:
    """``<real>-validate``, beside the real run's directory."""
    if real.name in ("", ".", ".."):
        real = Path(os.path.abspath(real))
    if not real.name:
        raise InputError(None, "--out", None, f"--real {real} has no directory beside it: give --out")
    return real.with_name(real.name + "-validate")


def run(args) -> int:
    out = check_out(Path(args.out) if args.out else default_out(Path(args.real)))
    rows = validate(Path(args.scenario), Path(args.real), out)
    print(json.dumps(rows, indent=2) if args.json else format_rows(rows))
    if not args.json:
        print(f"wrote {out}/ (validate.json, validate.png, sim/)")
    return 0


def register(sub) -> None:
    p = sub.add_parser("validate", help="compare a simulation with a real engine run of the same trace")
    p.add_argument("--scenario", required=True, help="scenario YAML of the same trace slice, model, GPU and config")
    p.add_argument("--real", required=True, help="run directory of the real engine (requests.csv, steps.csv)")
    p.add_argument("--out", help="output directory (default <real>-validate)")
    p.add_argument("--json", action="store_true", help="print the rows as JSON")
    p.set_defaults(func=run)
