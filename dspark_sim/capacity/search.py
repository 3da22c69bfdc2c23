"""Capacity search: the highest request rate one replica sustains within an SLO.

The rule (Vidur-Search / DistServe style, docs/capacity.md) is the :class:`Slo`'s: a
request is *good* when its TTFT <= ``ttft_ms`` (if given), its TPOT <= ``tpot_ms``
(single-token outputs pass) and it waited at most ``max_queue_ms`` before its first step
(so that a TPOT-only SLO cannot be "met" by an overloaded replica that just queues).
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
from dspark_sim.scenario import Scenario, Speculation
from dspark_sim.slo import Slo


def describe(slo: Slo) -> str:
    """The rule in one line, for tables and docs."""
    bounds = [f"TPOT <= {slo.tpot_ms:g} ms"]
    if slo.ttft_ms is not None:
        bounds.append(f"TTFT <= {slo.ttft_ms:g} ms")
    if slo.max_queue_ms is not None:
        bounds.append(f"queue <= {slo.max_queue_ms:g} ms")
    if slo.rule == "p99":
        return "p99 of each: " + ", ".join(bounds)
    return f">= {slo.attainment:.0%} of requests meet " + ", ".join(bounds)


@dataclass(frozen=True, slots=True)
class Verdict:
    """A run judged under an SLO rule: whether it passed, the share of arrived requests meeting
    every bound, and the p99 TTFT, TPOT and queue delay in ms (None without data)."""

    passed: bool
    attainment: float
    p99_ttft_ms: float | None
    p99_tpot_ms: float | None
    p99_queue_ms: float | None


def judge(slo: Slo, result) -> Verdict:
    """Verdict and latency figures of a finished run (a ``RunResult``) under ``slo.rule``."""
    return judge_requests(slo, result.collector.requests, result.num_arrived, result.collector.rejected)


def judge_requests(slo: Slo, req, arrived: int, rejected: int) -> Verdict:
    """Verdict and latency figures of a run's finished requests ``req`` (a
    :class:`~dspark_sim.metrics.record.RequestColumns` holding ttft_ms, tpot_ms and queue_delay_ms) out of ``arrived``, ``rejected`` of them refused, under ``slo.rule``:
    the simulator's runs and the real decoder's are judged alike."""
    good = slo.good(req)
    figures = {"attainment": float(good.sum()) / max(arrived, 1),
               "p99_ttft_ms": _p99(req.ttft_ms), "p99_tpot_ms": _p99(req.tpot_ms),
               "p99_queue_ms": _p99(req.queue_delay_ms)}
    if slo.rule == "attainment":
        passed = figures["attainment"] >= slo.attainment
    else:
        passed = (rejected == 0 and req.ttft_ms.size > 0
                  and _within(figures["p99_tpot_ms"], slo.tpot_ms)
                  and _within(figures["p99_ttft_ms"], slo.ttft_ms)
                  and _within(figures["p99_queue_ms"], slo.max_queue_ms))
    return Verdict(bool(passed), **figures)


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
    n, last_s = 0, 0.0
    for chunk in scenario.workload.requests(scenario.seed):
        n += len(chunk)
        last_s = float(chunk.arrival_s[-1])
    if n < 2 or last_s <= 0:
        raise InputError(scenario.file, "workload", f"{n} request(s) over {last_s:g} s",
                         "a request rate needs at least two requests with distinct arrival times")
    return (n - 1) / last_s


def layout_note(scenario: Scenario, *, gpu: str | None = None, tp: int | None = None) -> str | None:
    """Why one replica of ``scenario`` on ``tp`` GPUs of kind ``gpu`` (as :func:`probe_scenario`
    builds it) cannot run: the model does not split over its GPUs, or its weights leave no KV
    cache; None when it can. Asked before the probe scenario exists, which would refuse a split
    that does not fit."""
    from dspark_sim.catalog import get_gpu, get_model
    from dspark_sim.serving.kv import kv_capacity_tokens

    model, gpu_spec = get_model(scenario.model), get_gpu(gpu or scenario.gpu)
    dep = _with_tp(scenario.deployment, tp or scenario.deployment.tp)
    try:
        dep.parallel.check(model, gpu_spec)
    except InputError as err:
        return f"cannot split: {err.why}"
    try:
        kv_capacity_tokens(model, gpu_spec, dep)
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
    slo: Slo
    base_rate_rps: float
    on_probe: Callable[[Probe], None] | None = None
    once: OnceWarnings = field(default_factory=OnceWarnings)

    def __call__(self, multiplier: float) -> Probe:
        from dspark_sim.run import run_scenario

        try:
            point = probe_scenario(self.base, multiplier)
        except InputError:  # a rate beyond the bounds of any workload (limits.py): not sustained
            return self._report(Probe(multiplier, multiplier * self.base_rate_rps, False, 0.0))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            summary, result = run_scenario(point, None, plots=False, show_progress=False)
        self.once.replay(caught)
        verdict = judge(self.slo, result)
        done = max(summary.completed, 1)
        probe = Probe(multiplier, multiplier * self.base_rate_rps, verdict.passed, verdict.attainment,
                      verdict.p99_ttft_ms, verdict.p99_tpot_ms, verdict.p99_queue_ms,
                      summary.output_throughput, summary.total_output_tokens / done,
                      summary.mean_accept_length)
        return self._report(probe)

    def _report(self, probe: Probe) -> Probe:
        if self.on_probe:
            self.on_probe(probe)
        return probe
