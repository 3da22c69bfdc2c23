"""How a pruned-against-unpruned comparison's winners fare on the pruning slices.

Each variant's best confirmed configuration (from a ``bench_tune.py --slices`` JSON) is
simulated on the trace's first slices and on the whole trace, on one seed, and its objective
and SLO margin printed per slice: whether the slices would have stopped the unpruned winner
(a slice misjudging it) or the pruned search never reached it::

    python benchmarks/slice_values.py docs/bench/tune_bench-pruning-overload.json \\
        --scenario benchmarks/scenarios/chat_overload_h200.yaml --gpu h200
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from dspark_sim.slo import Slo
from dspark_sim.tuner.objective import Target, assess, simulate
from dspark_sim.tuner.pruning import slice_of
from dspark_sim.tuner.scenarios import configure, load_base


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("figures", help="a bench_tune.py JSON with a pruning comparison")
    p.add_argument("--scenario", required=True, help="the scenario the studies tuned")
    p.add_argument("--gpu", required=True)
    p.add_argument("--seed", type=int, default=0, help="the simulation seed (the studies' first is 0)")
    args = p.parse_args()
    data = json.loads(Path(args.figures).read_text())["pruning"]
    base = load_base(args.scenario, gpu=args.gpu)
    own = base.get("slo") or {}
    target = Target("throughput", Slo(tpot_ms=own.get("tpot_ms"), ttft_ms=own.get("ttft_ms")))
    slices = data["variants"]["pruned"]["slices"]
    print(f"{'winner of':10} {'configuration':58} " + " ".join(f"{label:>24}" for label in
          [f"first {m:g} min" for m in slices] + ["whole trace"]))
    for variant, run in data["variants"].items():
        config = run["winners"]["dspark"]["config"]
        raw = configure(base, config)
        cells = []
        for until in [60.0 * m for m in slices] + [None]:
            result = assess(simulate(slice_of(raw, until), [args.seed]), target)
            slack = -max(result["constraints"].values())
            cells.append(f"{result['values'][0]:9,.1f} (SLO {slack:+.1%})")
        dep, spec = config["deployment"], config["speculation"]
        shown = (f"R<={dep['max_running_requests']} chunk={dep.get('chunked_prefill_tokens')} "
                 f"{dep.get('batching')} block={spec.get('block_size')} lag={spec.get('lag_steps')}")
        print(f"{variant:10} {shown:58} " + " ".join(f"{c:>24}" for c in cells))
    print(f"{target.value_names[0]} on seed {args.seed}; SLO: the slack to the tightest bound (< 0: missed)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
