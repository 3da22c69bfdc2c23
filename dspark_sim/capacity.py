"""`dspark-sim capacity`: how many GPUs of which kind serve this traffic within an SLO.

For each GPU kind and speculation method it finds the highest request rate one
replica sustains (:mod:`dspark_sim.capacity_search`), the fewest GPUs (replicas x
TP) that carry the target rate, and, given prices, the cost per million output
tokens. Writes ``capacity.json`` and ``capacity.png``; the rule is in docs/capacity.md.
"""
from __future__ import annotations

import json
import math
import warnings
from pathlib import Path

from dspark_sim.capacity_search import (RULES, TP_CHOICES, OnceWarnings, Plan, SloRule, offered_rate, plan,
                                        probe_scenario)
from dspark_sim.errors import InputError
from dspark_sim.metrics.outdir import atomic_dir
from dspark_sim.scenario import Scenario, load_scenario

DEFAULT_GPUS = "h100,h200,b200,b300"
DEFAULT_METHODS = "none,mtp3,dspark"
DEFAULT_MAX_REQUESTS = 2000


def cost_per_mtok(price_per_gpu_hour: float, gpus: int, output_tok_per_s: float) -> float:
    """Dollars per million output tokens of ``gpus`` GPUs producing ``output_tok_per_s`` together."""
    return price_per_gpu_hour * gpus / (3600.0 * output_tok_per_s) * 1e6


def plan_row(p: Plan, prices: dict[str, float]) -> dict:
    """The table/JSON row of a plan: best TP, per-replica rate, GPUs and cost at the target."""
    row = {"gpu": p.gpu, "method": p.method, "tp": None, "rate_per_replica_rps": 0.0, "replicas": None,
           "gpus": None, "output_tok_per_s_per_gpu": None, "p99_tpot_ms": None, "p99_ttft_ms": None,
           "attainment": None, "mean_accept_length": None, "cost_per_mtok": None,
           "cost_per_mtok_at_capacity": None, "note": _note(p)}
    if p.best is None:
        return row
    b = p.best.search.best
    target_tok_per_s = p.target_rps * b.mean_output_tokens
    row.update(tp=p.best.tp, rate_per_replica_rps=b.rate_rps, replicas=p.best.replicas, gpus=p.best.gpus,
               output_tok_per_s_per_gpu=b.output_tok_per_s / p.best.tp, p99_tpot_ms=b.p99_tpot_ms,
               p99_ttft_ms=b.p99_ttft_ms, attainment=b.attainment, mean_accept_length=b.mean_accept_length)
    price = prices.get(p.gpu)
    if price is not None and target_tok_per_s > 0 and b.output_tok_per_s > 0:
        row["cost_per_mtok"] = cost_per_mtok(price, p.best.gpus, target_tok_per_s)
        row["cost_per_mtok_at_capacity"] = cost_per_mtok(price, p.best.tp, b.output_tok_per_s)
    return row


def _note(p: Plan) -> str:
    if p.best is not None:
        return "" if p.best.search.first_fail else "rate not bounded: raise --max-requests"
    notes = sorted({c.note for c in p.candidates if c.note})
    return "; ".join(notes) or "no TP tried"


def recommend(rows: list[dict]) -> dict | None:
    """The cheapest row: lowest cost at the target when priced, else fewest GPUs; ties go to the most headroom."""
    def headroom(r: dict) -> float:
        return -r["replicas"] * r["rate_per_replica_rps"]

    feasible = [r for r in rows if r["gpus"] is not None]
    priced = [r for r in feasible if r["cost_per_mtok"] is not None]
    if priced:
        return min(priced, key=lambda r: (r["cost_per_mtok"], r["gpus"], headroom(r)))
    if feasible:
        return min(feasible, key=lambda r: (r["gpus"], headroom(r)))
    return None


# -- text, plot, json --------------------------------------------------------------
def format_table(rows: list[dict], header: str) -> str:
    """Rows as an aligned text table under ``header``."""
    head = (f"{'gpu':<6}{'method':<9}{'tp':>3}{'req/s/replica':>15}{'tok/s/GPU':>11}{'p99 TPOT':>10}"
            f"{'attain':>8}{'replicas':>10}{'GPUs':>6}{'$/Mtok':>9}  note")
    lines = [header, head, "-" * len(head)]
    for r in rows:
        lines.append(f"{r['gpu']:<6}{r['method']:<9}{_f(r['tp'], 'd'):>3}{r['rate_per_replica_rps']:>15.3f}"
                     f"{_f(r['output_tok_per_s_per_gpu'], '.0f'):>11}{_f(r['p99_tpot_ms'], '.1f'):>10}"
                     f"{_f(r['attainment'], '.1%'):>8}{_f(r['replicas'], 'd'):>10}{_f(r['gpus'], 'd'):>6}"
                     f"{_f(r['cost_per_mtok'], '.3f'):>9}  {r['note']}")
    return "\n".join(lines)


def _f(value, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def plot(rows: list[dict], title: str, target_rps: float, path: Path) -> None:
    """Sustained rate per GPU and GPUs for the target, grouped by GPU kind, one bar per method."""
    from dspark_sim.metrics.plots import _pyplot

    plt = _pyplot()
    gpus = list(dict.fromkeys(r["gpu"] for r in rows))
    methods = list(dict.fromkeys(r["method"] for r in rows))
    width = 0.8 / len(methods)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.4))
    for j, m in enumerate(methods):
        by_gpu = {r["gpu"]: r for r in rows if r["method"] == m}
        xs = [i + (j - (len(methods) - 1) / 2) * width for i in range(len(gpus))]
        found = [by_gpu.get(g) for g in gpus]
        per_gpu = [r["rate_per_replica_rps"] / r["tp"] if r and r["tp"] else 0.0 for r in found]
        need = [r["gpus"] if r and r["gpus"] else 0 for r in found]
        _labelled(ax1, ax1.bar(xs, per_gpu, width, label=m), [f"TP{r['tp']}" if r and r["tp"] else "" for r in found])
        _labelled(ax2, ax2.bar(xs, need, width, label=m),
                  [f"${r['cost_per_mtok']:.2f}" if r and r["cost_per_mtok"] is not None else "" for r in found])
    for ax, label in ((ax1, "sustained req/s per GPU (one replica / TP; labels: TP)"),
                      (ax2, f"GPUs for {target_rps:.3g} req/s (labels: $ per M output tokens)")):
        ax.set_xticks(range(len(gpus)), gpus)
        ax.set_title(label, fontsize=10)
        ax.grid(axis="y", alpha=0.3)
        ax.legend(fontsize=8)
    ax2.yaxis.get_major_locator().set_params(integer=True)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _labelled(ax, bars, labels: list[str]) -> None:
    for bar, text in zip(bars, labels):
        if text:
            ax.annotate(text, (bar.get_x() + bar.get_width() / 2, bar.get_height()), ha="center", va="bottom",
                        fontsize=6.5)


# -- arguments --------------------------------------------------------------------
def _names(text: str, flag: str) -> list[str]:
    names = list(dict.fromkeys(x.strip().lower() for x in text.split(",") if x.strip()))
    if not names:
        raise InputError(None, flag, text, "expected a comma-separated list")
    return names


def _gpus(text: str) -> list[str]:
    from dspark_sim.catalog import get_gpu

    names = _names(text, "--gpus")
    for name in names:
        get_gpu(name, key="--gpus")
    return names


def _prices(text: str | None) -> dict[str, float]:
    """``h200=3.5,b200=5`` as {gpu: dollars per GPU-hour}."""
    from dspark_sim.catalog import get_gpu

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
        get_gpu(name.strip(), key="--price-per-gpu-hour")
        prices[name.strip().lower()] = price
    return prices


def _tps(text: str) -> tuple[int, ...]:
    try:
        values = sorted({int(x) for x in text.split(",") if x.strip()})
    except ValueError:
        values = []
    if not values or values[0] < 1 or values[-1] > 64:
        raise InputError(None, "--tp", text, "expected comma-separated sizes in 1..64, e.g. 1,2,4,8")
    return tuple(values)


def _positive(value, flag: str, *, integer: bool = False):
    if value is None:
        return None
    if not (0 < value < math.inf) or (integer and value != int(value)):
        raise InputError(None, flag, value, "must be a positive " + ("integer" if integer else "number"))
    return value


def settings(args, scenario: Scenario) -> dict:
    """Validated settings from the command line, falling back to the scenario's SLO."""
    from dspark_sim.compare import method_speculation

    tpot = args.slo_tpot_ms if args.slo_tpot_ms is not None else scenario.slo.tpot_ms
    ttft = args.slo_ttft_ms if args.slo_ttft_ms is not None else scenario.slo.ttft_ms
    if tpot is None:
        raise InputError(scenario.file, "slo.tpot_ms", None, "no TPOT SLO: pass --slo-tpot-ms")
    methods = _names(args.methods, "--methods")
    for m in methods:
        method_speculation(m, scenario.speculation, "--methods")
    return {"rule": SloRule(tpot, ttft, args.attainment, args.rule, args.max_queue_ms),
            "gpus": _gpus(args.gpus), "methods": methods, "prices": _prices(args.price_per_gpu_hour),
            "tps": _tps(args.tp), "qps": _positive(args.qps, "--qps"),
            "max_requests": _positive(args.max_requests, "--max-requests", integer=True),
            "precision": _positive(args.precision, "--precision"),
            "max_sims": _positive(args.max_sims, "--max-sims", integer=True),
            "jobs": _positive(args.jobs, "--jobs", integer=True)}


# -- command ------------------------------------------------------------------------
def capacity(scenario: Scenario, cfg: dict, progress=None, once: OnceWarnings | None = None) -> dict:
    """Plans for every (GPU, method); returns what ``capacity.json`` holds."""
    once = once or OnceWarnings()
    target = cfg["qps"] or offered_rate(scenario)
    base_rate = offered_rate(probe_scenario(scenario, 1.0, max_requests=cfg["max_requests"]))
    plans = _plan_all(scenario, cfg, target, base_rate, progress, once)
    rows = [plan_row(p, cfg["prices"]) for p in plans]
    return {"scenario": scenario.name, "model": scenario.model, "target_rps": target,
            "target_source": "--qps" if cfg["qps"] else "scenario arrival rate",
            "search_rate_rps_at_x1": base_rate, "rule": cfg["rule"].describe(),
            "slo": {"tpot_ms": cfg["rule"].tpot_ms, "ttft_ms": cfg["rule"].ttft_ms,
                    "max_queue_ms": cfg["rule"].max_queue_ms, "attainment": cfg["rule"].attainment,
                    "rule": cfg["rule"].rule},
            "max_requests": cfg["max_requests"], "precision": cfg["precision"], "max_sims": cfg["max_sims"],
            "prices_per_gpu_hour": cfg["prices"], "rows": rows, "recommendation": recommend(rows),
            "plans": [p.to_dict() for p in plans]}


def _plan_all(scenario: Scenario, cfg: dict, target: float, base_rate: float, progress, once) -> list[Plan]:
    """One plan per (GPU, method), in that order; ``cfg["jobs"]`` worker processes when > 1.

    Plans are independent and seeded, so the answer does not depend on ``jobs``.
    """
    pairs = [(gpu, method) for gpu in cfg["gpus"] for method in cfg["methods"]]
    args = {"max_requests": cfg["max_requests"], "tp_choices": cfg["tps"], "precision": cfg["precision"],
            "max_sims": cfg["max_sims"]}
    plans = []
    if cfg.get("jobs", 1) <= 1 or len(pairs) == 1:
        for gpu, method in pairs:
            on_probe = (lambda tp, p, g=gpu, m=method: progress(g, m, tp, p)) if progress else None
            plans.append(plan(scenario, gpu, method, cfg["rule"], target, base_rate, on_probe=on_probe, once=once,
                              **args))
            if progress:
                progress(gpu, method, None, None)
        return plans
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(min(cfg["jobs"], len(pairs))) as pool:
        futures = [pool.submit(_plan_quietly, scenario, gpu, method, cfg["rule"], target, base_rate, args)
                   for gpu, method in pairs]
        for (gpu, method), future in zip(pairs, futures):
            p, caught = future.result()
            once.replay(warnings.WarningMessage(text, category, "", 0) for text, category in caught)
            plans.append(p)
            if progress:
                progress(gpu, method, None, None)
    return plans


def _plan_quietly(scenario, gpu, method, rule, target, base_rate, args) -> tuple[Plan, list]:
    """:func:`plan` in a worker process; its warnings come back to the parent as (text, category)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        p = plan(scenario, gpu, method, rule, target, base_rate, **args)
    return p, [(str(w.message), w.category) for w in caught]


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
    out = Path(args.out) if args.out else Path("runs") / f"{scenario.name}-capacity"
    bar = _progress_bar(len(cfg["gpus"]) * len(cfg["methods"]), args.quiet)
    try:
        report = capacity(scenario, cfg, bar, OnceWarnings(bar.quiet_writer))
    finally:
        bar.close()
    header = (f"{scenario.name}: {scenario.model}, target {report['target_rps']:.3f} req/s "
              f"({report['target_source']}); sustained = {report['rule']}")
    with atomic_dir(out) as tmp:
        (tmp / "capacity.json").write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")
        if not args.no_plots:
            plot(report["rows"], f"{scenario.model}: {scenario.name}", report["target_rps"], tmp / "capacity.png")
    print(format_table(report["rows"], header))
    best = report["recommendation"]
    if best:
        cost = f", ${best['cost_per_mtok']:.3f}/M output tokens" if best["cost_per_mtok"] is not None else ""
        print(f"cheapest: {best['gpus']} x {best['gpu']} ({best['replicas']} replica(s) of TP {best['tp']}) "
              f"with {best['method']}{cost}")
    else:
        print("no GPU kind meets the SLO at any rate tried")
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
