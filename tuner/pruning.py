"""Multi-fidelity trials: score a configuration on growing slices of the trace, stop the ones
that cannot win.

With ``--slices 5,15`` a trial first simulates the requests that arrive in the trace's first
5 minutes (its first simulation seed, drained to the last request), then its first 15 minutes,
then the whole trace on that seed, and only then the trace on its other seeds. After each of
those rungs Optuna's :class:`~optuna.pruners.SuccessiveHalvingPruner` (reduction factor
``REDUCTION``) compares the trial with every trial of the study that reached the same rung,
and stops it unless it is in their best ``1 / REDUCTION``. A trial that passes every rung is
scored exactly as without pruning: the mean over its seeds of the whole trace.

What a rung compares must be comparable, and an objective on a slice of a trace is biased
(its queue has not built up over the hour): so a rung's value is the study's own objective
on that very slice (same requests, same seed) and is compared only with other trials' values
on the same slice, never with the whole trace's. The SLO enters the value as the final choice
ranks trials: every configuration that meets the SLO on the slice above every one that
misses it, the former by the objective, the latter by how far they miss
(:func:`rung_value`). A pruned trial keeps its rungs (``user_attrs["rungs"]``: slice, value,
SLO met, objective) and the rung it stopped at (``pruned_at``); ``report.md`` lists them.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import optuna

from dspark_sim.errors import InputError
from dspark_sim.tuner.objective import Target, assess, feasible, simulate, violation
from dspark_sim.tuner.scenarios import to_scenario

REDUCTION = 3  # a rung keeps the best third of the trials that reached it


@dataclass(frozen=True)
class Rung:
    """One stage of a trial: the trace up to ``until_s`` (None: all of it) on the first seed."""

    until_s: float | None

    @property
    def label(self) -> str:
        return "whole trace, first seed" if self.until_s is None else f"first {self.until_s / 60:g} min"


def rungs(slices: tuple[float, ...], seeds: int) -> list[Rung]:
    """The rungs of ``slices`` (minutes of arrivals): each slice, then, where more seeds follow,
    the whole trace on the first."""
    return [Rung(60.0 * m) for m in slices] + ([Rung(None)] if slices and seeds > 1 else [])


def step(rung: int) -> int:
    """The step a rung reports at: ``REDUCTION ** rung``, so that with ``min_resource`` 1 each report
    completes exactly one rung of the pruner."""
    return REDUCTION ** rung


def pruner(slices: tuple[float, ...]) -> optuna.pruners.BasePruner:
    """Successive halving over the rungs of ``slices``; no pruning without slices."""
    if not slices:
        return optuna.pruners.NopPruner()
    return optuna.pruners.SuccessiveHalvingPruner(min_resource=1, reduction_factor=REDUCTION,
                                                  min_early_stopping_rate=0)


def rung_value(result: dict) -> float:
    """What a rung compares: the objective where the SLO is met, else minus the summed relative
    violation (below every configuration that meets it; closer misses rank higher)."""
    if feasible(result["constraints"]):
        return float(result["values"][0])
    return -violation(result["constraints"])


def check_slices(slices: tuple[float, ...], objective: str, span_s: float) -> None:
    """Slices (minutes) that increase, each shorter than the trace's ``span_s``; one objective."""
    if not slices:
        return
    shown = ",".join(f"{m:g}" for m in slices)
    if objective == "pareto":
        raise InputError(None, "--slices", shown, "pruning ranks trials by one objective: not with --objective pareto")
    if any(not math.isfinite(m) or m <= 0 for m in slices) or list(slices) != sorted(set(slices)):
        raise InputError(None, "--slices", shown, "expected minutes > 0 in increasing order, e.g. 5,15")
    if 60.0 * slices[-1] >= span_s:
        raise InputError(None, "--slices", shown, f"the last slice is not shorter than the trace, whose requests "
                         f"arrive over {span_s / 60:.3g} min")


def span_s(raw: dict, seed: int) -> float:
    """When the last request of the scenario mapping ``raw`` arrives, on ``seed`` (the first at 0)."""
    last = 0.0
    for chunk in to_scenario(raw).workload.requests(seed):
        if len(chunk):
            last = float(chunk.arrival_s[-1])
    return last


def parse_slices(text: str | None) -> tuple[float, ...]:
    """``--slices 5,15`` as minutes, () for none."""
    if not text:
        return ()
    try:
        return tuple(float(part) for part in text.split(","))
    except ValueError:
        raise InputError(None, "--slices", text, "expected minutes separated by commas, e.g. 5,15") from None


def slice_of(raw: dict, until_s: float | None) -> dict:
    """The trial scenario ``raw`` cut to the requests arriving by ``until_s`` (None: whole)."""
    if until_s is None:
        return raw
    workload = dict(raw["workload"])
    own = workload.get("until_s")
    workload["until_s"] = until_s if own is None else min(own, until_s)
    return {**raw, "workload": workload}


def staged_score(trial: optuna.Trial, raw: dict, target: Target, seeds: list[int],
                 slices: tuple[float, ...]) -> dict:
    """:func:`~dspark_sim.tuner.objective.score` of the trial scenario ``raw``, rung by rung:
    raises :class:`optuna.TrialPruned` where the pruner stops it (its rungs kept on the trial)."""
    done, first = [], None
    for i, rung in enumerate(rungs(slices, len(seeds))):
        summaries = simulate(slice_of(raw, rung.until_s), seeds[:1])
        result = assess(summaries, target)
        value = rung_value(result)
        done.append({"slice": rung.label, "until_s": rung.until_s, "value": value,
                     "slo_met": feasible(result["constraints"]), "objective": result["values"][0]})
        trial.set_user_attr("rungs", done)
        trial.report(value, step(i))
        if trial.should_prune():
            trial.set_user_attr("pruned_at", rung.label)
            for name, c in result["constraints"].items():  # the sampler reads them (set once: here)
                trial.set_constraint(name, c)
            raise optuna.TrialPruned(f"pruned at {rung.label}: {value:,.4g}")
        first = summaries if rung.until_s is None else None
    if first is None:
        return assess(simulate(raw, seeds), target)
    return assess(first + simulate(raw, seeds[1:]), target)


def pruned(trials: list[optuna.trial.FrozenTrial], slices: tuple[float, ...], seeds: int) -> dict[str, list[int]]:
    """The numbers of the pruned trials by the rung they stopped at (rung labels in order)."""
    out = {r.label: [] for r in rungs(slices, seeds)}
    for t in trials:
        if t.state == optuna.trial.TrialState.PRUNED and t.user_attrs.get("pruned_at") in out:
            out[t.user_attrs["pruned_at"]].append(t.number)
    return out


def pruned_lines(studies: dict[str, list[optuna.trial.FrozenTrial]], slices: tuple[float, ...],
                 seeds: int) -> list[str]:
    """``report.md``'s pruning section: per study, the trials completed and, per rung, those
    pruned there (with their numbers)."""
    if not slices:
        return []
    stages = [r.label for r in rungs(slices, seeds)]
    lines = ["## Pruning", "",
             f"Every trial ran on growing slices of the trace ({'; '.join(stages)}) before its other seeds; "
             f"after each rung only the best 1/{REDUCTION} of the trials that had reached it went on (successive "
             "halving; a rung compares the objective on the same slice and seed, SLO met first). A completed "
             "trial is scored as without pruning, on every seed of the whole trace.", "",
             "| study | completed | pruned at | pruned | trial numbers |", "|---|---|---|---|---|"]
    for name, trials in studies.items():
        complete = sum(t.state == optuna.trial.TrialState.COMPLETE for t in trials)
        for i, (stage, numbers) in enumerate(pruned(trials, slices, seeds).items()):
            lines.append(f"| {name if not i else ''} | {complete if not i else ''} | {stage} | {len(numbers)} | "
                         f"{', '.join(map(str, numbers)) or '-'} |")
    return lines + [""]
