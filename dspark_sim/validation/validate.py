"""The simulator against a real engine run of the same trace (the library behind ``dspark-sim validate``).

Both sides are reduced from the same files, the run record (``requests.csv`` and
``steps.csv``, :mod:`dspark_sim.metrics.record`), by the same summary
(:func:`dspark_sim.metrics.summary.record_metrics`), so every metric is computed the same
way on both.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from dspark_sim.metrics.outdir import atomic_dir
from dspark_sim.metrics.plots import pyplot
from dspark_sim.metrics.record import read_record, read_requests
from dspark_sim.metrics.run_summary import RecordMetrics
from dspark_sim.metrics.summary import RECORD_REQUESTS, RECORD_STEPS, record_metrics
from dspark_sim.run import run_scenario
from dspark_sim.scenario import load_scenario


def run_metrics(run_dir: Path) -> RecordMetrics:
    """:func:`record_metrics` of the run record in ``run_dir``."""
    return record_metrics(read_record(run_dir, RECORD_REQUESTS, RECORD_STEPS))


def compare_metrics(sim: RecordMetrics, real: RecordMetrics) -> list[dict]:
    """Relative error (sim - real) / real of every compared metric, a row each (validate.json's)."""
    rows = []
    sims = sim.compared()
    for key, r in real.compared().items():
        s = sims[key]
        err = (s - r) / r if r and not math.isnan(r) and not math.isnan(s) else math.nan
        rows.append({"metric": key, "real": r, "sim": s, "rel_error": err})
    return rows


def format_rows(rows: list[dict]) -> str:
    lines = [f"{'metric':<30}{'real':>12}{'sim':>12}{'error':>10}", "-" * 64]
    for r in rows:
        lines.append(f"{r['metric']:<30}{r['real']:>12.3f}{r['sim']:>12.3f}{r['rel_error']:>+10.1%}")
    return "\n".join(lines)


def plot(sim_dir: Path, real_dir: Path, out: Path) -> None:
    """Per-request scatter (sim against real) and latency CDFs of both runs."""
    plt = pyplot()
    cols = ("request_id", "ttft_ms", "tpot_ms", "e2el_ms")
    sim = read_requests(sim_dir / "requests.csv", cols)
    real = read_requests(real_dir / "requests.csv", cols)
    fig, axes = plt.subplots(2, 3, figsize=(13, 7.5))
    common, si, ri = np.intersect1d(sim.request_id, real.request_id, return_indices=True)
    for j, key in enumerate(cols[1:]):
        ax = axes[0, j]
        x, y = getattr(real, key)[ri], getattr(sim, key)[si]
        ax.scatter(x, y, s=4, alpha=0.5)
        hi = np.nanmax(np.concatenate([x, y, [1e-9]]))
        ax.plot([0, hi], [0, hi], color="grey", lw=0.8)
        ax.set_xlabel(f"real {key}")
        ax.set_ylabel(f"simulated {key}")
        ax = axes[1, j]
        for label, data in (("real", getattr(real, key)), ("sim", getattr(sim, key))):
            v = np.sort(data[~np.isnan(data)])
            if v.size:
                ax.plot(v, np.arange(1, v.size + 1) / v.size, label=label)
        ax.set_xlabel(key)
        ax.set_ylabel("CDF")
        ax.legend()
    fig.suptitle(f"simulated against real: {common.size} requests in both")
    fig.tight_layout()
    fig.savefig(out / "validate.png", dpi=110)
    plt.close(fig)


def validate(scenario_path: Path, real_dir: Path, out: Path) -> list[dict]:
    """Simulate the scenario into ``out/sim`` and compare it with ``real_dir``."""
    real = run_metrics(real_dir)  # fail on a bad real run before simulating
    scenario = load_scenario(scenario_path)
    with atomic_dir(out) as tmp:
        run_scenario(scenario, tmp / "sim", plots=False, show_progress=False)
        rows = compare_metrics(run_metrics(tmp / "sim"), real)
        plot(tmp / "sim", real_dir, tmp)
        (tmp / "validate.json").write_text(json.dumps({"scenario": str(scenario_path), "real": str(real_dir),
                                                       "rows": rows}, indent=2) + "\n")
    return rows
