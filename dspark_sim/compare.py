"""`dspark-sim compare`: speculation methods side by side over a concurrency sweep.

Each point replays the scenario's request lengths as a closed loop at a fixed
concurrency (every request arrives at once, ``max_running_requests`` = C, as
``vllm bench serve --max-concurrency C``), the setting of the paper's Fig. 7
frontier and the SGLang blog's batch 1-256 figure.
"""
from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

from dspark_sim.errors import InputError
from dspark_sim.metrics.outdir import atomic_dir
from dspark_sim.scenario import Scenario, Speculation, load_scenario

DEFAULT_METHODS = "none,mtp1,mtp3,dspark"
DEFAULT_CONCURRENCY = "1,8,32,64,128,256"
METHOD_HELP = ("none | mtpK (MTP chain verifying K drafts) | eagle3-K | dflash-K (block drafter, static K) | "
               "dspark (the scenario's DSpark settings or the defaults) | dspark-full (DSpark drafter, "
               "whole block verified) | threshold-T (DSpark drafter, survival >= T)")


def method_speculation(name: str, base: Speculation, file=None) -> Speculation:
    """The :class:`Speculation` a method name in ``--methods`` stands for."""
    acc = base.acceptance
    dspark = base if base.method == "dspark" else Speculation(method="dspark", acceptance=acc)
    if name == "none":
        return replace(base, method="none")
    if name == "dspark":
        return replace(dspark, acceptance=replace(acc, drafter="dspark"))
    if name == "dspark-full":
        return replace(dspark, method="static", drafter="dspark", acceptance=replace(acc, drafter="dspark"))
    m = re.fullmatch(r"(mtp|eagle3-|dflash-)(\d+)", name)
    if m:
        drafter, k = m.group(1).rstrip("-"), int(m.group(2))
        if not 1 <= k <= 16:
            raise InputError(file, "--methods", name, "draft length must be 1..16")
        return Speculation(method="static", drafter=drafter, block_size=k,
                           acceptance=replace(acc, drafter=drafter))
    m = re.fullmatch(r"threshold-([0-9.]+)", name)
    if m and 0.0 <= float(m.group(1)) <= 1.0:
        return replace(dspark, method="threshold", threshold=float(m.group(1)),
                       acceptance=replace(acc, drafter="dspark"))
    raise InputError(file, "--methods", name, f"unknown method; expected {METHOD_HELP}")


def closed_loop(scenario: Scenario, concurrency: int, num_requests: int | None = None) -> Scenario:
    """The scenario at a fixed concurrency: all requests at t=0, at most C running."""
    n = num_requests or max(64, 6 * concurrency)
    wl = scenario.workload
    wl = replace(wl, time_scale=1e12, max_requests=n)
    if wl.synthetic is not None:
        wl = replace(wl, synthetic=replace(wl.synthetic, num_requests=n, rate_per_s=1e9))
    dep = replace(scenario.deployment, max_running_requests=concurrency, replicas=1)
    return replace(scenario, workload=wl, deployment=dep)


def sweep(scenario: Scenario, methods: list[str], concurrency: list[int], *, num_requests=None,
          progress=None) -> list[dict]:
    """One row per (method, concurrency): throughput per GPU, tok/s/user, verify budget."""
    from dspark_sim.run import run_scenario

    rows = []
    for name in methods:
        spec = method_speculation(name, scenario.speculation, scenario.file)
        for c in concurrency:
            point = replace(closed_loop(scenario, c, num_requests), speculation=spec)
            summary, _ = run_scenario(point, None, show_progress=False)
            rows.append({"method": name, "concurrency": c,
                         "output_throughput_per_gpu": summary["output_throughput_per_gpu"],
                         "mean_tok_per_s_per_user": summary["mean_tok_per_s_per_user"],
                         "median_tpot_ms": summary["median_tpot_ms"],
                         "mean_accept_length": summary["mean_accept_length"],
                         "mean_verify_tokens_per_request": summary["mean_verify_tokens_per_request"],
                         "acceptance_rate": summary["acceptance_rate"],
                         "mean_decode_batch_size": summary["mean_decode_batch_size"]})
            if progress:
                progress(rows[-1])
    return rows


def format_table(rows: list[dict]) -> str:
    """Rows as an aligned text table, with the gain over the first method at each concurrency."""
    base = {r["concurrency"]: r["output_throughput_per_gpu"] for r in rows if r["method"] == rows[0]["method"]}
    head = f"{'method':<14}{'conc':>6}{'tok/s/GPU':>12}{'tok/s/user':>12}{'accept len':>12}{'verify/req':>12}{'vs ' + rows[0]['method']:>12}"
    lines = [head, "-" * len(head)]
    for r in rows:
        gain = r["output_throughput_per_gpu"] / base[r["concurrency"]] - 1 if base.get(r["concurrency"]) else 0.0
        lines.append(f"{r['method']:<14}{r['concurrency']:>6}{r['output_throughput_per_gpu']:>12.0f}"
                     f"{_f(r['mean_tok_per_s_per_user'], '.1f'):>12}{_f(r['mean_accept_length'], '.2f'):>12}"
                     f"{_f(r['mean_verify_tokens_per_request'], '.2f'):>12}{gain:>+12.1%}")
    return "\n".join(lines)


def _f(value, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def plot(rows: list[dict], title: str, out_dir: Path) -> list[Path]:
    """Frontier (throughput/GPU against tok/s/user) and verify budget against concurrency."""
    from dspark_sim.metrics.plots import _pyplot

    plt = _pyplot()
    methods = list(dict.fromkeys(r["method"] for r in rows))
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.4))
    for m in methods:
        pts = [r for r in rows if r["method"] == m]
        ax1.plot([p["mean_tok_per_s_per_user"] for p in pts], [p["output_throughput_per_gpu"] for p in pts],
                 marker="o", label=m)
        for p in pts:
            ax1.annotate(str(p["concurrency"]), (p["mean_tok_per_s_per_user"], p["output_throughput_per_gpu"]),
                         fontsize=7, alpha=0.7)
        ax2.plot([p["concurrency"] for p in pts], [p["mean_verify_tokens_per_request"] for p in pts],
                 marker="o", label=m)
    ax1.set_xlabel("tok/s per user")
    ax1.set_ylabel("output tok/s per GPU")
    ax1.set_title("throughput-interactivity frontier (labels: concurrency)")
    ax2.set_xlabel("concurrency")
    ax2.set_xscale("log", base=2)
    ax2.set_ylabel("verify tokens per request-step (anchor incl.)")
    ax2.set_title("verify budget per request")
    for ax in (ax1, ax2):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    path = out_dir / "frontier.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return [path]


def _ints(text: str, flag: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise InputError(None, flag, text, "expected comma-separated integers") from None
    if not values or min(values) < 1:
        raise InputError(None, flag, text, "expected positive integers")
    return values


def run(args) -> int:
    scenario = load_scenario(args.scenario)
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    for m in methods:
        method_speculation(m, scenario.speculation, "--methods")
    concurrency = _ints(args.concurrency, "--concurrency")
    out = Path(args.out) if args.out else Path("runs") / f"{scenario.name}-compare"
    from tqdm import tqdm

    bar = tqdm(total=len(methods) * len(concurrency), unit="point", disable=args.quiet, leave=False)
    rows = sweep(scenario, methods, concurrency, num_requests=args.requests,
                 progress=lambda r: (bar.update(1), bar.set_postfix_str(f"{r['method']}@{r['concurrency']}")))
    bar.close()
    with atomic_dir(out) as tmp:
        (tmp / "compare.json").write_text(json.dumps({"scenario": scenario.name, "rows": rows}, indent=2) + "\n")
        plot(rows, f"{scenario.model} on {scenario.gpu}: {scenario.name}", tmp)
    print(format_table(rows))
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
