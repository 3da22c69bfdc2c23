"""`dspark-sim capacity`: how many GPUs of which kind serve this traffic within an SLO.

For each GPU kind and speculation method it finds the highest request rate one replica
sustains, the fewest GPUs (replicas x TP) that carry the target rate, and, given prices,
the cost per million output tokens (:mod:`dspark_sim.capacity`). Writes ``capacity.json``
and ``capacity.png``; the rule is in docs/capacity.md.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

from dspark_sim.capacity.plan import DEFAULT_MAX_REQUESTS, FLAGS, TP_CHOICES, CapacitySettings, capacity
from dspark_sim.capacity.report import answer_text, plot
from dspark_sim.capacity.search import OnceWarnings
from dspark_sim.config import build
from dspark_sim.errors import InputError
from dspark_sim.methods import method_speculation
from dspark_sim.metrics.outdir import atomic_dir, check_out
from dspark_sim.scenario import Scenario, load_scenario
from dspark_sim.slo import RULES, Slo

DEFAULT_GPUS = "h100,h200,b200,b300"
DEFAULT_METHODS = "none,mtp3,dspark"


def _names(text: str, flag: str) -> tuple[str, ...]:
    names = tuple(dict.fromkeys(x.strip().lower() for x in text.split(",") if x.strip()))
    if not names:
        raise InputError(None, flag, text, "expected a comma-separated list")
    return names


def _prices(text: str | None) -> tuple[tuple[str, float], ...]:
    """``h200=3.5,b200=5`` as (gpu, dollars per GPU-hour) pairs."""
    prices: dict[str, float] = {}
    for item in (text or "").split(","):
        if not item.strip():
            continue
        name, sep, value = item.partition("=")
        try:
            price = float(value) if sep else math.nan
        except ValueError:
            price = math.nan
        if not (math.isfinite(price) and price > 0):
            raise InputError(None, "--price-per-gpu-hour", item.strip(), "expected GPU=dollars, e.g. h200=3.5")
        prices[name.strip().lower()] = price
    return tuple(prices.items())


def _tps(text: str) -> tuple[int, ...]:
    try:
        return tuple(sorted({int(x) for x in text.split(",") if x.strip()}))
    except ValueError:
        raise InputError(None, "--tp", text, "expected comma-separated sizes in 1..64, e.g. 1,2,4,8") from None


def settings(args, scenario: Scenario) -> CapacitySettings:
    """Validated settings from the command line, falling back to the scenario's SLO."""
    tpot = args.slo_tpot_ms if args.slo_tpot_ms is not None else scenario.slo.tpot_ms
    ttft = args.slo_ttft_ms if args.slo_ttft_ms is not None else scenario.slo.ttft_ms
    if tpot is None:
        raise InputError(scenario.file, "slo.tpot_ms", None, "no TPOT SLO: pass --slo-tpot-ms")
    slo = build(Slo, {"tpot_ms": tpot, "ttft_ms": ttft, "attainment": args.attainment, "rule": args.rule,
                      "max_queue_ms": args.max_queue_ms}, None, None, FLAGS)
    methods = _names(args.methods, "--methods")
    for m in methods:
        method_speculation(m, scenario.speculation, "--methods")
    return build(CapacitySettings, {
        "slo": slo, "gpus": _names(args.gpus, "--gpus"), "methods": methods,
        "prices": _prices(args.price_per_gpu_hour), "tps": _tps(args.tp), "qps": args.qps,
        "max_requests": args.max_requests, "precision": args.precision, "max_sims": args.max_sims,
        "jobs": args.jobs}, None, None, FLAGS)


def _progress_bar(total: int, quiet: bool):
    from tqdm import tqdm

    bar = tqdm(total=total, unit="plan", disable=quiet, leave=False, desc="capacity", mininterval=0.2)
    sims = [0]

    def update(gpu, method, tp, probe) -> None:
        if probe is None:
            bar.update(1)
            return
        sims[0] += 1
        verdict = "ok" if probe.passed else "miss"
        bar.set_postfix_str(f"{gpu}/{method} tp{tp} x{probe.multiplier:.3g} {probe.rate_rps:.3g} req/s "
                            f"{verdict} ({probe.attainment:.0%}) sims={sims[0]}")

    update.close = bar.close
    update.quiet_writer = bar.external_write_mode
    return update


def run(args) -> int:
    scenario = load_scenario(args.scenario)
    cfg = settings(args, scenario)
    out = check_out(Path(args.out) if args.out else Path("runs") / f"{scenario.name}-capacity")
    bar = _progress_bar(len(cfg.gpus) * len(cfg.methods), args.quiet)
    try:
        report = capacity(scenario, cfg, bar, OnceWarnings(bar.quiet_writer))
    finally:
        bar.close()
    with atomic_dir(out) as tmp:
        (tmp / "capacity.json").write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")
        if not args.no_plots:
            plot(report["rows"], f"{scenario.model}: {scenario.name}", report["target_rps"], tmp / "capacity.png")
    print(answer_text(report))
    print(f"wrote {out}/capacity.json{'' if args.no_plots else ' and capacity.png'}")
    return 0


def register(sub) -> None:
    p = sub.add_parser("capacity", help="fewest GPUs of each kind that serve the traffic within an SLO")
    p.add_argument("scenario", help="scenario YAML")
    p.add_argument("--slo-tpot-ms", type=float, help="TPOT bound (default: the scenario's slo.tpot_ms)")
    p.add_argument("--slo-ttft-ms", type=float, help="TTFT bound (default: the scenario's slo.ttft_ms, if any)")
    p.add_argument("--attainment", type=float, default=0.9,
                   help="fraction of requests that must meet every bound (rule attainment; default 0.9)")
    p.add_argument("--rule", choices=RULES, default="attainment",
                   help="attainment: that fraction of requests meet all bounds; p99: each p99 within its bound")
    p.add_argument("--max-queue-ms", type=float, default=5000.0,
                   help="a request must start within this wait to count as good (default 5000)")
    p.add_argument("--gpus", default=DEFAULT_GPUS, help=f"GPU kinds (default {DEFAULT_GPUS})")
    p.add_argument("--methods", default=DEFAULT_METHODS,
                   help=f"speculation methods, named as in `compare --methods` (default {DEFAULT_METHODS})")
    p.add_argument("--tp", default=",".join(map(str, TP_CHOICES)), help="tensor-parallel sizes to consider")
    p.add_argument("--qps", type=float, help="target request rate (default: the scenario's arrival rate)")
    p.add_argument("--price-per-gpu-hour", help="dollars per GPU-hour, e.g. h200=3.5,b200=5")
    p.add_argument("--max-requests", type=int, default=DEFAULT_MAX_REQUESTS,
                   help=f"requests per simulation (default {DEFAULT_MAX_REQUESTS})")
    p.add_argument("--precision", type=float, default=0.02,
                   help="stop when the first failing rate is within this fraction of the last passing one")
    p.add_argument("--max-sims", type=int, default=24, help="simulations per search at most (default 24)")
    p.add_argument("--jobs", type=int, default=1,
                   help="worker processes, one (GPU, method) plan each (default 1; the answer does not change)")
    p.add_argument("--out", help="output directory (default runs/<name>-capacity)")
    p.add_argument("--no-plots", action="store_true")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=run)
