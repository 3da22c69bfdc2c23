"""`dspark-sim trace`: a scenario's requests written as a Mooncake trace (JSON lines with prefix ``hash_ids``).

Turns a synthetic workload (sessions included) into a file the simulator, the decoder and
other tools replay unchanged; a trace scenario is rewritten in Mooncake form.
"""
from __future__ import annotations

from pathlib import Path

from dspark_sim.scenario import load_scenario
from dspark_sim.workload import write_mooncake


def run(args) -> int:
    scenario = load_scenario(args.scenario)
    seed = scenario.seed if args.seed is None else args.seed
    count = write_mooncake(Path(args.out), scenario.workload.requests(seed))
    print(f"wrote {args.out} ({count:,} requests, Mooncake JSON lines)")
    return 0


def register(sub) -> None:
    p = sub.add_parser("trace", help="write a scenario's requests as a Mooncake trace (JSON lines)")
    p.add_argument("scenario", help="scenario YAML")
    p.add_argument("--out", required=True, help="the trace file to write (.jsonl)")
    p.add_argument("--seed", type=int, help="override the scenario's seed")
    p.set_defaults(func=run)
