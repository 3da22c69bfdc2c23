"""`dspark-sim run`: simulate a scenario and write its results atomically."""
from __future__ import annotations

import json
import time
from pathlib import Path

from dspark_sim.metrics.outdir import atomic_dir
from dspark_sim.scenario import Scenario, load_scenario


def run_scenario(scenario: Scenario, out: Path | None, *, plots: bool = True, show_progress: bool = True):
    """Simulate and write ``summary.json``, ``requests.csv``, ``steps.csv``, ``plots/`` into ``out``.

    Returns ``(summary, result)``. With ``out=None`` nothing is written.
    """
    from dspark_sim.engine.simulator import simulate
    from dspark_sim.metrics.summary import summarize

    started = time.perf_counter()
    if out is None:
        result = simulate(scenario, None, _progress(scenario, show_progress))
        summary = summarize(result)
        summary["sim_wall_s"] = time.perf_counter() - started
        return summary, result
    with atomic_dir(out) as tmp:
        result = simulate(scenario, tmp, _progress(scenario, show_progress))
        summary = summarize(result)
        if plots:
            from dspark_sim.metrics.plots import plot_run

            plot_run(result, tmp / "plots")
        (tmp / "summary.json").write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
    summary["sim_wall_s"] = time.perf_counter() - started
    return summary, result


def _progress(scenario: Scenario, enabled: bool):
    """A tqdm bar over arrived requests, shown only for runs longer than ~2 s."""
    if not enabled:
        return None
    from tqdm import tqdm

    total = scenario.workload.max_requests
    if scenario.workload.synthetic is not None:
        total = scenario.workload.synthetic.num_requests
    bar = tqdm(total=total, unit="req", delay=2.0, mininterval=0.5, leave=False, desc="simulating")
    seen = [0]

    def update(arrived: int, now_s: float) -> None:
        bar.update(arrived - seen[0])
        seen[0] = arrived
        bar.set_postfix_str(f"t={now_s:,.0f}s", refresh=False)

    update.close = bar.close
    return update


SUMMARY_ROWS = (
    ("completed requests", "completed", "{:d}"),
    ("duration (s)", "duration_s", "{:.1f}"),
    ("request throughput (req/s)", "request_throughput", "{:.2f}"),
    ("output throughput (tok/s)", "output_throughput", "{:.0f}"),
    ("output throughput per GPU (tok/s)", "output_throughput_per_gpu", "{:.0f}"),
    ("mean tok/s per user", "mean_tok_per_s_per_user", "{:.1f}"),
    ("TTFT mean / p50 / p99 (ms)", ("mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms"), "{:.1f}"),
    ("TPOT mean / p50 / p99 (ms)", ("mean_tpot_ms", "median_tpot_ms", "p99_tpot_ms"), "{:.2f}"),
    ("ITL mean / p50 / p99 (ms)", ("mean_itl_ms", "median_itl_ms", "p99_itl_ms"), "{:.2f}"),
    ("E2E mean / p50 / p99 (ms)", ("mean_e2el_ms", "median_e2el_ms", "p99_e2el_ms"), "{:.0f}"),
    ("SLO attainment", "slo_attainment", "{:.1%}"),
    ("request goodput (req/s)", "request_goodput", "{:.2f}"),
    ("mean accept length", "mean_accept_length", "{:.2f}"),
    ("mean verify tokens / request-step", "mean_verify_tokens_per_request", "{:.2f}"),
    ("mean batch size", "mean_batch_size", "{:.1f}"),
    ("preemptions", "num_preemptions", "{:d}"),
    ("KV peak fraction", "kv_peak_fraction", "{:.1%}"),
)


def format_summary(s: dict) -> str:
    """The human table printed after a run."""
    lines = [f"{s['name']}: {s['model']} on {s['num_gpus']} x {s['gpu']}, speculation={s['method']}"]
    for label, keys, fmt in SUMMARY_ROWS:
        keys = keys if isinstance(keys, tuple) else (keys,)
        values = [s.get(k) for k in keys]
        if all(v is None for v in values):
            continue
        text = " / ".join("-" if v is None else fmt.format(v) for v in values)
        lines.append(f"  {label:<36} {text}")
    return "\n".join(lines)


def main_run(args) -> int:
    scenario = load_scenario(args.scenario)
    if args.seed is not None:
        scenario = scenario.with_seed(args.seed)
    out = Path(args.out) if args.out else Path("runs") / scenario.name
    summary, _ = run_scenario(scenario, out, plots=not args.no_plots, show_progress=not args.quiet)
    print(format_summary(summary))
    print(f"  wrote {out}/ (summary.json, requests.csv, steps.csv{', plots/' if not args.no_plots else ''}) "
          f"in {summary['sim_wall_s']:.1f} s")
    return 0
