"""`dspark-sim compare`: speculation methods side by side over a concurrency sweep (:mod:`dspark_sim.sweep`)."""
from __future__ import annotations

import json
from pathlib import Path

from dspark_sim.config import check_int
from dspark_sim.errors import InputError
from dspark_sim.limits import MAX_RUNNING_REQUESTS
from dspark_sim.methods import METHOD_HELP, method_speculation
from dspark_sim.metrics.outdir import atomic_dir, check_out
from dspark_sim.scenario import load_scenario
from dspark_sim.provenance import provenance_line
from dspark_sim.sweep import format_table, plot, provenance_by_method, sweep

DEFAULT_METHODS = "none,mtp1,mtp3,dspark"
DEFAULT_CONCURRENCY = "1,8,32,64,128,256"


# Requests of one sweep point at most: the sweep runs methods x concurrencies of them.
MAX_POINT_REQUESTS = 10**6


def _ints(text: str, flag: str, most: int) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise InputError(None, flag, text, "expected comma-separated integers") from None
    if not values or min(values) < 1 or max(values) > most:
        raise InputError(None, flag, text, f"expected integers in [1, {most}]")
    return values


def run(args) -> int:
    scenario = load_scenario(args.scenario)
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    for m in methods:
        method_speculation(m, scenario.speculation, "--methods")
    concurrency = _ints(args.concurrency, "--concurrency", MAX_RUNNING_REQUESTS)
    check_int(args.requests, "--requests", 1, MAX_POINT_REQUESTS, optional=True)
    out = check_out(Path(args.out) if args.out else Path("runs") / f"{scenario.name}-compare")
    from tqdm import tqdm

    bar = tqdm(total=len(methods) * len(concurrency), unit="point", disable=args.quiet, leave=False)
    rows = sweep(scenario, methods, concurrency, num_requests=args.requests,
                 progress=lambda r: (bar.update(1), bar.set_postfix_str(f"{r['method']}@{r['concurrency']}")))
    bar.close()
    provenance = provenance_by_method(scenario, methods)
    with atomic_dir(out) as tmp:
        (tmp / "compare.json").write_text(json.dumps({"scenario": scenario.name, "rows": rows,
                                                      "provenance": provenance}, indent=2) + "\n")
        plot(rows, f"{scenario.model} on {scenario.gpu}: {scenario.name}", tmp)
    print(format_table(rows))
    line = provenance_line(list(provenance.values()))
    if line:
        print(line)
    print(f"wrote {out}/compare.json and frontier.png")
    return 0


def register(sub) -> None:
    p = sub.add_parser("compare", help="speculation methods side by side over a concurrency sweep")
    p.add_argument("scenario")
    p.add_argument("--methods", default=DEFAULT_METHODS, help=METHOD_HELP)
    p.add_argument("--concurrency", default=DEFAULT_CONCURRENCY)
    p.add_argument("--requests", type=int, default=None, help="requests per point (default max(64, 6 x C))")
    p.add_argument("--out")
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(func=run)
