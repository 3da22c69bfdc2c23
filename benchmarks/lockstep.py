"""The decoder's scheduler against the simulator's, on the same arrivals and the same step prices (CPU).

    python benchmarks/lockstep.py                       # docs/bench/lockstep.json and .md
    python benchmarks/lockstep.py --json docs/bench/lockstep_before.json --seeds 1 2 3

Each case is one trace served twice (:func:`dspark_sim.validation.lockstep.lockstep_case`): by
the simulator (Qwen3-8B on the H200, the shipped profile, the fidelity cases' deployment) and by
the decoder's own serving loop (the tiny CPU decoder at the same limits, null forwards,
synthetic acceptance) on a clock on which each of its steps lasts what the same profile prices
its work at. Whatever differs then comes from what each side puts into its steps. Traffic:
chat-like prompts (lognormal, mean 192 tokens: a quarter of the sweeps', so the CPU decoder
stays quick), outputs uniform 32..160, Poisson at 140 req/s (past the saturation of this
traffic, about 105-110 req/s) and at 60 req/s (moderate), 1200 requests, three trace seeds.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from outputs import code_commit, machine

REPO = Path(__file__).resolve().parents[1]
JSON = REPO / "docs" / "bench" / "lockstep.json"
RATES = {"saturated": 140.0, "moderate": 60.0}
REQUESTS, PROMPT_MEAN, OUTPUTS = 1200, 192, (32, 160)
METHODS, BATCHINGS = ("none", "mtp3", "dspark"), ("prefill_first", "mixed")
SHOWN = ("output_throughput", "mean_ttft_ms", "p50_tpot_ms", "mean_decode_reqs", "mean_prefill_tokens")


def trace(rate: float, seed: int):
    """``(arrival_s, prompt, output)``: Poisson at ``rate``, prompts lognormal of mean PROMPT_MEAN."""
    rng = np.random.default_rng(seed)
    arrival = np.cumsum(rng.exponential(1.0 / rate, REQUESTS))
    prompt = np.clip(np.round(rng.lognormal(np.log(PROMPT_MEAN) - 0.18, 0.6, REQUESTS)), 16, 8 * PROMPT_MEAN)
    return arrival - arrival[0], prompt.astype(int), rng.integers(OUTPUTS[0], OUTPUTS[1] + 1, REQUESTS)


def run(seeds, loads) -> dict:
    from dspark_sim.validation.lockstep import lockstep_case

    cases, t0 = [], time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        for load in loads:
            for seed in seeds:
                arrival, prompt, output = trace(RATES[load], seed)
                for batching in BATCHINGS:
                    for method in METHODS:
                        case = lockstep_case(Path(tmp) / f"{load}-{seed}-{batching}-{method}", arrival, prompt,
                                             output, method, batching)
                        cases.append({"load": load, "rate_per_s": RATES[load], "seed": seed, **case})
                        print(f"{load} seed {seed} {batching:<13} {method:<6} first difference "
                              f"{case['first_difference']}; " + ", ".join(
                                  f"{k} {case['error'][k]:+.2%}" for k in SHOWN if k in case["error"]), flush=True)
    return {"made_by": "python benchmarks/lockstep.py", "commit": code_commit("dspark_sim", "kernels"),
            "machine": machine(), "wall_s": round(time.perf_counter() - t0, 1),
            "traffic": {"requests": REQUESTS, "prompt_mean": PROMPT_MEAN, "outputs": list(OUTPUTS), "rates": RATES},
            "cases": cases}


def table(data: dict) -> str:
    """Per load, batching and method: the first step whose composition differs (per seed) and the
    mean over the seeds of each error, (sim - decoder) / decoder."""
    lines = ["| load | batching | method | first differing step (each seed) | "
             + " | ".join(SHOWN) + " |", "|---|---|---|---|" + "---|" * len(SHOWN)]
    groups: dict = {}
    for c in data["cases"]:
        groups.setdefault((c["load"], c["batching"], c["method"]), []).append(c)
    for (load, batching, method), group in groups.items():
        first = ", ".join("none" if c["first_difference"] is None else str(c["first_difference"]) for c in group)
        errs = [f"{np.mean([c['error'].get(k, np.nan) for c in group]):+.2%}" for k in SHOWN]
        lines.append(f"| {load} | {batching} | {method} | {first} | " + " | ".join(errs) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3])
    p.add_argument("--loads", nargs="+", choices=list(RATES), default=list(RATES))
    p.add_argument("--json", default=str(JSON))
    args = p.parse_args(argv)
    data = run(args.seeds, args.loads)
    Path(args.json).write_text(json.dumps(data, indent=1) + "\n")
    print(table(data))
    return 0


if __name__ == "__main__":
    sys.exit(main())
