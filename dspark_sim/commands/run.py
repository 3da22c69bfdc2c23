"""`dspark-sim run`: simulate a scenario file, print its summary, write its outputs (:mod:`dspark_sim.run`)."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from dspark_sim.config import check_int
from dspark_sim.limits import MAX_SEED
from dspark_sim.metrics.run_summary import RunSummary
from dspark_sim.provenance import provenance_line
from dspark_sim.run import run_scenario
from dspark_sim.scenario import load_scenario

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


def format_summary(s: RunSummary) -> str:
    """The human table printed after a run."""
    lines = [f"{s.name}: {s.model} on {s.num_gpus} x {s.gpu}, speculation={s.method}"]
    for label, keys, fmt in SUMMARY_ROWS:
        keys = keys if isinstance(keys, tuple) else (keys,)
        values = [getattr(s, k) for k in keys]
        if all(v is None for v in values):
            continue
        text = " / ".join("-" if v is None else fmt.format(v) for v in values)
        lines.append(f"  {label:<36} {text}")
    pc = s.prefix_cache
    if pc is not None:
        state = f"{pc.hit_rate:.1%} / {pc.block_hit_rate:.1%}" if pc.enabled else "off"
        lines.append(f"  {'prefix cache hit (tokens / blocks)':<36} {state}")
        lines.append(f"  {'prefill tokens computed / saved':<36} {pc.prefill_tokens_computed:,} / "
                     f"{pc.prefill_tokens_saved:,}")
    return "\n".join(lines)


def run(args) -> int:
    check_int(args.seed, "--seed", 0, MAX_SEED, optional=True)
    scenario = load_scenario(args.scenario)
    if args.seed is not None:
        scenario = scenario.with_seed(args.seed)
    if args.exact:
        scenario = replace(scenario, exact=True)
    out = Path(args.out) if args.out else Path("runs") / scenario.name
    summary, _ = run_scenario(scenario, out, plots=not args.no_plots, show_progress=not args.quiet)
    print(format_summary(summary))
    line = provenance_line([summary.provenance])
    if line:
        print(line)
    print(f"  wrote {out}/ (summary.json, requests.csv, steps.csv, provenance.json{', plots/' if not args.no_plots else ''}) "
          f"in {summary.sim_wall_s:.1f} s")
    return 0


def register(sub) -> None:
    p = sub.add_parser("run", help="simulate a scenario file (trace.yaml)")
    p.add_argument("scenario", help="scenario YAML")
    p.add_argument("--out", help="output directory (default runs/<name>)")
    p.add_argument("--seed", type=int, help="override the scenario's seed")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--exact", action="store_true",
                   help="one simulation event per engine step, no skip-ahead (slower; the same numbers)")
    p.set_defaults(func=run)
