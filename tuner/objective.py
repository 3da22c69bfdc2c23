"""What a trial scores: objectives, SLO constraints, and the noise rule.

Noise rule (docs/tuning.md): every configuration is simulated at the same
``seeds`` (common random numbers, so two trials differ by their knobs and not
by their luck); the objective is the *mean* over those seeds and each SLO is
checked on the *worst* seed. Winners are re-simulated on fresh seeds before
they are reported (:mod:`dspark_sim.tuner.confirm`).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import optuna

from dspark_sim.config import check_choice, require
from dspark_sim.metrics.run_summary import RunSummary
from dspark_sim.slo import Slo
from dspark_sim.tuner.scenarios import configure, to_scenario

OBJECTIVES = ("throughput", "goodput", "pareto")
THROUGHPUT = "output_throughput_per_gpu"
USER_SPEED = "mean_tok_per_s_per_user"
GOODPUT = "goodput_per_gpu"
HIGHER_IS_BETTER = frozenset({THROUGHPUT, USER_SPEED, GOODPUT, "request_goodput", "slo_attainment",
                              "mean_accept_length", "completed"})
# Metrics kept per trial (mean over seeds), for reports and the dashboard.
RECORDED = (THROUGHPUT, USER_SPEED, GOODPUT, "request_goodput", "slo_attainment", "p99_tpot_ms",
            "median_tpot_ms", "p99_ttft_ms", "median_ttft_ms", "mean_accept_length",
            "mean_verify_tokens_per_request", "mean_batch_size", "num_preemptions", "completed")


@dataclass(frozen=True, slots=True)
class Target:
    """The objective and the SLO a configuration must meet.

    SLO checks (each on the worst seed): ``p99_tpot_ms <= slo.tpot_ms``,
    ``mean_tok_per_s_per_user >= slo.tok_per_s_user``, ``p99_ttft_ms <= slo.ttft_ms``.
    """

    objective: str = "throughput"
    slo: Slo = field(default_factory=Slo)

    def __post_init__(self) -> None:
        check_choice(self.objective, "objective", OBJECTIVES)
        require(isinstance(self.slo, Slo), "slo", self.slo, "expected an Slo")

    @property
    def directions(self) -> list[str]:
        return ["maximize", "maximize"] if self.objective == "pareto" else ["maximize"]

    @property
    def value_names(self) -> list[str]:
        if self.objective == "pareto":
            return [THROUGHPUT, USER_SPEED]
        return [GOODPUT if self.objective == "goodput" else THROUGHPUT]

    def scenario_slo(self) -> dict:
        """The per-request SLO the simulator's goodput counts against, as a scenario's ``slo:``."""
        slo = {}
        if self.slo.tpot_ms is not None:
            slo["tpot_ms"] = self.slo.tpot_ms
        if self.slo.tok_per_s_user is not None:
            slo["tpot_ms"] = 1e3 / self.slo.tok_per_s_user
        if self.slo.ttft_ms is not None:
            slo["ttft_ms"] = self.slo.ttft_ms
        return slo

    def violations(self, worst: dict) -> dict[str, float]:
        """Optuna constraint values by name (<= 0 means met), relative to each bound so they compare."""
        out, slo = {}, self.slo
        if slo.tpot_ms is not None:
            out["p99_tpot"] = _latency(worst["p99_tpot_ms"]) / slo.tpot_ms - 1.0
        if slo.tok_per_s_user is not None:
            out["tok_per_s_user"] = 1.0 - (worst[USER_SPEED] or 0.0) / slo.tok_per_s_user
        if slo.ttft_ms is not None:
            out["p99_ttft"] = _latency(worst["p99_ttft_ms"]) / slo.ttft_ms - 1.0
        return out

    def describe(self) -> str:
        parts, slo = [], self.slo
        if slo.tpot_ms is not None:
            parts.append(f"p99 TPOT <= {slo.tpot_ms:g} ms")
        if slo.tok_per_s_user is not None:
            parts.append(f"mean tok/s/user >= {slo.tok_per_s_user:g}")
        if slo.ttft_ms is not None:
            parts.append(f"p99 TTFT <= {slo.ttft_ms:g} ms")
        return ", ".join(parts) or "none"

    def to_json(self) -> dict:
        """Flat, as studies store it: objective, tpot_ms, tok_per_s_user, ttft_ms."""
        return {"objective": self.objective, "tpot_ms": self.slo.tpot_ms,
                "tok_per_s_user": self.slo.tok_per_s_user, "ttft_ms": self.slo.ttft_ms}

    @classmethod
    def from_json(cls, d: dict) -> Target:
        """Inverse of :meth:`to_json`."""
        return cls(d["objective"], Slo(ttft_ms=d.get("ttft_ms"), tpot_ms=d.get("tpot_ms"),
                                       tok_per_s_user=d.get("tok_per_s_user")))


def _latency(value: float | None) -> float:
    """A latency no request produced counts as hopeless (finite: Optuna sums violations)."""
    return 1e12 if value is None or not np.isfinite(value) else value


def simulate(raw: dict, seeds: list[int]) -> list[RunSummary]:
    """Summaries of the scenario mapping ``raw`` simulated once per seed."""
    return simulate_scenario(to_scenario(raw), seeds)


def simulate_scenario(scenario, seeds: list[int]) -> list[RunSummary]:
    """Summaries of ``scenario`` simulated once per seed."""
    from dspark_sim.run import run_scenario

    return [run_scenario(scenario.with_seed(seed), None, plots=False, show_progress=False)[0] for seed in seeds]


def seed_metrics(summary: RunSummary) -> dict:
    """What a trial keeps of one seed's run (its ``per_seed`` entry in the study): the seed and
    the :data:`RECORDED` metrics, goodput a GPU among them."""
    goodput = (summary.request_goodput or 0.0) / summary.num_gpus
    return {key: goodput if key == GOODPUT else getattr(summary, key) for key in ("seed", *RECORDED)}


def aggregate(records: list[dict]) -> tuple[dict, dict]:
    """(mean, worst) of the recorded metrics over seeds (:func:`seed_metrics` records); worst is
    per metric's bad direction."""
    mean, worst = {}, {}
    for key in RECORDED:
        values = np.array([np.nan if s.get(key) is None else float(s[key]) for s in records])
        if np.all(np.isnan(values)):
            mean[key] = worst[key] = None
            continue
        mean[key] = float(np.nanmean(values))
        worst[key] = float(np.nanmin(values) if key in HIGHER_IS_BETTER else np.nanmax(values))
    return mean, worst


def score(base: dict, config: dict, target: Target, seeds: list[int]) -> dict:
    """Simulate ``config`` on ``base`` at ``seeds``: objective values, constraints and metrics."""
    return assess(simulate(configure(base, config), seeds), target)


def assess(summaries: list[RunSummary], target: Target) -> dict:
    """Objective values (means over the summaries' seeds), constraints (on the worst seed) and metrics."""
    per_seed = [seed_metrics(s) for s in summaries]
    mean, worst = aggregate(per_seed)
    values = [mean[name] or 0.0 for name in target.value_names]
    return {"values": values, "constraints": target.violations(worst), "mean": mean, "worst": worst,
            "per_seed": per_seed}


def feasible(constraints: dict[str, float]) -> bool:
    """Every SLO met (constraint values <= 0)."""
    return all(c <= 0 for c in constraints.values())


def violation(constraints: dict[str, float]) -> float:
    """How far from meeting the SLO: the sum of the positive constraint values."""
    return sum(max(c, 0.0) for c in constraints.values())


def pareto_front(trials: list[optuna.trial.FrozenTrial]) -> list[optuna.trial.FrozenTrial]:
    """Trials no other trial beats on both throughput/GPU and tok/s/user."""
    points = [(t.user_attrs["metrics"][THROUGHPUT] or 0.0, t.user_attrs["metrics"][USER_SPEED] or 0.0)
              for t in trials]
    front = []
    for i, (x, y) in enumerate(points):
        if not any((a >= x and b >= y) and (a > x or b > y) for a, b in points):
            front.append(trials[i])
    return front
