"""Wire a scenario into a simpy run: workload -> router -> replicas -> collector."""
from __future__ import annotations

import math
import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np
import simpy

from dspark_sim.catalog import get_gpu, get_model
from dspark_sim.config import located
from dspark_sim.cost import scenario_cost
from dspark_sim.serving.admission import Admission
from dspark_sim.serving.client import ClosedLoop
from dspark_sim.serving.frontend import FrontEnd
from dspark_sim.serving.kv import kv_capacity_tokens, kv_request_tokens
from dspark_sim.serving.prefix import CacheTotals, Counters
from dspark_sim.serving.context import SimContext
from dspark_sim.serving.replica import Replica
from dspark_sim.serving.request import Request
from dspark_sim.serving.router import make_router
from dspark_sim.serving.release import Release
from dspark_sim.errors import InputError, raise_if_stopped
from dspark_sim.limits import MAX_RUN_TOKENS
from dspark_sim.metrics.collector import Collector
from dspark_sim.metrics.invariants import check_run
from dspark_sim.names import DOMAINS
from dspark_sim.scenario import Scenario
EXACT_ENV = "DSPARK_SIM_EXACT"  # set to 1: every simulation steps one event per engine step


@dataclass
class RunResult:
    """A finished simulation: the collector's data plus run facts."""

    scenario: Scenario
    collector: Collector
    num_arrived: int
    sim_end_s: float
    kv_capacity_tokens: int
    kv_peak_tokens: int
    num_preemptions: int
    prefix: CacheTotals | None = None  # the prefix caches' counters, when requests carried hash ids
    longest_request_tokens: int | None = None  # prompt + output a replica serves at most
    provenance: dict | None = None  # where the cost and acceptance come from (dspark_sim.provenance)


def build_context(scenario: Scenario, collector: Collector, skip_ahead: bool = True) -> SimContext:
    """Resolve names in the scenario into the models a run needs (``skip_ahead``: advance steady
    decode steps in stretches)."""
    from dspark_sim.acceptance import AcceptanceModel

    dep = scenario.deployment
    model = get_model(scenario.model, file=scenario.file)
    gpu = get_gpu(scenario.gpu, file=scenario.file)
    cost = scenario_cost(scenario)
    spec = scenario.speculation
    acceptance = None
    if spec.method != "none":
        acceptance = AcceptanceModel(spec.acceptance, scenario.model, file=scenario.file)
        if spec.sts is not None and acceptance.presets:
            from dspark_sim.acceptance.sts import load_sts_temperatures

            acceptance = acceptance.with_sts(load_sts_temperatures(spec.sts, file=scenario.file))
    engine = scenario.engine
    kv = engine.held_kv_tokens(kv_capacity_tokens(model, gpu, dep, file=scenario.file), model, dep.kv_block_tokens)
    cap = engine.running_cap(kv, model.max_context)
    per_request = kv_request_tokens(model, dep)
    block = dep.prefix_block(model)  # divides hash_block_tokens whenever requests carry hash ids (Scenario)
    return SimContext(scenario, cost, acceptance, kv, collector, Admission.of(model.max_context, kv, per_request, spec),
                      sps=scheduler_sps(scenario, cost) if spec.method == "dspark" else None,
                      kv_request_tokens=per_request,
                      prefix_block_tokens=block if dep.prefix_cache and
                      scenario.workload.hash_block_tokens % block == 0 else 0,
                      max_running=min(dep.max_running_requests, cap) if cap is not None else 0,
                      frontend=front_end(engine, dep), skip_ahead=skip_ahead,
                      overlap=engine.overlapped, kv_reserve=engine.kv_reserve_for(dep.dp_attention),
                      multi_step=engine.multi_step,
                      ranks_prefill_apart=engine.ranks_prefill_apart(spec.method != "none"),
                      # the engines' MoE roofline: the first token's latency beyond its steps (cost/roofline.py)
                      intake_latency_s=getattr(cost, "first_token_s", 0.0))


def front_end(engine, dep) -> FrontEnd | None:
    """The engine's front-end process, or None where its host terms give it no time (the
    decoder: its tokens reach the client when their step ends)."""
    shared, processes = engine.front_end_layout(dep.parallel.dp_ranks)
    frontend = FrontEnd(engine.terms.frontend_s, engine.terms.stream_s, dep.replicas, processes=processes,
                        shared=shared)
    return frontend if frontend.active else None


def scheduler_table(scenario: Scenario, cost):
    """The SGLang SPS table the DSpark scheduler reads: the scenario's file, or one derived
    from the cost model (additive form, the drafter's cost in alpha)."""
    from dspark_sim.cost.sps import default_probes, load_sps_table, sps_from_cost_model

    spec, dep = scenario.speculation, scenario.deployment
    if spec.sps_table is not None:
        return load_sps_table(spec.sps_table)
    # probes reach every request count the deployment admits and every verify-token count
    # it can ask for (R requests x the full window), so neither engine nor simulator clamps
    reqs = default_probes(dep.max_running_requests)
    tokens = max(dep.max_batched_tokens, dep.max_running_requests * (spec.block_size + 1))
    return sps_from_cost_model(cost, num_reqs_probes=reqs, max_batch_tokens=tokens, additive=True,
                               draft_kind=spec.draft_kind, block_size=spec.block_size)


def scheduler_sps(scenario: Scenario, cost):
    """The vectorised SPS lookup of :func:`scheduler_table`."""
    return scheduler_table(scenario, cost).steps_per_sec_array


def simulate(scenario: Scenario, out_dir: Path | None = None, progress=None, *,
             exact: bool | None = None) -> RunResult:
    """Run the scenario to completion; per-request/step CSVs go to ``out_dir`` if given.

    Steady decode steps advance in stretches (:mod:`dspark_sim.serving.stretch`) unless
    ``exact`` asks for one simulation event per engine step (default: the scenario's
    ``exact``, or the environment variable ``DSPARK_SIM_EXACT=1``, which reaches every
    simulation of a command and its worker processes); both give the same numbers.
    """
    env = simpy.Environment()
    collector = Collector(out_dir, scenario.deployment.replicas, lambda: env.now)
    if exact is None:
        exact = scenario.exact or os.environ.get(EXACT_ENV, "") not in ("", "0")
    try:
        ctx = build_context(scenario, collector, skip_ahead=not exact)
        if ctx.frontend is not None:  # the record gives the times the client sees
            collector.through_front_end(ctx.frontend)
        check_work_bound(scenario, ctx.admission)
        seeds = np.random.SeedSequence(scenario.seed).spawn(scenario.deployment.replicas + 1)
        replicas = [Replica(env, i, ctx, np.random.default_rng(s)) for i, s in enumerate(seeds[1:])]
        router = make_router(scenario.deployment.router, replicas)
        chunks = scenario.workload.requests(scenario.seed)
        counter = {"arrived": 0}
        client = None
        if scenario.workload.max_concurrency is not None:  # a client with at most this many requests in flight
            client = ClosedLoop(env, scenario.workload.max_concurrency)
            collector.on_done = client.done
        env.process(_arrivals(env, chunks, ctx, router, np.random.default_rng(seeds[0]), counter, progress,
                              client, replicas))
        with located(scenario.file, None):  # the workload's own errors name the scenario file
            env.run()
    finally:
        collector.close()
    from dspark_sim.provenance import scenario_provenance

    result = RunResult(scenario, collector, counter["arrived"], env.now, ctx.kv_capacity_tokens,
                       max(r.kv_peak for r in replicas), int(collector.requests.num_preemptions.sum()),
                       prefix_counters(ctx, replicas) if ctx.arrivals.saw_prefixes else None, ctx.admission.longest_tokens,
                       scenario_provenance(scenario, ctx.cost))
    check_run(result)
    report_rejections(result, ctx.admission)
    return result


class AllRejected(InputError):
    """Every request of a run was rejected: nothing can run. ``reasons``: the reasons given."""

    def __init__(self, file, value, why: str, reasons: tuple[str, ...]):
        super().__init__(file, "workload", value, why)
        self.reasons = reasons


def report_rejections(result: RunResult, admission: Admission) -> None:
    """One warning line with the count of rejected requests and why; AllRejected when none ran."""
    col = result.collector
    if not col.rejected:
        return
    model = result.scenario.model
    why = "; ".join(f"{n} {admission.explain(reason, model)}" for reason, n in sorted(col.rejected_by.items()))
    if col.rejected == result.num_arrived:
        raise AllRejected(result.scenario.file, f"{col.rejected} request(s)",
                          f"every request is rejected, as vLLM and SGLang would refuse them ({why}): nothing "
                          "to simulate", tuple(sorted(col.rejected_by)))
    warnings.warn(f"{col.rejected} of {result.num_arrived} requests rejected, as vLLM and SGLang would refuse "
                  f"them ({why}); counted as rejected in summary.json and requests.csv", RejectedWarning)


class RejectedWarning(UserWarning):
    """Requests of a run were rejected on arrival (counted in the run's outputs)."""


def check_work_bound(scenario: Scenario, admission: Admission) -> None:
    """Refuse, before it starts, a run whose work bound (requests x the longest request a replica
    serves) exceeds limits.MAX_RUN_TOKENS; under it, no run can outgrow its bound."""
    from dspark_sim.workload import count_requests

    wl = scenario.workload
    longest = max(admission.longest_tokens, 0)
    if wl.synthetic is not None:
        n = wl.synthetic.num_requests
    elif wl.max_requests is not None and wl.max_requests * longest <= MAX_RUN_TOKENS:
        return  # no need to count the trace's rows
    else:
        n = min(count_requests(wl.trace, wl.format), wl.max_requests or MAX_RUN_TOKENS)
    if n * longest > MAX_RUN_TOKENS:
        raise InputError(scenario.file, "workload", f"{n} requests",
                         f"{n} requests of up to {longest} tokens each (the longest request a replica serves) "
                         f"bound the run at {n * longest:.3g} tokens, above the {MAX_RUN_TOKENS:.3g} a run may "
                         "simulate: split the workload")


def prefix_counters(ctx: SimContext, replicas) -> CacheTotals:
    """The replicas' prefix-cache counters summed (all zero with the cache off), and its block."""
    from dataclasses import fields

    caches = [r.prefix.counters for r in replicas if r.prefix.enabled]
    summed = Counters(**{f.name: sum(getattr(c, f.name) for c in caches) for f in fields(Counters)})
    summed.peak_tokens = max((c.peak_tokens for c in caches), default=0)  # the fullest replica's
    return CacheTotals(summed, bool(caches), ctx.prefix_block_tokens, ctx.scenario.workload.hash_block_tokens)


def _arrivals(env: simpy.Environment, chunks: Iterator, ctx: SimContext, router, rng, counter, progress,
              client: ClosedLoop | None = None, replicas: tuple[Replica, ...] = ()):
    """Release requests at their arrival times, each with a domain and a difficulty; a ``client``
    with as many requests in flight as it keeps holds the next back until one is done
    (:mod:`dspark_sim.serving.client`). With skip-ahead and neither a client nor a front end, the
    arrivals during a step are released together (:mod:`dspark_sim.serving.release`)."""
    names, weights = zip(*ctx.scenario.workload.domain_mix)
    domain_ids = np.array([DOMAINS.index(n) for n in names], dtype=np.int8)
    cum = np.cumsum(weights)
    # the front end (HTTP, template, tokenizer; streaming) takes in one request at a time, in
    # arrival order: a burst queues there before the scheduler sees it (serving/frontend.py)
    frontend, feed = ctx.frontend, ctx.arrivals
    clock = Release(env, replicas, ctx.skip_ahead and client is None and frontend is None)
    rid = 0
    for chunk in chunks:
        raise_if_stopped()
        n = chunk.arrival_s.size
        domain = domain_ids[np.minimum(np.searchsorted(cum, rng.random(n), side="right"), len(cum) - 1)]
        difficulty = ctx.acceptance.new_requests(domain, rng) if ctx.acceptance else np.zeros(n)
        arrival = chunk.arrival_s.tolist()
        prompt = chunk.prompt_tokens.tolist()
        output = chunk.output_tokens.tolist()
        dom = domain.tolist()
        diff = difficulty.tolist()
        hash_ids = chunk.hash_ids if chunk.hash_ids is not None else [None] * n
        feed.saw_prefixes = feed.saw_prefixes or any(hash_ids)
        for i in range(n):
            enter = arrival[i]
            if client is not None:
                while client.full:  # any step's end may free a slot: no stretch of steps passes now
                    feed.next_s = env.now
                    yield client.freed()
                enter = arrival[i] = client.sent(enter)
                clock.waited()
            if frontend is not None:
                feed.next_s = enter  # it reaches the front end
                if enter > env.now:
                    yield env.timeout(enter - env.now)
                enter = frontend.take_in(enter)  # first come first served from its arrival
                ctx.collector.front_end_settled(arrival[i])
                clock.waited()
            enter += ctx.intake_latency_s  # every request's alike, none waiting for another's
            feed.next_s = enter  # when it reaches the replica
            yield from clock.reach(enter)
            # the clock may land an ulp short of the arrival time: a request is never seen
            # before it arrives (no negative queue delay)
            router.route(Request(rid, min(arrival[i], clock.now_s), prompt[i], output[i], dom[i], diff[i], prompt[i],
                                 hash_ids=hash_ids[i], ready_s=clock.now_s))
            rid += 1
        counter["arrived"] = rid
        if progress is not None:
            progress(rid, clock.now_s)
    feed.next_s = math.inf
