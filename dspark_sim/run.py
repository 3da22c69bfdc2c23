"""Simulate a scenario and write its results atomically (the library behind ``dspark-sim run``)."""
from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path

from dspark_sim.metrics.outdir import atomic_dir
from dspark_sim.metrics.record import write_provenance
from dspark_sim.scenario import Scenario


def run_scenario(scenario: Scenario, out: Path | None, *, plots: bool = True, show_progress: bool = True):
    """Simulate and write ``summary.json``, ``requests.csv``, ``steps.csv``, ``provenance.json``,
    ``plots/`` into ``out``.

    Returns ``(summary, result)``, the summary a :class:`~dspark_sim.metrics.run_summary.RunSummary`
    with ``sim_wall_s`` set. With ``out=None`` nothing is written.
    """
    from dspark_sim.serving.simulator import simulate
    from dspark_sim.metrics.summary import summarize

    started = time.perf_counter()
    if out is None:
        result = simulate(scenario, None, _progress(scenario, show_progress))
        return replace(summarize(result), sim_wall_s=time.perf_counter() - started), result
    with atomic_dir(out) as tmp:
        result = simulate(scenario, tmp, _progress(scenario, show_progress))
        summary = summarize(result)
        write_provenance(tmp, summary.provenance)
        if plots:
            from dspark_sim.metrics.plots import plot_run

            plot_run(result, tmp / "plots")
        (tmp / "summary.json").write_text(json.dumps(summary.to_json(), indent=2, sort_keys=True) + "\n")
    return replace(summary, sim_wall_s=time.perf_counter() - started), result


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
