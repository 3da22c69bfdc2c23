"""The prefix cache on a Mooncake trace: hit rate, TTFT and the GPUs needed, cache on and off.

    python benchmarks/prefix_cache.py [--scenario examples/sessions_mooncake_h200.yaml]
        [--methods dspark] [--gpus h200] [--max-requests 600] [--out docs/bench/prefix_cache.json]

Runs the scenario twice, with ``deployment.prefix_cache`` on and off (everything else the
same), and for each prints the share of prompt tokens read from the cache, the prefill
tokens computed, TTFT (mean, p50, p99) and output throughput of the whole trace, then the
fewest GPUs that carry its arrival rate within its SLO (``dspark-sim capacity``'s search,
``--max-requests`` requests per simulation). Simulated from the shipped profiles: the
numbers are projections of the simulator, labelled so. Writes the JSON and the generated
block of docs/prefix_cache.md.
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

from outputs import write_block, write_result

from dspark_sim.capacity.plan import CapacitySettings, capacity
from dspark_sim.run import run_scenario
from dspark_sim.scenario import load_scenario
from dspark_sim.slo import Slo

REPO = Path(__file__).resolve().parents[1]
SUMMARY_KEYS = ("mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms", "median_tpot_ms", "output_throughput",
                "slo_attainment")


def measure(scenario, args) -> dict:
    """One run of the whole trace and one capacity search for ``scenario``."""
    t0 = time.perf_counter()
    summary, _ = run_scenario(scenario, None, plots=False, show_progress=False)
    pc = summary.prefix_cache
    row = {k: getattr(summary, k) for k in SUMMARY_KEYS}
    row["requests"] = summary.completed
    row.update(hit_rate=pc.hit_rate if pc else 0.0, block_hit_rate=pc.block_hit_rate if pc else 0.0,
               prefill_tokens_computed=pc.prefill_tokens_computed if pc else None,
               prefill_tokens_saved=pc.prefill_tokens_saved if pc else 0,
               evicted_blocks=pc.evicted_blocks if pc else 0, total_input_tokens=summary.total_input_tokens)
    slo = Slo(tpot_ms=scenario.slo.tpot_ms, ttft_ms=scenario.slo.ttft_ms)
    cfg = CapacitySettings(slo=slo, gpus=tuple(args.gpus.split(",")), methods=tuple(args.methods.split(",")),
                           tps=(1,), max_requests=args.max_requests, precision=args.precision,
                           max_sims=args.max_sims, qps=args.qps)
    report = capacity(scenario, cfg)
    row["target_rps"] = report["target_rps"]
    row["capacity"] = [{k: r.get(k) for k in ("gpu", "method", "gpus", "replicas", "tp", "rate_per_replica_rps")}
                       for r in report["rows"]]
    row["wall_s"] = round(time.perf_counter() - t0, 1)
    return row


def table(result: dict) -> str:
    """The generated block: one row per cache setting, then the GPUs needed."""
    on, off = result["runs"]["on"], result["runs"]["off"]
    lines = [f"Simulated (projection from the shipped profiles, not measured) by `{result['command']}` on "
             f"`{result['scenario']}` ({result['requests']} requests), {result['date']}.", "",
             "| prefix cache | prompt tokens from the cache | prefill tokens computed | TTFT mean / p50 / p99 (ms) "
             "| TPOT p50 (ms) | output tok/s | SLO attainment |", "|---|---|---|---|---|---|---|"]
    for name, r in (("on", on), ("off", off)):
        lines.append(f"| {name} | {r['hit_rate']:.1%} | {r['prefill_tokens_computed']:,} | "
                     f"{r['mean_ttft_ms']:.0f} / {r['median_ttft_ms']:.0f} / {r['p99_ttft_ms']:.0f} | "
                     f"{r['median_tpot_ms']:.2f} | {r['output_throughput']:.0f} | {r['slo_attainment']:.1%} |")
    lines += ["", f"GPUs needed for {result['target_rps']:.2f} req/s of these sessions within the SLO "
              "(`dspark-sim capacity`, TP 1, "
              f"{result['max_requests']} requests per simulation):", "",
              "| GPU | method | cache on: GPUs (max req/s per replica) | cache off: GPUs (max req/s per replica) |",
              "|---|---|---|---|"]
    for a, b in zip(on["capacity"], off["capacity"]):
        cell = lambda r: "-" if r["gpus"] is None else f"{r['gpus']} ({r['rate_per_replica_rps']:.2f})"  # noqa: E731
        lines.append(f"| {a['gpu']} | {a['method']} | {cell(a)} | {cell(b)} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--scenario", default=str(REPO / "examples" / "sessions_mooncake_h200.yaml"))
    p.add_argument("--methods", default="dspark")
    p.add_argument("--gpus", default="h200")
    p.add_argument("--max-requests", type=int, default=600)
    p.add_argument("--qps", type=float, help="target request rate of the GPU count (default: the trace's)")
    p.add_argument("--precision", type=float, default=0.05)
    p.add_argument("--max-sims", type=int, default=10)
    p.add_argument("--out", default=str(REPO / "docs" / "bench" / "prefix_cache.json"))
    p.add_argument("--doc", default=str(REPO / "docs" / "prefix_cache.md"))
    args = p.parse_args(argv)
    base = load_scenario(args.scenario)
    rel = Path(args.scenario).resolve()
    rel = rel.relative_to(REPO) if rel.is_relative_to(REPO) else rel
    result = {"scenario": str(rel), "date": time.strftime("%Y-%m-%d"), "max_requests": args.max_requests,
              "command": "python benchmarks/prefix_cache.py " + " ".join(argv if argv is not None else sys.argv[1:]),
              "label": "simulated (shipped profiles)", "runs": {}}
    for name, on in (("on", True), ("off", False)):
        scenario = dataclasses.replace(base, deployment=dataclasses.replace(base.deployment, prefix_cache=on))
        result["runs"][name] = measure(scenario, args)
        print(f"prefix cache {name}: {result['runs'][name]}", flush=True)
    result["target_rps"] = result["runs"]["on"]["target_rps"]
    result["requests"] = result["runs"]["on"]["requests"]
    write_result(args.out, result)
    text = table(result)
    if args.doc:
        write_block(Path(args.doc), "prefix-cache-bench", text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
