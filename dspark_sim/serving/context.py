"""What every replica of a simulation shares: :class:`SimContext`, complete when built."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from dspark_sim.cost.base import CostModel
from dspark_sim.metrics.collector import Collector
from dspark_sim.scenario import Scenario
from dspark_sim.serving.admission import Admission
from dspark_sim.serving.frontend import FrontEnd
from dspark_sim.serving.prefix import NoPrefixCache, PrefixCache
from dspark_sim.speculation.dspark import SpsFn
from dspark_sim.speculation.policy import Policy, make_policy

if TYPE_CHECKING:
    from dspark_sim.acceptance import AcceptanceModel
    from dspark_sim.engines.model import KvReserve


@dataclass(slots=True)
class Arrivals:
    """Where the arrivals stand, which every replica reads: when the next request reaches the
    replicas (the stretches stop there) and whether any request carried prefix hash ids."""

    next_s: float = math.inf
    saw_prefixes: bool = False


@dataclass(frozen=True, slots=True)
class SimContext:
    """What every replica shares, complete when built: scenario, cost model, acceptance model,
    the DSpark scheduler's SPS lookup, the engine's limits, the collector and the arrivals."""

    scenario: Scenario
    cost: CostModel
    acceptance: AcceptanceModel | None  # None: no speculation
    kv_capacity_tokens: int
    collector: Collector
    admission: Admission  # which requests a replica serves; the others are rejected
    sps: SpsFn | None = None  # the DSpark scheduler's steps-per-second lookup (None: not DSpark)
    kv_request_tokens: int = 0  # KV tokens every running request holds besides its length
    prefix_block_tokens: int = 0  # the prefix cache's block (0: the cache is off)
    max_running: int = 0  # running-request cap of the engine (0: the deployment's)
    frontend: FrontEnd | None = None  # the engine's front-end process (intake and streaming), if it has one
    skip_ahead: bool = True  # advance steady decode steps in stretches (serving/stretch.py)
    overlap: bool = False  # step n+1 planned while step n runs (engines.Engine.overlapped)
    kv_reserve: KvReserve | None = None  # KV the engine reserves at admission for output to come
    multi_step: int = 1  # decode steps run per schedule (engines.Engine.multi_step)
    ranks_prefill_apart: bool = False  # DP attention: no rank decodes while any prefills (serving/ranks.py)
    intake_latency_s: float = 0.0  # a latency every request's intake takes, shared rather than queued
    arrivals: Arrivals = field(default_factory=Arrivals)

    def make_policy(self) -> Policy:
        spec = self.scenario.speculation
        return make_policy(spec, self.sps, self.scenario.deployment.max_batched_tokens)

    def make_prefix_cache(self) -> PrefixCache:
        """A replica's own prefix cache (one that caches nothing when the deployment turns it off)."""
        if not self.prefix_block_tokens:
            return NoPrefixCache()
        return PrefixCache(self.prefix_block_tokens, self.scenario.workload.hash_block_tokens)
