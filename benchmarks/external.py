"""Replay published measurements of production engines and tabulate the simulator's errors.

    python benchmarks/external.py calibrate   # fit each engine's host terms on the 'calibrate' cases
                                              #   -> dspark_sim/engines/terms.json
    python benchmarks/external.py calibrate --only eager_layer_s
                                              # fit only these terms of the engines' MoE roofline
                                              #   again, everything else in terms.json held
    python benchmarks/external.py check       # replay every case with the shipped terms
                                              #   -> docs/external.md, docs/external.json
    python benchmarks/external.py             # both
    python benchmarks/external.py report      # docs/external.md again from docs/external.json
                                              #   (after editing a case's gap)
    python benchmarks/external.py diagnose    # every case replayed again with one kind of host term
                                              #   left out at a time, and where its GPU time goes
                                              #   -> docs/external_diagnose.md, .json
    python benchmarks/external.py what-if --set flops_eff.fp4-experts-w4a16=0.5 --cases ID ...
                                              # cases replayed with other terms of the engines' MoE
                                              #   roofline, beside the page's errors; writes nothing

The cases are profiles/external/cases.yaml; the work is dspark_sim/validation/published_check.py
(replays, fits) and published_page.py (the pages).
"""
from __future__ import annotations

import argparse
import json
import sys
import warnings

from dspark_sim.cost.jsonio import write_json_atomic
from dspark_sim.engines.model import GpuWork
from dspark_sim.validation.published import CASES, METRICS, ROOT, load_cases
from dspark_sim.validation.published_check import (SEEDS, SUMMARY_GROUPS, TERMS, calibrate, calibrate_only, check,
                                                   diagnose, summary, what_if)
from dspark_sim.profiling.gpu_work_fit import BOUNDS
from dspark_sim.validation.published_page import (DIAG_DOC, DIAG_JSON, DOC, DOC_JSON, write_defaults_doc,
                                                  write_diagnose_doc, write_doc)

ONLY_TERMS = tuple(BOUNDS)
KEYED = tuple(t for t in ONLY_TERMS if isinstance(getattr(GpuWork(), t), tuple))  # by attention kind or format


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", nargs="?", default="all", choices=("all", "calibrate", "check", "report",
                                                                        "diagnose", "what-if"))
    parser.add_argument("--seeds", type=int, default=len(SEEDS), help=f"seeds a case is replayed with (default "
                        f"{len(SEEDS)})")
    parser.add_argument("--jobs", type=int, default=1, help="processes replaying cases (default 1)")
    parser.add_argument("--cases", nargs="+", metavar="ID", help="diagnose or what-if only these cases "
                        "(default: all)")
    parser.add_argument("--set", nargs="+", metavar="TERM[.KEY]=VALUE", default=[],
                        help="what-if: a term of the engines' MoE roofline in place of the shipped one "
                        "(flops_eff.fp4-experts-w4a16=0.5, first_token_layer_s.v4=0.003, moe_bw_eff=0.4)")
    parser.add_argument("--only", nargs="+", metavar="TERM", choices=ONLY_TERMS,
                        help="calibrate: fit only these terms of the engines' MoE roofline, the rest of "
                        "terms.json held")
    args = parser.parse_args(argv)
    seeds = tuple(range(args.seeds))
    warnings.simplefilter("ignore", UserWarning)  # the roofline's "no measured profile": named in the table
    sources, cases = load_cases()
    known = {c["id"] for c in cases}
    for name in args.cases or ():
        if name not in known:
            print(f"{CASES.relative_to(ROOT)}: cases: unknown case {name!r}", file=sys.stderr)
            return 2
    if args.what == "what-if":
        return _what_if(args, cases, seeds)
    write_defaults_doc()
    if args.only:
        if args.what != "calibrate" or not TERMS.is_file():
            print("--only: refits terms of an existing dspark_sim/engines/terms.json with 'calibrate'",
                  file=sys.stderr)
            return 2
        write_json_atomic(TERMS, calibrate_only(cases, tuple(args.only), json.loads(TERMS.read_text())))
        print(f"wrote {TERMS.relative_to(ROOT)}", file=sys.stderr)
    elif args.what in ("all", "calibrate"):
        write_json_atomic(TERMS, calibrate(cases))
        print(f"wrote {TERMS.relative_to(ROOT)}", file=sys.stderr)
    if args.what == "report":  # the simulated numbers as they are, the gaps as the YAML has them now
        data = json.loads(DOC_JSON.read_text())
        gaps = {c["id"]: c.get("gap", "") for c in cases}
        rows = [{**r, "gap": gaps.get(r["id"], "")} for r in data["cases"]]
        write_doc(rows, sources, data["terms"], data["generated_by"], tuple(data["seeds"]))
        print(f"wrote {DOC.relative_to(ROOT)}, {DOC_JSON.relative_to(ROOT)}")
    if args.what == "diagnose":
        chosen = [c for c in cases if not args.cases or c["id"] in args.cases]
        rows = diagnose(chosen, seeds, args.jobs)
        command = "python benchmarks/external.py diagnose" + (f" --seeds {args.seeds}" if args.seeds != len(SEEDS)
                                                              else "") + \
            (f" --cases {' '.join(args.cases)}" if args.cases else "")
        write_diagnose_doc(rows, command, seeds)
        print(f"wrote {DIAG_DOC.relative_to(ROOT)}, {DIAG_JSON.relative_to(ROOT)}")
    if args.what in ("all", "check"):
        terms = json.loads(TERMS.read_text()) if TERMS.is_file() else {"engines": {}}
        rows = check(cases, seeds, args.jobs)
        command = "python benchmarks/external.py" + (f" --seeds {args.seeds}" if args.seeds != len(SEEDS) else "")
        write_doc(rows, sources, terms, command, seeds)
        for role, s in ((label, summary(rows, r, fits)) for label, r, fits in SUMMARY_GROUPS):
            for name, v in s.items():
                print(f"{role:20s} {name:10s} n={v['cases']:2d} median {v['median'] * 100:5.1f} % "
                      f"p90 {v['p90'] * 100:5.1f} % max {v['max'] * 100:5.1f} %  target "
                      f"{'met' if v['met'] else 'NOT met'}")
        print(f"wrote {DOC.relative_to(ROOT)}, {DOC_JSON.relative_to(ROOT)}")
    return 0


def _what_if(args, cases: list[dict], seeds: tuple[int, ...]) -> int:
    """The chosen cases replayed with ``--set``'s terms, beside the errors docs/external.json has."""
    changes: dict = {}
    for item in args.set:
        term, eq, value = item.partition("=")
        name, _, key = term.partition(".")
        try:
            number = float(value)
        except ValueError:
            number = None
        if not eq or name not in ONLY_TERMS or number is None or (key == "") == (name in KEYED):
            print(f"--set: {item!r}: TERM[.KEY]=NUMBER, TERM one of {', '.join(ONLY_TERMS)} (a KEY for "
                  f"{', '.join(KEYED)})", file=sys.stderr)
            return 2
        low, high = BOUNDS[name]
        if not low <= number <= high:
            print(f"--set: {item!r}: {name} must lie in [{low:g}, {high:g}] (the fit's bounds)", file=sys.stderr)
            return 2
        if key:
            changes.setdefault(name, {})[key] = number
        else:
            changes[name] = number
    if not changes:
        print("what-if: --set at least one term", file=sys.stderr)
        return 2
    chosen = [c for c in cases if not args.cases or c["id"] in args.cases]
    shipped = {r["id"]: r["error"] for r in json.loads(DOC_JSON.read_text())["cases"]} if DOC_JSON.is_file() else {}
    print(f"{'case':52s} {'role':9s} " + " ".join(f"{m + ' shipped / what-if':>28s}" for m in METRICS))
    for row in what_if(chosen, changes, seeds, args.jobs):
        cells = []
        for m in METRICS:
            before, after = shipped.get(row["id"], {}).get(m), row["error"].get(m)
            cells.append(f"{_pct(before):>13s} / {_pct(after):>12s}")
        print(f"{row['id']:52s} {row['role']:9s} " + " ".join(cells))
    return 0


def _pct(value) -> str:
    return "-" if value is None else f"{value * 100:+.1f} %"


if __name__ == "__main__":
    sys.exit(main())
