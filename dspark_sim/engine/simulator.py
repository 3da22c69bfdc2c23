"""Wire a scenario into a simpy run: workload -> router -> replicas -> collector."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np
import simpy

from dspark_sim.catalog import get_gpu, get_model
from dspark_sim.cost import scenario_cost
from dspark_sim.engine.kv import kv_capacity_tokens, kv_request_tokens
from dspark_sim.engine.prefix import PrefixCache
from dspark_sim.engine.replica import Replica
from dspark_sim.engine.router import make_router
from dspark_sim.metrics.collector import Collector
from dspark_sim.names import DOMAINS
from dspark_sim.scenario import Scenario
from dspark_sim.speculation.policy import make_policy


@dataclass
class SimContext:
    """What every replica shares: scenario, cost model, acceptance model, collector."""

    scenario: Scenario
    cost: object
    acceptance: object
    kv_capacity_tokens: int
    collector: Collector
    sps: object = None
    kv_request_tokens: int = 0  # KV tokens every running request holds besides its length
    max_context: int = 0  # the model's context: longer requests are rejected (0: no bound)
    prefix_block_tokens: int = 0  # the prefix cache's block (0: the cache is off)
    saw_prefixes: bool = False  # some request carried prefix hash ids

    def make_policy(self):
        spec = self.scenario.speculation
        return make_policy(spec, self.sps, self.scenario.deployment.max_batched_tokens)

    def make_prefix_cache(self) -> PrefixCache | None:
        """A replica's own prefix cache, or None when the deployment turns it off."""
        if not self.prefix_block_tokens:
            return None
        return PrefixCache(self.prefix_block_tokens, self.scenario.workload.hash_block_tokens)


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
    prefix: dict | None = None  # the prefix caches' counters, when requests carried hash ids


def build_context(scenario: Scenario, collector: Collector) -> SimContext:
    """Resolve names in the scenario into the models a run needs."""
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
    kv = kv_capacity_tokens(model, gpu, dep, file=scenario.file)
    ctx = SimContext(scenario, cost, acceptance, kv, collector, kv_request_tokens=kv_request_tokens(model, dep),
                     max_context=model.max_context,
                     prefix_block_tokens=dep.prefix_block(model) if dep.prefix_cache else 0)
    if spec.method == "dspark":
        ctx.sps = scheduler_sps(scenario, cost)
    return ctx


def scheduler_table(scenario: Scenario, cost):
    """The SGLang SPS table the DSpark scheduler reads: the scenario's file, or one derived
    from the cost model (additive form, the drafter's cost in alpha)."""
    from dspark_sim.cost.sps import load_sps_table, sps_from_cost_model

    spec, dep = scenario.speculation, scenario.deployment
    if spec.sps_table is not None:
        return load_sps_table(spec.sps_table)
    return sps_from_cost_model(cost, max_batch_tokens=dep.max_batched_tokens, additive=True,
                               draft_kind=spec.draft_kind, block_size=spec.block_size)


def scheduler_sps(scenario: Scenario, cost):
    """The vectorised SPS lookup of :func:`scheduler_table`."""
    return scheduler_table(scenario, cost).steps_per_sec_array


def simulate(scenario: Scenario, out_dir: Path | None = None, progress=None) -> RunResult:
    """Run the scenario to completion; per-request/step CSVs go to ``out_dir`` if given."""
    collector = Collector(out_dir)
    ctx = build_context(scenario, collector)
    seeds = np.random.SeedSequence(scenario.seed).spawn(scenario.deployment.replicas + 1)
    env = simpy.Environment()
    replicas = [Replica(env, i, ctx, np.random.default_rng(s)) for i, s in enumerate(seeds[1:])]
    router = make_router(scenario.deployment.router, replicas)
    chunks = scenario.workload.requests(scenario.seed)
    counter = {"arrived": 0}
    env.process(_arrivals(env, chunks, ctx, router, np.random.default_rng(seeds[0]), counter, progress))
    try:
        env.run()
    finally:
        collector.close()
    return RunResult(scenario, collector, counter["arrived"], env.now,
                     ctx.kv_capacity_tokens, max(r.kv_peak for r in replicas),
                     int(collector.requests["num_preemptions"].sum()),
                     prefix_counters(ctx, replicas) if ctx.saw_prefixes else None)


def prefix_counters(ctx: SimContext, replicas) -> dict:
    """The replicas' prefix-cache counters summed (all zero with the cache off), and its block."""
    from dataclasses import fields

    from dspark_sim.engine.prefix import Counters

    caches = [r.prefix.counters for r in replicas if r.prefix is not None]
    out = {f.name: sum(getattr(c, f.name) for c in caches) for f in fields(Counters)}
    out["peak_tokens"] = max((c.peak_tokens for c in caches), default=0)  # the fullest replica's
    out.update(enabled=bool(caches), block_tokens=ctx.prefix_block_tokens,
               hash_block_tokens=ctx.scenario.workload.hash_block_tokens)
    return out


def _arrivals(env: simpy.Environment, chunks: Iterator, ctx: SimContext, router, rng, counter, progress):
    """Release requests at their arrival times, each with a domain and a difficulty."""
    names, weights = zip(*ctx.scenario.workload.domain_mix)
    domain_ids = np.array([DOMAINS.index(n) for n in names], dtype=np.int8)
    cum = np.cumsum(weights)
    rid = 0
    for chunk in chunks:
        n = chunk.arrival_s.size
        domain = domain_ids[np.minimum(np.searchsorted(cum, rng.random(n), side="right"), len(cum) - 1)]
        difficulty = ctx.acceptance.new_requests(domain, rng) if ctx.acceptance else np.zeros(n)
        arrival = chunk.arrival_s.tolist()
        prompt = chunk.prompt_tokens.tolist()
        output = chunk.output_tokens.tolist()
        dom = domain.tolist()
        diff = difficulty.tolist()
        hash_ids = chunk.hash_ids if chunk.hash_ids is not None else [None] * n
        ctx.saw_prefixes = ctx.saw_prefixes or any(hash_ids)
        for i in range(n):
            delay = arrival[i] - env.now
            if delay > 0:
                yield env.timeout(delay)
            router.route({"rid": rid, "arrival_s": arrival[i], "prompt_tokens": prompt[i],
                          "output_tokens": output[i], "domain": dom[i], "difficulty": diff[i],
                          "prefill_len": prompt[i], "prefilled": 0, "generated": 0, "kv_base": 0,
                          "first_scheduled_s": -1.0, "first_token_s": -1.0, "last_token_s": -1.0,
                          "num_steps": 0, "num_preemptions": 0, "accepted_tokens": 0,
                          "verified_drafts": 0, "cached_tokens": 0, "hash_ids": hash_ids[i]})
            rid += 1
        counter["arrived"] = rid
        if progress is not None:
            progress(rid, env.now)
