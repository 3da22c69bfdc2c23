"""PNG plots of a run: latency CDFs, batch size and throughput over time."""
from __future__ import annotations

from pathlib import Path

import numpy as np


def pyplot():
    """matplotlib.pyplot on the Agg backend: plots go to files, no display needed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_run(result, out_dir: Path, max_points: int = 4000) -> list[Path]:
    """Write ``latency_cdf.png`` and ``timeline.png`` into ``out_dir``; return their paths."""
    plt = pyplot()
    out_dir.mkdir(parents=True, exist_ok=True)
    req, steps = result.collector.requests, result.collector.steps
    paths = []

    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    for ax, key, label in zip(axes, ("ttft_ms", "tpot_ms", "e2el_ms"), ("TTFT", "TPOT", "E2E latency")):
        values = getattr(req, key)
        v = np.sort(values[~np.isnan(values)])
        if v.size:
            ax.plot(v, np.arange(1, v.size + 1) / v.size)
        ax.set_xlabel(f"{label} (ms)")
        ax.set_ylabel("fraction of requests")
        ax.set_xscale("log")
        ax.grid(alpha=0.3)
        slo = getattr(result.scenario.slo, key if key != "e2el_ms" else "", None)
        if slo:
            ax.axvline(slo, color="red", ls="--", lw=1, label="SLO")
            ax.legend()
    fig.suptitle(f"{result.scenario.name}: latency CDFs")
    fig.tight_layout()
    paths.append(out_dir / "latency_cdf.png")
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)

    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(10, 5.5), sharex=True)
    t = steps.start_s + steps.step_s
    if t.size:
        stride = max(1, t.size // max_points)
        ax1.plot(t[::stride], steps.running[::stride], lw=0.8)
        edges = np.linspace(0, t.max(), min(200, max(2, t.size // 10)) + 1)
        tokens, _ = np.histogram(t, bins=edges, weights=steps.emitted)
        ax2.plot(edges[1:], tokens / np.diff(edges), lw=0.9)
    ax1.set_ylabel("running requests")
    ax2.set_ylabel("output tok/s")
    ax2.set_xlabel("simulated time (s)")
    for ax in (ax1, ax2):
        ax.grid(alpha=0.3)
    fig.suptitle(f"{result.scenario.name}: batch size and throughput")
    fig.tight_layout()
    paths.append(out_dir / "timeline.png")
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)
    return paths
