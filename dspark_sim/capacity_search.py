"""Capacity search: the highest request rate one replica sustains within an SLO.

The rule (Vidur-Search / DistServe style, docs/capacity.md): a request is *good*
when its TTFT <= ``ttft_ms`` (if given), its TPOT <= ``tpot_ms`` (single-token
outputs pass) and it waited at most ``max_queue_ms`` before its first step (so
that a TPOT-only SLO cannot be "met" by an overloaded replica that just queues).
Rule "attainment": at least ``attainment`` of the arrived requests are good.
Rule "p99": the p99 of each of TTFT, TPOT and queue delay is within its bound.

The search scales the scenario's arrival rate by a multiplier x (the trace's
``time_scale`` times x, or a synthetic ``rate_per_s`` times x), each run capped at
``max_requests`` requests: x = 1, then doubling (or halving) until the verdict
flips, then geometric bisection until the last passing and first failing rates
are within ``precision`` of each other. Every run is seeded, so the search is
deterministic.
"""
from __future__ import annotations

import math
import re
import warnings
from dataclasses import dataclass, field, replace
from typing import Callable

import numpy as np

from dspark_sim.errors import InputError
from dspark_sim.metrics.summary import good_mask
from dspark_sim.scenario import Scenario, Slo, Speculation

RULES = ("attainment", "p99")
TP_CHOICES = (1, 2, 4, 8)


@dataclass(frozen=True, slots=True)
class SloRule:
    """When a simulated run sustains its offered load (see the module docstring)."""

    tpot_ms: float
    ttft_ms: float | None = None
    attainment: float = 0.9
    rule: str = "attainment"
    max_queue_ms: float = 5000.0

    def __post_init__(self) -> None:
        for key, value in (("--slo-tpot-ms", self.tpot_ms), ("--slo-ttft-ms", self.ttft_ms),
                           ("--max-queue-ms", self.max_queue_ms)):
            if value is not None and not (isinstance(value, (int, float)) and 0 < value < math.inf):
                raise InputError(None, key, value, "must be a positive finite number of milliseconds")
        if not (isinstance(self.attainment, (int, float)) and 0 < self.attainment <= 1):
            raise InputError(None, "--attainment", self.attainment, "must be in (0, 1]")
        if self.rule not in RULES:
            raise InputError(None, "--rule", self.rule, f"expected one of {', '.join(RULES)}")

    def describe(self) -> str:
        """One line for tables and docs."""
        bounds = [f"TPOT <= {self.tpot_ms:g} ms"]
        if self.ttft_ms is not None:
            bounds.append(f"TTFT <= {self.ttft_ms:g} ms")
        bounds.append(f"queue <= {self.max_queue_ms:g} ms")
        if self.rule == "p99":
            return "p99 of each: " + ", ".join(bounds)
        return f">= {self.attainment:.0%} of requests meet " + ", ".join(bounds)

    def judge(self, result) -> dict:
        """Verdict and latency figures of a finished run (a ``RunResult``)."""
        req = result.collector.requests
        arrived = max(result.num_arrived, 1)
        good = good_mask(req, Slo(self.ttft_ms, self.tpot_ms)) & (req["queue_delay_ms"] <= self.max_queue_ms)
        figures = {"attainment": float(good.sum()) / arrived,
                   "p99_ttft_ms": _p99(req["ttft_ms"]), "p99_tpot_ms": _p99(req["tpot_ms"]),
                   "p99_queue_ms": _p99(req["queue_delay_ms"])}
        if self.rule == "attainment":
            passed = figures["attainment"] >= self.attainment
        else:
            passed = (result.collector.rejected == 0 and req.n > 0
                      and _within(figures["p99_tpot_ms"], self.tpot_ms)
                      and _within(figures["p99_ttft_ms"], self.ttft_ms)
                      and _within(figures["p99_queue_ms"], self.max_queue_ms))
        return {"passed": bool(passed), **figures}


def _p99(values: np.ndarray) -> float | None:
    values = values[~np.isnan(values)]
    return float(np.percentile(values, 99)) if values.size else None


def _within(value: float | None, bound: float | None) -> bool:
    return bound is None or value is None or value <= bound


@dataclass(frozen=True, slots=True)
class Probe:
    """One simulation of the search: multiplier, offered rate, verdict and figures."""

    multiplier: float
    rate_rps: float
    passed: bool
    attainment: float
    p99_ttft_ms: float | None = None
    p99_tpot_ms: float | None = None
    p99_queue_ms: float | None = None
    output_tok_per_s: float = 0.0
    mean_output_tokens: float = 0.0
    mean_accept_length: float | None = None

    def to_dict(self) -> dict:
        return {name: getattr(self, name) for name in self.__dataclass_fields__}


@dataclass(frozen=True, slots=True)
class Search:
    """A finished search: every probe, the highest passing one and the lowest failing one above it."""

    probes: tuple[Probe, ...]
    best: Probe | None
    first_fail: Probe | None

    @property
    def rate_rps(self) -> float:
        """Highest sustained rate found (0 when even the lowest probe failed)."""
        return self.best.rate_rps if self.best else 0.0

    def to_dict(self) -> dict:
        return {"rate_rps": self.rate_rps, "bounded": self.first_fail is not None,
                "best": self.best.to_dict() if self.best else None,
                "first_fail": self.first_fail.to_dict() if self.first_fail else None,
                "probes": [p.to_dict() for p in self.probes]}


def bisect_rate(evaluate: Callable[[float], Probe], *, start: float = 1.0, precision: float = 0.02,
                max_sims: int = 24, max_doublings: int = 12) -> Search:
    """Largest multiplier whose probe passes, assuming the verdict falls once as x grows.

    ``evaluate(x)`` simulates at multiplier x. Bracketing doubles (or halves) x at
    most ``max_doublings`` times from ``start``; geometric bisection then runs
    until ``hi / lo <= 1 + precision`` or ``max_sims`` probes were spent.
    """
    probes: list[Probe] = []
    lo = hi = None  # the highest passing and the lowest failing probe so far

    def run(x: float) -> None:
        nonlocal lo, hi
        probes.append(evaluate(x))
        if probes[-1].passed:
            lo = probes[-1]
        else:
            hi = probes[-1]

    run(start)
    step = 2.0 if lo is not None else 0.5
    for k in range(1, max_doublings + 1):
        if (lo is not None and hi is not None) or len(probes) >= max_sims:
            break
        run(start * step ** k)
    while lo is not None and hi is not None and len(probes) < max_sims \
            and hi.multiplier > lo.multiplier * (1 + precision):
        run(math.sqrt(lo.multiplier * hi.multiplier))
    return Search(tuple(probes), lo, hi)


# -- scenarios ----------------------------------------------------------------------
def probe_scenario(scenario: Scenario, multiplier: float, *, gpu: str | None = None, tp: int | None = None,
                   speculation: Speculation | None = None, max_requests: int | None = None) -> Scenario:
    """One replica of ``scenario`` with its arrival rate times ``multiplier``, capped at ``max_requests``."""
    wl = scenario.workload
    if wl.trace is not None:
        cap = _min_cap(wl.max_requests, max_requests)
        wl = replace(wl, time_scale=wl.time_scale * multiplier, max_requests=cap)
    else:
        syn = wl.synthetic
        cap = _min_cap(syn.num_requests, max_requests)
        wl = replace(wl, synthetic=replace(syn, rate_per_s=syn.rate_per_s * multiplier, num_requests=cap))
    dep = _with_tp(scenario.deployment, tp or scenario.deployment.tp)
    return replace(scenario, workload=wl, deployment=dep, gpu=gpu or scenario.gpu,
                   speculation=speculation or scenario.speculation)


def _with_tp(dep, tp: int):
    """One replica of ``tp`` GPUs split as ``dep`` is: experts over all of them when ``dep``
    spreads them over all its GPUs (else over the largest common part), attention
    data-parallel when ``dep``'s is and ``tp`` > 1."""
    ep = tp if dep.ep == dep.tp > 1 else math.gcd(dep.ep, tp)
    return replace(dep, replicas=1, tp=tp, ep=ep, dp_attention=dep.dp_attention and tp > 1)


def _min_cap(a: int | None, b: int | None) -> int | None:
    caps = [c for c in (a, b) if c is not None]
    return min(caps) if caps else None


def offered_rate(scenario: Scenario) -> float:
    """Arrival rate of the scenario's requests, (n - 1) / (last arrival - first arrival), in req/s."""
    from dspark_sim.workload import read_trace, synthetic_requests

    wl = scenario.workload
    if wl.trace is not None:
        chunks = read_trace(wl.trace, fmt=wl.format, time_scale=wl.time_scale, max_requests=wl.max_requests)
    else:
        chunks = synthetic_requests(wl.synthetic, scenario.seed)
    n, last_s = 0, 0.0
    for chunk in chunks:
        n += len(chunk)
        last_s = float(chunk.arrival_s[-1])
    if n < 2 or last_s <= 0:
        raise InputError(scenario.file, "workload", f"{n} request(s) over {last_s:g} s",
                         "a request rate needs at least two requests with distinct arrival times")
    return (n - 1) / last_s


def layout_note(scenario: Scenario) -> str | None:
    """Why one replica of ``scenario`` cannot run (the model does not split over its GPUs, or
    its weights leave no KV cache), or None when it can."""
    from dspark_sim.catalog import get_gpu, get_model
    from dspark_sim.engine.kv import kv_capacity_tokens

    model, gpu, dep = get_model(scenario.model), get_gpu(scenario.gpu), scenario.deployment
    try:
        dep.parallel.check(model, gpu)
    except InputError as err:
        return f"cannot split: {err.why}"
    try:
        kv_capacity_tokens(model, gpu, dep)
    except InputError:
        return "weights leave no KV cache"
    return None


class OnceWarnings:
    """Re-emits warnings caught during probes, each message once per capacity run.

    Request ids are masked when comparing, so "request 17 rejected" and "request
    18 rejected" count as one. ``quiet_writer`` is a context manager (e.g. tqdm's
    ``external_write_mode``) that keeps a progress bar intact while printing.
    """

    def __init__(self, quiet_writer=None):
        self.seen: set[tuple] = set()
        self.quiet_writer = quiet_writer

    def replay(self, caught) -> None:
        for w in caught:
            key = (w.category, re.sub(r"request \d+", "request #", str(w.message)))
            if key in self.seen:
                continue
            self.seen.add(key)
            if self.quiet_writer is None:
                warnings.warn(w.message, w.category, stacklevel=2)
            else:
                with self.quiet_writer():
                    warnings.warn(w.message, w.category, stacklevel=2)


@dataclass
class Evaluator:
    """Simulates probes of one (GPU, method, TP) candidate at multipliers of its arrival rate."""

    base: Scenario
    rule: SloRule
    base_rate_rps: float
    on_probe: Callable[[Probe], None] | None = None
    once: OnceWarnings = field(default_factory=OnceWarnings)

    def __call__(self, multiplier: float) -> Probe:
        from dspark_sim.run import run_scenario

        point = probe_scenario(self.base, multiplier)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            summary, result = run_scenario(point, None, plots=False, show_progress=False)
        self.once.replay(caught)
        verdict = self.rule.judge(result)
        done = max(summary["completed"], 1)
        probe = Probe(multiplier, multiplier * self.base_rate_rps, verdict["passed"], verdict["attainment"],
                      verdict["p99_ttft_ms"], verdict["p99_tpot_ms"], verdict["p99_queue_ms"],
                      summary["output_throughput"], summary["total_output_tokens"] / done,
                      summary["mean_accept_length"])
        if self.on_probe:
            self.on_probe(probe)
        return probe


# -- sizing -------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Candidate:
    """One tensor-parallel size of a plan: its search and the replicas the target needs."""

    tp: int
    search: Search | None = None
    replicas: int | None = None
    note: str = ""

    @property
    def gpus(self) -> int | None:
        return None if self.replicas is None else self.replicas * self.tp

    def to_dict(self) -> dict:
        return {"tp": self.tp, "replicas": self.replicas, "gpus": self.gpus, "note": self.note,
                "search": self.search.to_dict() if self.search else None}


@dataclass(frozen=True, slots=True)
class Plan:
    """The fewest GPUs of one kind that serve ``target_rps`` with one speculation method."""

    gpu: str
    method: str
    target_rps: float
    candidates: tuple[Candidate, ...]
    best: Candidate | None

    def to_dict(self) -> dict:
        return {"gpu": self.gpu, "method": self.method, "target_rps": self.target_rps,
                "best_tp": self.best.tp if self.best else None,
                "candidates": [c.to_dict() for c in self.candidates]}


def _rank(c: Candidate) -> tuple:
    """Fewest GPUs first, then the most spare capacity (replicas x sustained rate)."""
    return c.gpus, -c.replicas * c.search.rate_rps


def replicas_for(target_rps: float, rate_rps: float) -> int:
    """Replicas of ``rate_rps`` each that together carry ``target_rps`` (rounded up, at least 1)."""
    return max(1, math.ceil(target_rps / rate_rps - 1e-9))


def plan(scenario: Scenario, gpu: str, method: str, rule: SloRule, target_rps: float, base_rate_rps: float, *,
         max_requests: int | None, tp_choices=TP_CHOICES, precision: float = 0.02, max_sims: int = 24,
         on_probe: Callable[[int, Probe], None] | None = None, once: OnceWarnings | None = None) -> Plan:
    """Search each TP in ``tp_choices`` (ascending) and keep the one needing the fewest GPUs.

    A TP whose weights leave no KV cache is skipped; TPs at or above the best GPU
    count so far cannot win and are not searched. Each search warm-starts at the
    multiplier the previous TP sustained.
    """
    from dspark_sim.compare import method_speculation

    spec = method_speculation(method, scenario.speculation, "--methods")
    candidates: list[Candidate] = []
    best: Candidate | None = None
    start = 1.0
    once = once or OnceWarnings()
    for tp in sorted(tp_choices):
        if best is not None and tp >= best.gpus:
            break
        base = probe_scenario(scenario, 1.0, gpu=gpu, tp=tp, speculation=spec, max_requests=max_requests)
        note = layout_note(base)
        if note is not None:
            candidates.append(Candidate(tp, note=note))
            continue
        report = (lambda p, tp=tp: on_probe(tp, p)) if on_probe else None
        search = bisect_rate(Evaluator(base, rule, base_rate_rps, report, once), start=start, precision=precision,
                             max_sims=max_sims)
        if search.best is None:
            candidates.append(Candidate(tp, search, note="misses the SLO at every rate tried"))
            continue
        start = search.best.multiplier
        cand = Candidate(tp, search, replicas_for(target_rps, search.rate_rps))
        candidates.append(cand)
        if best is None or _rank(cand) < _rank(best):
            best = cand
    return Plan(gpu, method, target_rps, tuple(candidates), best)
