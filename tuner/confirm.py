"""Choosing each study's winner without the winner's curse.

The best of hundreds of noisy trials is partly luck. So the ``FINALISTS``
best trials of each study are simulated again on ``confirm_seeds`` fresh
seeds, their metrics pooled with the search seeds (mean for objectives, worst
seed for SLOs), and the winner is the best finalist that still meets the SLO
on every seed; when none does, the next ``FINALISTS`` are confirmed (up to
``ROUNDS`` rounds), from the trials with more SLO slack than the fresh seeds took
from those that missed, and if none ever does the least-violating one is reported
as missing the SLO. For a Pareto study the finalists come from its front and
the winner is the front's knee: the largest throughput/GPU x tok/s/user.
"""
from __future__ import annotations

import contextlib
import multiprocessing
import statistics

import optuna
from optuna.trial import TrialState

from dspark_sim.tuner.objective import (THROUGHPUT, USER_SPEED, aggregate, feasible, pareto_front, seed_metrics,
                                        simulate, simulate_scenario, violation)
from dspark_sim.tuner.runner import Job, quiet
from dspark_sim.tuner.scenarios import configure, to_scenario

FINALISTS = 3
ROUNDS = 3


def knee(metrics: dict) -> float:
    """Where a Pareto study's winner sits: the largest throughput/GPU x tok/s/user."""
    return (metrics.get(THROUGHPUT) or 0.0) * (metrics.get(USER_SPEED) or 0.0)


def candidates(study: optuna.Study, job: Job) -> list[optuna.trial.FrozenTrial]:
    """Trials worth confirming, in the order to confirm them: feasible ones first, best first."""
    done = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    ok = [t for t in done if feasible(t.constraints)]
    if job.target.objective == "pareto":
        return sorted(pareto_front(ok or done), key=lambda t: knee(t.user_attrs["metrics"]), reverse=True)
    if ok:
        return sorted(ok, key=lambda t: t.values[0], reverse=True)
    return sorted(done, key=lambda t: violation(t.constraints))


def _resimulate(task: tuple) -> list[dict]:
    base, config, seeds = task
    return [seed_metrics(s) for s in simulate(configure(base, config), seeds)]


def _simulate_seed(task: tuple) -> dict:
    scenario, seed = task
    return seed_metrics(simulate_scenario(scenario, [seed])[0])


class Processes:
    """Where the confirmation's simulations run: ``workers`` processes, started at the first map of
    several tasks and kept for the maps after it (the rounds of finalists, then the winner's
    interval), or this process for one worker. Tasks go out one at a time, so a worker that ends
    early takes the next."""

    def __init__(self, workers: int):
        self.workers, self._pool = workers, None

    def map(self, fn, tasks: list[tuple]) -> list:
        """``fn`` of every task, in order."""
        if self.workers > 1 and len(tasks) > 1:
            if self._pool is None:
                self._pool = multiprocessing.get_context("spawn").Pool(self.workers, initializer=quiet)
            return self._pool.map(fn, tasks, chunksize=1)
        return [fn(task) for task in tasks]

    def __enter__(self) -> Processes:
        return self

    def __exit__(self, *exc) -> None:
        if self._pool is not None:
            self._pool.terminate()
            self._pool.join()
            self._pool = None


def _processes(workers: int | Processes):
    """A context giving the :class:`Processes` passed (the caller's to stop), or new ones stopped at its end."""
    return contextlib.nullcontext(workers) if isinstance(workers, Processes) else Processes(workers)


def confirm(jobs: list[Job], confirm_seeds: list[int], workers: int | Processes = 1) -> dict[str, dict]:
    """Re-simulate each study's finalists; store and return ``{study: winner record}``.

    Finalists go in rounds of ``FINALISTS`` (at most ``ROUNDS``): a study whose
    round holds no trial that meets the SLO on every seed confirms its next ones.
    Every finalist's seed is a task of its own, so the workers share a round evenly.
    """
    with _processes(workers) as procs:
        return _confirm(jobs, list(confirm_seeds), procs)


def _confirm(jobs: list[Job], confirm_seeds: list[int], procs: Processes) -> dict[str, dict]:
    queue = {job.study: candidates(job.open(), job) for job in jobs}
    records: dict[str, list[dict]] = {job.study: [] for job in jobs}
    lost: dict[str, float] = {job.study: 0.0 for job in jobs}  # SLO slack confirmation took, at most
    for _ in range(ROUNDS):
        plan = [(job, t) for job in jobs if not any(x["feasible"] for x in records[job.study])
                for t in finalists(queue[job.study], lost[job.study])]
        if not plan:
            break
        runs = procs.map(_resimulate, [(job.base, t.user_attrs["config"], [seed])
                                       for job, t in plan for seed in confirm_seeds])
        per = len(confirm_seeds)
        for i, (job, trial) in enumerate(plan):
            extra = [run[0] for run in runs[i * per:(i + 1) * per]]
            record = _record(job, trial, extra)
            records[job.study].append(record)
            queue[job.study].remove(trial)
            searched, confirmed = margin(trial.constraints), margin(record["constraints"])
            if searched is not None and confirmed is not None:
                lost[job.study] = max(lost[job.study], searched - confirmed)
    winners = {}
    for job in jobs:
        if records[job.study]:
            winners[job.study] = pick(records[job.study], job)
            job.open().set_user_attr("winner", winners[job.study])
    return winners


def finalists(queue: list[optuna.trial.FrozenTrial], lost: float) -> list[optuna.trial.FrozenTrial]:
    """The next ``FINALISTS`` of the candidates left, in their order: after a round whose finalists
    all missed the SLO on the fresh seeds, only trials whose search margin exceeds the slack those
    seeds took from them (``lost``), so a capacity-bound study whose best trials crowd the SLO's
    edge does not spend its rounds on their neighbours; where none has that much, the roomiest."""
    if lost <= 0.0:
        return queue[:FINALISTS]
    roomy = [t for t in queue if (margin(t.constraints) or 0.0) > lost]
    return roomy[:FINALISTS] or sorted(queue, key=lambda t: margin(t.constraints) or 0.0, reverse=True)[:FINALISTS]


def _record(job: Job, trial: optuna.trial.FrozenTrial, extra: list[dict]) -> dict:
    """A finalist's metrics over search and confirmation seeds together (mean, and worst seed)."""
    summaries = list(trial.user_attrs["per_seed"]) + extra
    mean, worst = aggregate(summaries)
    constraints = job.target.violations(worst)
    per_seed = [s.get(job.target.value_names[0]) or 0.0 for s in summaries]
    return {"study": job.study, "trial": trial.number, "method": job.method, "config": trial.user_attrs["config"],
            "seeds": [s["seed"] for s in summaries], "mean": mean, "worst": worst,
            "spread": statistics.stdev(per_seed) if len(per_seed) > 1 else 0.0,
            "values": [mean[name] or 0.0 for name in job.target.value_names], "constraints": constraints,
            "feasible": feasible(constraints), "search_values": list(trial.values)}


def pick(records: list[dict], job: Job) -> dict:
    """The best confirmed record (feasible on every seed first; least violation otherwise): a
    study's winner among its finalists, or a method's among its repeats' winners."""
    ok = [r for r in records if r["feasible"]]
    if not ok:
        return min(records, key=lambda r: violation(r["constraints"]))
    if job.target.objective == "pareto":
        return max(ok, key=lambda r: knee(r["mean"]))
    return max(ok, key=lambda r: r["values"][0])


def margin(constraints: dict) -> float | None:
    """The SLO margin: the smallest slack over the bounds, relative to each (< 0: missed)."""
    return -max(constraints.values()) if constraints else None


def winner_interval(job: Job, record: dict, seeds: list[int], workers: int | Processes = 1) -> dict | None:
    """The winner's objective and SLO margin at the corners of its measured error sources
    (:mod:`dspark_sim.intervals`), each on ``seeds`` (every corner and seed on one of ``workers``
    processes), and the envelopes with the confirmed figures; None for a roofline cost model."""
    from dspark_sim.intervals import corners, error_sources

    scenario = to_scenario(configure(job.base, record["config"]))
    src = error_sources(scenario)
    if src is None:
        return None
    out = {"sources": src.to_dict()}
    values, margins = [record["values"][0]], [margin(record["constraints"])]
    with _processes(workers) as procs:
        runs = procs.map(_simulate_seed, [(corner, seed) for corner in corners(scenario, src) for seed in seeds])
    for i, name in enumerate(("pessimistic", "optimistic")):
        mean, worst = aggregate(runs[i * len(seeds):(i + 1) * len(seeds)])
        found = job.target.violations(worst)
        out[name] = {"value": mean[job.target.value_names[0]] or 0.0, "margin": margin(found),
                     "feasible": feasible(found)}
        values.append(out[name]["value"])
        margins.append(out[name]["margin"])
    out["value_interval"] = [min(values), max(values)]
    out["margin_interval"] = None if None in margins else [min(margins), max(margins)]
    return out
