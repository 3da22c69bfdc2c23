"""The decoder's measured capacity beside `dspark-sim capacity`'s answer (H200, Qwen3-8B shape).

    python benchmarks/decoder_capacity.py cases              # CPU: scenarios and the simulator's answers (plan.json)
    python benchmarks/decoder_capacity.py run --out F.json   # GPU: bisection on the rate, the decoder serving
    python benchmarks/decoder_capacity.py merge --out F.json A.json B.json  # several processes' runs as one
    python benchmarks/decoder_capacity.py page --real F.json # CPU: docs/bench/decoder_capacity.{json,md}

``cases`` writes ``profiles/h200/validation/capacity/`` (:mod:`dspark_sim.validation.capacity_check`);
``run`` serves the probes (:mod:`dspark_sim.validation.capacity_serve`; ``--dry-run``: a tiny CPU
model through the same loop); ``page`` re-makes the simulator's answers at this commit and sets
them beside the decoder's.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CASES = REPO / "profiles" / "h200" / "validation" / "capacity"
SPS = REPO / "profiles" / "h200" / "validation" / "cases" / "sps_dspark.json"
DATA, PAGE = REPO / "docs" / "bench" / "decoder_capacity.json", REPO / "docs" / "bench" / "decoder_capacity.md"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("cases")
    r = sub.add_parser("run")
    r.add_argument("--out", required=True, help="the JSON to write (after every probe)")
    r.add_argument("--records", help="a directory for each probe's run record")
    r.add_argument("--budget-s", type=float, default=360.0, help="seconds for every search together")
    r.add_argument("--methods", nargs="*")
    r.add_argument("--traces", nargs="*")
    r.add_argument("--dry-run", action="store_true", help="CPU: a tiny model serves each probe's first requests")
    m = sub.add_parser("merge", help="several processes' run files as one (each search keeps its provenance)")
    m.add_argument("--out", required=True)
    m.add_argument("runs", nargs="+")
    g = sub.add_parser("page")
    g.add_argument("--real", required=True, nargs="+", help="the decoder's capacity JSON(s) (run --out)")
    g.add_argument("--replicate", nargs="+", help="the decoder's capacity searched on another H200: JSON(s) "
                   "shown beside the simulator's answers and the first host's")
    g.add_argument("--replicate-gpu", default="h200", help="the GPU (the catalog's name) the --replicate runs "
                   "were served on: the simulator answers for it")
    args = p.parse_args(argv)
    if args.cmd == "cases":
        from dspark_sim.validation.capacity_check import write_cases

        plan = write_cases(CASES, SPS)
        for name, t in plan["traces"].items():
            print(name, {m: round(r["rate_rps"], 2) for m, r in t["sim"].items()})
    elif args.cmd == "run":
        from dspark_sim.validation.capacity_serve import measure
        from dspark_sim.validation.serve import Rig

        measure(CASES, Path(args.out), args.budget_s, Rig(dry=args.dry_run),
                Path(args.records) if args.records else None, args.methods, args.traces)
    elif args.cmd == "merge":
        import json

        from dspark_sim.metrics.outdir import atomic_write_text
        from dspark_sim.validation.capacity_check import merge_runs

        merged = merge_runs([json.loads(Path(r).read_text()) for r in args.runs])
        atomic_write_text(Path(args.out), json.dumps(merged, indent=1) + "\n")
    else:
        from outputs import code_commit
        from dspark_sim.errors import InputError
        from dspark_sim.validation.capacity_check import write_page

        try:
            write_page([Path(r) for r in args.real], CASES, DATA, PAGE, code_commit("dspark_sim", "profiles"),
                       [Path(r) for r in args.replicate] if args.replicate else None, args.replicate_gpu)
        except InputError as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
        print(PAGE.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
