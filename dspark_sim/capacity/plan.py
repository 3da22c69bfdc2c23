"""Capacity plans: the fewest GPUs of each kind that carry a target rate, for every method.

For each GPU kind and speculation method, :func:`plan` searches each tensor-parallel size
(:mod:`dspark_sim.capacity.search`) and keeps the one needing the fewest GPUs (replicas x
TP); :func:`capacity` does so for every (GPU, method) of a :class:`CapacitySettings` and
returns what ``capacity.json`` holds (rows and the recommendation from
:mod:`dspark_sim.capacity.report`).
"""
from __future__ import annotations

import math
import signal
import warnings
from dataclasses import dataclass
from typing import Callable

from dspark_sim.capacity.search import (Evaluator, OnceWarnings, Probe, Search, bisect_rate, describe, layout_note,
                                        offered_rate, probe_scenario)
from dspark_sim.catalog import get_gpu
from dspark_sim.config import check_int, check_real, is_int, require
from dspark_sim.limits import MAX_PRICE_PER_GPU_HOUR, MAX_RATE_PER_S, MAX_REPLICAS, MAX_REQUESTS
from dspark_sim.intervals import corners, error_sources
from dspark_sim.methods import method_speculation
from dspark_sim.provenance import basis, scenario_provenance
from dspark_sim.scenario import Scenario
from dspark_sim.slo import Slo

TP_CHOICES = (1, 2, 4, 8)
INTERVAL_SIMS = 10  # probes per corner search of an interval (warm-started at the answer)
DEFAULT_MAX_REQUESTS = 2000
MAX_SIMS, MAX_JOBS = 1000, 256
# Fields by the command-line flag that sets them, for error messages.
FLAGS = {"tpot_ms": "--slo-tpot-ms", "ttft_ms": "--slo-ttft-ms", "attainment": "--attainment", "rule": "--rule",
         "max_queue_ms": "--max-queue-ms", "gpus": "--gpus", "methods": "--methods",
         "prices": "--price-per-gpu-hour", "tps": "--tp", "qps": "--qps", "max_requests": "--max-requests",
         "precision": "--precision", "max_sims": "--max-sims", "jobs": "--jobs"}


@dataclass(frozen=True, slots=True)
class CapacitySettings:
    """What a capacity run searches: the SLO and its rule, GPU kinds, methods, prices, TP sizes, budgets.

    ``prices``: (GPU, dollars per GPU-hour) pairs; ``qps``: the target request rate (None:
    the scenario's arrival rate); ``max_requests``: requests per simulation; ``precision``:
    the search stops when the first failing rate is within this fraction of the last
    passing one; ``max_sims``: simulations per search at most; ``jobs``: worker processes.
    """

    slo: Slo
    gpus: tuple[str, ...]
    methods: tuple[str, ...]
    prices: tuple[tuple[str, float], ...] = ()
    tps: tuple[int, ...] = TP_CHOICES
    qps: float | None = None
    max_requests: int | None = DEFAULT_MAX_REQUESTS
    precision: float = 0.02
    max_sims: int = 24
    jobs: int = 1

    def __post_init__(self) -> None:
        require(isinstance(self.slo, Slo) and self.slo.tpot_ms is not None, "tpot_ms", None,
                "no TPOT SLO: pass --slo-tpot-ms")
        require(bool(self.gpus) and bool(self.methods), "gpus" if not self.gpus else "methods", None,
                "expected a comma-separated list")
        for name in self.gpus:
            get_gpu(name, key="gpus")
        for name, price in self.prices:
            get_gpu(name, key="prices")
            check_real(price, "prices", 0, MAX_PRICE_PER_GPU_HOUR, strict_min=True)
        require(bool(self.tps) and all(is_int(t) and 1 <= t <= 64 for t in self.tps), "tps", self.tps,
                "expected comma-separated sizes in 1..64, e.g. 1,2,4,8")
        check_real(self.qps, "qps", 0, MAX_RATE_PER_S, strict_min=True, optional=True)
        check_int(self.max_requests, "max_requests", 1, MAX_REQUESTS, optional=True)
        check_real(self.precision, "precision", 0, 1, strict_min=True)
        check_int(self.max_sims, "max_sims", 1, MAX_SIMS)
        check_int(self.jobs, "jobs", 1, MAX_JOBS)


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
    provenance: dict | None = None  # of the best TP's scenario (else the first searched); None if none
    interval: dict | None = None  # the best TP searched again at the corners of its error sources

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


def plan(scenario: Scenario, gpu: str, method: str, slo: Slo, target_rps: float, base_rate_rps: float, *,
         max_requests: int | None, tp_choices=TP_CHOICES, precision: float = 0.02, max_sims: int = 24,
         on_probe: Callable[[int, Probe], None] | None = None, once: OnceWarnings | None = None) -> Plan:
    """Search each TP in ``tp_choices`` (ascending) and keep the one needing the fewest GPUs.

    A TP the model does not split over, or whose weights leave no KV cache, is skipped
    with a note; TPs at or above the best GPU count so far cannot win and are not
    searched. Each search warm-starts at the multiplier the previous TP sustained.
    """
    spec = method_speculation(method, scenario.speculation, "--methods")
    candidates: list[Candidate] = []
    best: Candidate | None = None
    start = 1.0
    once = once or OnceWarnings()
    for tp in sorted(tp_choices):
        if best is not None and tp >= best.gpus:
            break
        note = layout_note(scenario, gpu=gpu, tp=tp)
        if note is not None:
            candidates.append(Candidate(tp, note=note))
            continue
        base = probe_scenario(scenario, 1.0, gpu=gpu, tp=tp, speculation=spec, max_requests=max_requests)
        report = (lambda p, tp=tp: on_probe(tp, p)) if on_probe else None
        search = bisect_rate(Evaluator(base, slo, base_rate_rps, report, once), start=start, precision=precision,
                             max_sims=max_sims)
        if search.best is None:
            candidates.append(Candidate(tp, search, note="misses the SLO at every rate tried"))
            continue
        start = search.best.multiplier
        replicas = replicas_for(target_rps, search.rate_rps)
        if replicas > MAX_REPLICAS:
            candidates.append(Candidate(tp, search, note=f"needs {replicas:.3g} replicas, more than the "
                                                         f"{MAX_REPLICAS} a deployment may have"))
            continue
        cand = Candidate(tp, search, replicas)
        candidates.append(cand)
        if best is None or _rank(cand) < _rank(best):
            best = cand
    searched = [c for c in candidates if c.search is not None]
    shown = best or (searched[0] if searched else None)
    base = None if shown is None else probe_scenario(scenario, 1.0, gpu=gpu, tp=shown.tp, speculation=spec,
                                                     max_requests=max_requests)
    prov = None if base is None else scenario_provenance(base)
    bounds = None
    if best is not None:
        bounds = corner_searches(base, slo, base_rate_rps, best.search.best.multiplier, once,
                                 precision=precision, max_sims=min(max_sims, INTERVAL_SIMS))
    return Plan(gpu, method, target_rps, tuple(candidates), best, prov, bounds)


def corner_searches(base: Scenario, slo: Slo, base_rate_rps: float, start: float, once: OnceWarnings, *,
                    precision: float, max_sims: int) -> dict | None:
    """The sustained rate of ``base`` at the pessimistic and optimistic corners of its measured
    error sources (:mod:`dspark_sim.intervals`), each searched from ``start``; None without
    measured error sources (a roofline cost model)."""
    src = error_sources(base)
    if src is None:
        return None
    out = {"sources": src.to_dict()}
    for name, corner in zip(("pessimistic", "optimistic"), corners(base, src)):
        search = bisect_rate(Evaluator(corner, slo, base_rate_rps, None, once), start=start,
                             precision=precision, max_sims=max_sims)
        out[name] = search.best.to_dict() if search.best else None
    return out


# -- rows ---------------------------------------------------------------------------------
def cost_per_mtok(price_per_gpu_hour: float, gpus: int, output_tok_per_s: float) -> float:
    """Dollars per million output tokens of ``gpus`` GPUs producing ``output_tok_per_s`` together."""
    return price_per_gpu_hour * gpus / (3600.0 * output_tok_per_s) * 1e6


def plan_row(p: Plan, prices: dict[str, float]) -> dict:
    """The table/JSON row of a plan: best TP, per-replica rate, GPUs and cost at the target."""
    row = {"gpu": p.gpu, "method": p.method, "tp": None, "rate_per_replica_rps": 0.0, "replicas": None,
           "gpus": None, "output_tok_per_s_per_gpu": None, "p99_tpot_ms": None, "p99_ttft_ms": None,
           "attainment": None, "mean_accept_length": None, "cost_per_mtok": None,
           "cost_per_mtok_at_capacity": None, "note": _note(p),
           "basis": basis(p.provenance) if p.provenance else None, "provenance": p.provenance}
    if p.best is None:
        return row
    b = p.best.search.best
    target_tok_per_s = p.target_rps * b.mean_output_tokens
    row.update(tp=p.best.tp, rate_per_replica_rps=b.rate_rps, replicas=p.best.replicas, gpus=p.best.gpus,
               output_tok_per_s_per_gpu=b.output_tok_per_s / p.best.tp, p99_tpot_ms=b.p99_tpot_ms,
               p99_ttft_ms=b.p99_ttft_ms, attainment=b.attainment, mean_accept_length=b.mean_accept_length)
    price = prices.get(p.gpu)
    if price is not None and target_tok_per_s > 0 and b.output_tok_per_s > 0:
        row["cost_per_mtok"] = cost_per_mtok(price, p.best.gpus, target_tok_per_s)
        row["cost_per_mtok_at_capacity"] = cost_per_mtok(price, p.best.tp, b.output_tok_per_s)
    row.update(interval_fields(p))
    return row


def interval_fields(p: Plan) -> dict:
    """The row's intervals: sustained rate, GPUs for the target and tok/s/GPU at the corners of
    the plan's measured error sources (at its best TP); None where a corner has no answer."""
    out = {"rate_per_replica_rps_interval": None, "gpus_interval": None, "output_tok_per_s_per_gpu_interval": None,
           "interval_sources": None}
    if p.interval is None:
        return out
    # the envelope of the nominal answer and both corners (a coarse corner search may land
    # on either side of the nominal one)
    nominal = p.best.search.best.to_dict()
    found = [c for c in (p.interval["pessimistic"], p.interval["optimistic"]) if c]
    tp = p.best.tp
    out["interval_sources"] = p.interval["sources"]
    if len(found) < 2:  # a corner sustains no rate tried: the low end is unknown
        return out
    rates = [c["rate_rps"] for c in (nominal, *found)]
    out["rate_per_replica_rps_interval"] = [min(rates), max(rates)]
    gpus = [tp * replicas_for(p.target_rps, r) for r in rates]
    out["gpus_interval"] = [min(gpus), max(gpus)]
    tok = [c["output_tok_per_s"] / tp for c in (nominal, *found)]
    out["output_tok_per_s_per_gpu_interval"] = [min(tok), max(tok)]
    return out


def _note(p: Plan) -> str:
    if p.best is not None:
        return "" if p.best.search.first_fail else "rate not bounded: raise --max-requests"
    notes = sorted({c.note for c in p.candidates if c.note})
    return "; ".join(notes) or "no TP tried"


def recommend(rows: list[dict]) -> dict | None:
    """The cheapest row: lowest cost at the target when priced, else fewest GPUs; ties go to the most headroom."""
    def headroom(r: dict) -> float:
        return -r["replicas"] * r["rate_per_replica_rps"]

    feasible = [r for r in rows if r["gpus"] is not None]
    priced = [r for r in feasible if r["cost_per_mtok"] is not None]
    if priced:
        return min(priced, key=lambda r: (r["cost_per_mtok"], r["gpus"], headroom(r)))
    if feasible:
        return min(feasible, key=lambda r: (r["gpus"], headroom(r)))
    return None


# -- every (GPU, method) ---------------------------------------------------------------
def capacity(scenario: Scenario, cfg: CapacitySettings, progress=None, once: OnceWarnings | None = None) -> dict:
    """Plans for every (GPU, method); returns what ``capacity.json`` holds."""
    once = once or OnceWarnings()
    target = cfg.qps or offered_rate(scenario)
    base_rate = offered_rate(probe_scenario(scenario, 1.0, max_requests=cfg.max_requests))
    plans = plan_all(scenario, cfg, target, base_rate, progress, once)
    prices = dict(cfg.prices)
    rows = [plan_row(p, prices) for p in plans]
    slo = cfg.slo
    return {"scenario": scenario.name, "model": scenario.model, "target_rps": target,
            "target_source": "--qps" if cfg.qps else "scenario arrival rate",
            "search_rate_rps_at_x1": base_rate, "rule": describe(slo),
            "slo": {"tpot_ms": slo.tpot_ms, "ttft_ms": slo.ttft_ms, "max_queue_ms": slo.max_queue_ms,
                    "attainment": slo.attainment, "rule": slo.rule},
            "max_requests": cfg.max_requests, "precision": cfg.precision, "max_sims": cfg.max_sims,
            "prices_per_gpu_hour": prices, "rows": rows, "recommendation": recommend(rows),
            "plans": [p.to_dict() for p in plans]}


def plan_all(scenario: Scenario, cfg: CapacitySettings, target: float, base_rate: float, progress,
             once: OnceWarnings) -> list[Plan]:
    """One plan per (GPU, method), in that order; ``cfg.jobs`` worker processes when > 1.

    Plans are independent and seeded, so the answer does not depend on ``jobs``.
    """
    pairs = [(gpu, method) for gpu in cfg.gpus for method in cfg.methods]
    args = {"max_requests": cfg.max_requests, "tp_choices": cfg.tps, "precision": cfg.precision,
            "max_sims": cfg.max_sims}
    plans = []
    if cfg.jobs <= 1 or len(pairs) == 1:
        for gpu, method in pairs:
            on_probe = (lambda tp, p, g=gpu, m=method: progress(g, m, tp, p)) if progress else None
            plans.append(plan(scenario, gpu, method, cfg.slo, target, base_rate, on_probe=on_probe, once=once,
                              **args))
            if progress:
                progress(gpu, method, None, None)
        return plans
    import multiprocessing

    # leaving the block terminates the workers at once: a stop (SIGINT, SIGTERM) or an error in one
    # plan does not wait for the plans still running
    with multiprocessing.Pool(min(cfg.jobs, len(pairs)), initializer=_worker_signals) as pool:
        futures = [pool.apply_async(_plan_quietly, (scenario, gpu, method, cfg.slo, target, base_rate, args))
                   for gpu, method in pairs]
        for (gpu, method), future in zip(pairs, futures):
            p, caught = future.get()
            once.replay(warnings.WarningMessage(text, category, "", 0) for text, category in caught)
            plans.append(p)
            if progress:
                progress(gpu, method, None, None)
    return plans


def _worker_signals() -> None:
    """A worker leaves stopping to the parent: it ignores SIGINT (a terminal's Ctrl-C reaches every
    process of the group) and dies on the parent's SIGTERM at once, without a traceback."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _plan_quietly(scenario, gpu, method, slo, target, base_rate, args) -> tuple[Plan, list]:
    """:func:`plan` in a worker process; its warnings come back to the parent as (text, category)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        p = plan(scenario, gpu, method, slo, target, base_rate, **args)
    return p, [(str(w.message), w.category) for w in caught]
