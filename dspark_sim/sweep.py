"""Speculation methods side by side over a concurrency sweep (``dspark-sim compare``).

Each point replays the scenario's request lengths as a closed loop at a fixed
concurrency (every request arrives at once, ``max_running_requests`` = C, as
``vllm bench serve --max-concurrency C``), the setting of the paper's Fig. 7
frontier and the SGLang blog's batch 1-256 figure.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from dspark_sim.methods import method_speculation
from dspark_sim.metrics.plots import pyplot
from dspark_sim.provenance import basis, scenario_provenance
from dspark_sim.run import run_scenario
from dspark_sim.scenario import Scenario


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
    rows = []
    for name in methods:
        spec = method_speculation(name, scenario.speculation, scenario.file)
        for c in concurrency:
            point = replace(closed_loop(scenario, c, num_requests), speculation=spec)
            summary, _ = run_scenario(point, None, show_progress=False)
            rows.append({"method": name, "concurrency": c,
                         "output_throughput_per_gpu": summary.output_throughput_per_gpu,
                         "mean_tok_per_s_per_user": summary.mean_tok_per_s_per_user,
                         "median_tpot_ms": summary.median_tpot_ms,
                         "mean_accept_length": summary.mean_accept_length,
                         "mean_verify_tokens_per_request": summary.mean_verify_tokens_per_request,
                         "acceptance_rate": summary.acceptance_rate,
                         "mean_decode_batch_size": summary.mean_decode_batch_size,
                         "basis": basis(summary.provenance),
                         "acceptance": summary.provenance["acceptance"]["kind"]})
            if progress:
                progress(rows[-1])
    return rows


def provenance_by_method(scenario: Scenario, methods: list[str]) -> dict[str, dict]:
    """The provenance block (:mod:`dspark_sim.provenance`) of each method's runs in a sweep."""
    return {name: scenario_provenance(replace(scenario, speculation=method_speculation(
        name, scenario.speculation, scenario.file))) for name in methods}


def format_table(rows: list[dict]) -> str:
    """Rows as an aligned text table, with the gain over the first method at each concurrency, what
    each method's acceptance is (preset, calibrated, substituted) and its cost basis."""
    base = {r["concurrency"]: r["output_throughput_per_gpu"] for r in rows if r["method"] == rows[0]["method"]}
    head = (f"{'method':<14}{'conc':>6}{'tok/s/GPU':>12}{'tok/s/user':>12}{'accept len':>12}{'verify/req':>12}"
            f"{'vs ' + rows[0]['method']:>12}  {'acceptance':<12}cost basis")
    lines = [head, "-" * len(head)]
    for r in rows:
        gain = r["output_throughput_per_gpu"] / base[r["concurrency"]] - 1 if base.get(r["concurrency"]) else 0.0
        lines.append(f"{r['method']:<14}{r['concurrency']:>6}{r['output_throughput_per_gpu']:>12.0f}"
                     f"{_f(r['mean_tok_per_s_per_user'], '.1f'):>12}{_f(r['mean_accept_length'], '.2f'):>12}"
                     f"{_f(r['mean_verify_tokens_per_request'], '.2f'):>12}{gain:>+12.1%}  "
                     f"{r.get('acceptance', '-'):<12}{r.get('basis', '-')}")
    return "\n".join(lines)


def _f(value, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def plot(rows: list[dict], title: str, out_dir: Path) -> list[Path]:
    """Frontier (throughput/GPU against tok/s/user) and verify budget against concurrency."""
    plt = pyplot()
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
