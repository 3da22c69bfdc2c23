"""Intervals for an answer's headline numbers, from the error sources that were measured.

An answer (capacity's GPUs and sustained rate, the tuner's throughput and SLO margin) is
re-computed at two corners of what the measurements allow, and reported as the range
between them:

- **cost**: every profiled step time scaled by ``1 +- delta``, with ``delta`` the root sum of
  squares of (a) the profile's strictest held-out error of its verify term, the p90 of its
  leave-one-level-out errors (``verify@reqs``, ``verify@context``, ``verify@largest``; the
  k-fold p90 for a profile without them, and said so), and (b) the host-to-host spread: the
  largest step-time difference of the same benchmark on two H200 hosts
  (``profiles/<gpu>/host_spread.json``, from ``bench_targets.py --spread``);
- **acceptance**: for a built-in preset, the workload's domains at their least and most
  accepting Table 1 dataset (``acceptance.dataset``): what the same domain's acceptance
  spans across the paper's benchmarks. A calibrated preset, a borrowed one with no Table 1
  row, or a fixed probability gets no acceptance corner (the interval says so).

The pessimistic corner is slower steps with the least-accepting dataset, the optimistic one
faster steps with the most-accepting one. It is an envelope of the measured error sources,
not a confidence interval, and it does not cover what was never measured: a projection to
another GPU (its ratios are not validated), a TP scaling, or an engine other than the
decoder the profile timed. ``docs/capacity.md`` ("Intervals") states the method;
``tests/test_intervals.py`` checks that it covers a simulated truth whose cost model is
perturbed within it.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path

from dspark_sim.scenario import Scenario

LEVEL_KEYS = ("verify@reqs", "verify@context", "verify@largest")


@dataclass(frozen=True)
class ErrorSources:
    """The measured error sources of one scenario's answer (see the module docstring)."""

    cost_rel: float
    profile_rel: float
    profile_from: str
    host_rel: float
    host_from: str
    low_dataset: str | None = None
    high_dataset: str | None = None
    acceptance_note: str = ""

    def __post_init__(self) -> None:
        for name in ("cost_rel", "profile_rel", "host_rel"):
            value = getattr(self, name)
            if not (math.isfinite(value) and 0 <= value < 0.9):
                raise ValueError(f"{name}={value} must lie in [0, 0.9)")

    def to_dict(self) -> dict:
        return {"cost_rel": self.cost_rel, "profile_rel": self.profile_rel, "profile_from": self.profile_from,
                "host_rel": self.host_rel, "host_from": self.host_from, "low_dataset": self.low_dataset,
                "high_dataset": self.high_dataset, "acceptance": self.acceptance_note,
                "not_covered": "projection to another GPU, TP scaling and other engines (never measured)"}


def _host_spread(gpu: str) -> tuple[float, str]:
    path = Path(str(resources.files("dspark_sim.profiles").joinpath(gpu, "host_spread.json")))
    if not path.is_file():
        return 0.0, f"no host-to-host spread measured on {gpu}"
    d = json.loads(path.read_text())
    return float(d["max_rel_diff"]), d["source"]


def _profile_error(cost) -> tuple[float, str] | None:
    block = cost.provenance() if hasattr(cost, "provenance") else None
    if block is None or block["kind"] != "profile" or not block.get("held_out"):
        return None
    held, name = block["held_out"], f"{block['measured']['gpu']}/{block['model']}"
    levels = {k: held[k]["p90"] for k in LEVEL_KEYS if k in held}
    if levels:
        key = max(levels, key=levels.get)
        return levels[key], f"p90 of {key}, the strictest leave-one-level-out error of {name}'s verify term"
    if "verify" in held:
        return held["verify"]["p90"], f"p90 of the k-fold verify error of {name} (no level errors: interpolation only)"
    return None


def _datasets(scenario: Scenario) -> tuple[str | None, str | None, str]:
    from dspark_sim.acceptance.paper import DATASETS, TABLE1
    from dspark_sim.acceptance.preset import builtin, normalize_target

    spec = scenario.speculation
    if spec.method == "none":
        return None, None, "no speculation"
    acc = spec.acceptance
    if acc.fixed_accept_prob is not None or acc.preset_file is not None or acc.dataset is not None:
        return None, None, "no acceptance corner: the scenario fixes its acceptance (calibrated, fixed or one dataset)"
    target = builtin().resolve_target(acc.drafter, acc.target or scenario.model)
    row = TABLE1.get((target, acc.drafter))
    if row is None or target != normalize_target(acc.target or scenario.model):
        return None, None, f"no acceptance corner: no Table 1 row for {acc.drafter}/{normalize_target(acc.target or scenario.model)}"
    domains = {name for name, weight in scenario.workload.domain_mix if weight > 0}
    names = [d for d in DATASETS if DATASETS[d] in domains]
    accept = dict(zip(DATASETS, row))
    low, high = min(names, key=accept.get), max(names, key=accept.get)
    return low, high, (f"Table 1 datasets of the workload's domains: {low} ({accept[low]:.2f} accepted) to "
                       f"{high} ({accept[high]:.2f})")


def error_sources(scenario: Scenario, cost=None) -> ErrorSources | None:
    """The measured error sources of ``scenario``'s answers; None for a roofline cost model."""
    if cost is None:
        from dspark_sim.cost.scenario import scenario_cost

        cost = scenario_cost(scenario, warn=False)
    profile = _profile_error(cost)
    if profile is None:
        return None
    block = cost.provenance()
    host, host_from = _host_spread(block["measured"]["gpu"])
    low, high, note = _datasets(scenario)
    delta = min(0.5, math.hypot(profile[0], host))
    return ErrorSources(delta, profile[0], profile[1], host, host_from, low, high, note)


def corners(scenario: Scenario, src: ErrorSources) -> tuple[Scenario, Scenario]:
    """(pessimistic, optimistic) versions of ``scenario``: step times x (1 +- delta) and, when
    there is an acceptance corner, the least / most accepting Table 1 dataset."""
    def at(scale: float, dataset: str | None) -> Scenario:
        spec = scenario.speculation
        if dataset is not None:
            spec = replace(spec, acceptance=replace(spec.acceptance, dataset=dataset))
        return replace(scenario, cost_scale=scenario.cost_scale * scale, speculation=spec)
    return at(1.0 + src.cost_rel, src.low_dataset), at(1.0 - src.cost_rel, src.high_dataset)


def interval(low: float | None, high: float | None) -> list | None:
    """``[low, high]`` sorted, or None when either corner has no value."""
    if low is None or high is None:
        return None
    return sorted([low, high])


__all__ = ["ErrorSources", "error_sources", "corners", "interval"]
