"""Like-for-like comparisons: every method's study repeated with other sampler seeds.

One study's winner is partly the luck of its sampler: another seed searches other
configurations and confirms another winner. ``--repeats N`` runs every method's study N
times (sampler seeds ``seed``, ``seed + 1``, ...; the same trial budget, trace, simulation
seeds and SLO), and the comparison is over the N confirmed winners of each method: their
mean, standard deviation and range. DSpark's difference to a baseline is called a gain (or
a loss) only when the difference of the means exceeds the combined spread, the two
standard deviations over repeats added in quadrature, relative to the baseline's mean;
otherwise it is "within spread". With one repeat the spread over sampler seeds is not
measured, and no difference is called a gain.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass

from dspark_sim.tuner.confirm import pick
from dspark_sim.tuner.objective import USER_SPEED
from dspark_sim.tuner.runner import Job

GAIN, LOSS, WITHIN, UNMEASURED, NOT_COMPARABLE = "gain", "loss", "within spread", "not measured", "not comparable"


@dataclass(frozen=True)
class Spread:
    """One method's confirmed winners over its repeats: values of the repeats whose winner meets
    the SLO, and what each repeat's study was given and completed."""

    method: str
    values: tuple[float, ...]  # the objective of each repeat whose winner meets the SLO
    repeats: int               # repeats with a confirmed winner
    budget: int                # complete trials each repeat's study was asked for
    completed: tuple[int, ...]  # complete trials each repeat's study holds

    def __post_init__(self):
        if len(self.values) > self.repeats or self.budget < 0 or any(v < 0 for v in self.values):
            raise ValueError(f"inconsistent spread for {self.method}: {self}")

    @property
    def mean(self) -> float | None:
        return statistics.fmean(self.values) if self.values else None

    @property
    def sd(self) -> float | None:
        """Standard deviation over repeats (None below two: not measured)."""
        return statistics.stdev(self.values) if len(self.values) > 1 else None

    def to_json(self) -> dict:
        return {"method": self.method, "values": list(self.values), "repeats": self.repeats,
                "slo_met": len(self.values), "mean": self.mean, "sd": self.sd,
                "min": min(self.values, default=None), "max": max(self.values, default=None),
                "budget": self.budget, "completed": list(self.completed)}


def compare(ours: Spread, theirs: Spread) -> dict:
    """DSpark (``ours``) against a baseline: relative difference of the means, the combined
    spread (standard deviations in quadrature, relative to the baseline's mean) and the verdict."""
    if not ours.values or not theirs.values or not theirs.mean:
        return {"gain": None, "spread": None, "verdict": NOT_COMPARABLE}
    gain = ours.mean / theirs.mean - 1.0
    if ours.sd is None or theirs.sd is None:
        return {"gain": gain, "spread": None, "verdict": UNMEASURED}
    spread = (ours.sd ** 2 + theirs.sd ** 2) ** 0.5 / theirs.mean
    verdict = WITHIN if abs(gain) <= spread else GAIN if gain > 0 else LOSS
    return {"gain": gain, "spread": spread, "verdict": verdict}


def describe(c: dict) -> str:
    """A comparison in words: a gain only above the spread."""
    if c["verdict"] == NOT_COMPARABLE:
        return "not comparable (no repeat meets the SLO)"
    if c["verdict"] == UNMEASURED:
        return f"{_share(c['gain'], '+')} (one sampler seed: not a measured gain or loss)"
    if c["verdict"] == WITHIN:
        return f"{_share(c['gain'], '+')}, within spread ({_share(c['spread'])}): no gain claimed"
    return f"{_share(c['gain'], '+')}, a {c['verdict']} (above the combined spread {_share(c['spread'])})"


def _share(x: float, sign: str = "") -> str:
    """A relative difference in per cent, or in parts per million where a tenth of a per cent
    would print it as zero."""
    return f"{x:{sign}.1%}" if x == 0 or abs(x) >= 5e-4 else f"{x * 1e6:{sign}.1f} ppm"


def by_method(jobs: list[Job]) -> dict[str, list[Job]]:
    """Jobs grouped by method, DSpark first, repeats in order."""
    out: dict[str, list[Job]] = {}
    for job in jobs:
        out.setdefault(job.method, []).append(job)
    return out


def chosen(jobs: list[Job], winners: dict[str, dict]) -> dict[str, tuple[Job, dict]]:
    """Per method, the best confirmed winner over its repeats and its study's job (what is
    exported and shown as the method's winner)."""
    out = {}
    for method, group in by_method(jobs).items():
        records = [winners[j.study] for j in group if j.study in winners]
        if records:
            best = pick(records, group[0])
            out[method] = (next(j for j in group if j.study == best["study"]), best)
    return out


def spreads(jobs: list[Job], winners: dict[str, dict], completed: dict[str, int], matched=None) -> dict[str, Spread]:
    """Per method, its repeats' confirmed values. ``matched(job, speed)``: for a Pareto study, a
    baseline's throughput at DSpark's tok/s/user of the same repeat (None: the objective itself)."""
    groups = by_method(jobs)
    ours = {j.repeat: winners.get(j.study) for j in groups.get("dspark", [])}
    out = {}
    for method, group in groups.items():
        values = []
        for job in group:
            w = winners.get(job.study)
            if w is None or not w["feasible"]:
                continue
            value = w["values"][0]
            if matched is not None and method != "dspark":
                mine = ours.get(job.repeat)
                value = None if mine is None else matched(job, mine["mean"][USER_SPEED] or 0.0)
            if value is not None:
                values.append(value)
        out[method] = Spread(method, tuple(values), sum(j.study in winners for j in group), group[0].n_trials,
                             tuple(completed.get(j.study, 0) for j in group))
    return out


def summary(spread: dict[str, Spread], repeats: int) -> dict:
    """What ``report.json`` holds of the comparison: per method its spread and, against DSpark,
    the difference and verdict; budgets that are not DSpark's are flagged."""
    ours = spread.get("dspark")
    methods = {}
    for method, s in spread.items():
        entry = s.to_json()
        if ours is not None and method != "dspark":
            entry["vs_dspark"] = compare(ours, s)
        entry["unequal_budget"] = ours is not None and (s.budget != ours.budget or any(
            c < s.budget for c in s.completed))
        methods[method] = entry
    return {"repeats": repeats, "rule": "gain only when |mean difference| > combined spread (sd over repeats "
            "in quadrature, relative to the baseline's mean); one repeat: not measured", "methods": methods}


def table(data: dict, unit: str, labels: dict[str, str]) -> list[str]:
    """The comparison as Markdown rows: mean, spread and DSpark's difference in words."""
    lines = [f"| method | trials per study | repeats meeting the SLO | mean {unit} | sd over repeats | min - max | "
             "DSpark's difference |", "|---|---|---|---|---|---|---|"]
    for method, m in data["methods"].items():
        budget = f"{m['budget']}" + (" (UNEQUAL budget)" if m["unequal_budget"] else "")
        if any(c != m["budget"] for c in m["completed"]):
            budget += f"; completed {', '.join(map(str, m['completed']))}"
        mean = "-" if m["mean"] is None else f"{m['mean']:,.1f}"
        sd = "-" if m["sd"] is None else f"{m['sd']:,.1f}"
        rng = "-" if m["min"] is None else f"{m['min']:,.1f} - {m['max']:,.1f}"
        diff = "-" if "vs_dspark" not in m else describe(m["vs_dspark"])
        lines.append(f"| {labels.get(method, method)} | {budget} | {m['slo_met']} of {data['repeats']} | {mean} | "
                     f"{sd} | {rng} | {diff} |")
    return lines
