"""The fitted host terms of a profile: the engine's time per decode step outside its graphs
(:class:`HostFit`, by drafter kind) and the serving loop's time between steps (:class:`ScheduleFit`)."""
from __future__ import annotations

from dataclasses import dataclass

from dspark_sim.cost.term_checks import check_terms, fail
from dspark_sim.cost.terms import STEP_KINDS


@dataclass(frozen=True)
class HostFit:
    """The engine's time per decode step outside the graphs it replays, by drafter kind:
    sampling, ``schedule_verify`` and ``accept`` launches, host syncs, the commit of
    accepted tokens and page bookkeeping. ``seconds = bias_s + req_s * R``, fitted to
    whole decode steps as served (the part the target and drafter fits do not explain).
    Host time: "fixed" under projection and tensor parallelism."""

    kind: str
    bias_s: float
    req_s: float

    def __post_init__(self) -> None:
        if self.kind not in STEP_KINDS:
            fail("kind", self.kind, f"must be one of {STEP_KINDS}")
        check_terms(self, ("bias_s", "req_s"), ())

    def seconds(self, reqs):
        return self.bias_s + self.req_s * reqs


@dataclass(frozen=True)
class ScheduleFit:
    """The serving loop's host time between two steps: retiring finished requests,
    admitting, and scheduling the next step over the running requests (page reservations
    included). ``seconds = bias_s + req_s * R``, R the running requests, fitted to the gaps
    between the steps of bursts served by the real serving loop. Host time: "fixed" under
    projection and tensor parallelism."""

    bias_s: float
    req_s: float

    def __post_init__(self) -> None:
        check_terms(self, ("bias_s", "req_s"), ())

    def seconds(self, reqs):
        return self.bias_s + self.req_s * reqs
