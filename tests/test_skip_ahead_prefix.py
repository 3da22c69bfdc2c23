"""Skip-ahead with the prefix cache on: the same numbers as step-by-step mode, bit for bit.

A stretch reads the KV the running requests share through cached blocks as a step does, stops
before a step that would evict cached blocks (step by step evicts there) and before a finish
that releases a request's references; multi-turn sessions at a load where the cache fills
and evicts check it, beside a roomy cache and every kind of method.
"""
from __future__ import annotations

import csv

import pytest

from dspark_sim.scenario import Scenario
from test_skip_ahead import METHODS, assert_identical


def sessions(method: str, *, seed: int, memory: float, replicas: int = 1, router: str = "round_robin") -> Scenario:
    """Chat sessions resending their conversation; ``memory`` sizes the KV cache (small: evictions)."""
    return Scenario.from_dict({
        "name": "skip-prefix", "model": "qwen3-8b", "gpu": "h200", "seed": seed,
        "workload": {"synthetic": {"num_requests": 80, "rate_per_s": 3.0, "arrival": "poisson",
                                   "prompt_tokens": {"dist": "lognormal", "mean": 400, "sigma": 0.8,
                                                     "max_tokens": 4000},
                                   "output_tokens": {"dist": "lognormal", "mean": 150, "sigma": 0.6,
                                                     "max_tokens": 1000},
                                   "sessions": {"kind": "chat", "shared_prefix_tokens": 1500, "shared_prefixes": 4,
                                                "turn_gap_s": 2, "max_prompt_tokens": 12000}},
                     "domain": "chat"},
        "deployment": {"replicas": replicas, "router": router, "max_running_requests": 64,
                       "gpu_memory_fraction": memory, "chunked_prefill_tokens": 2048, "prefix_cache": True},
        "speculation": METHODS[method]})


def _evicted(tmp_path) -> int:
    with open(tmp_path / "exact" / "steps.csv") as f:
        return sum(int(row["evicted_blocks"]) for row in csv.DictReader(f))


@pytest.mark.parametrize("method", ["none", "static", "production"])
def test_skip_ahead_is_step_by_step_with_a_roomy_prefix_cache(method, tmp_path):
    summary = assert_identical(sessions(method, seed=5, memory=0.9, replicas=2, router="cache_aware"), tmp_path)
    assert summary.completed == 80


@pytest.mark.parametrize("method", ["none", "static", "production"])
def test_skip_ahead_is_step_by_step_while_the_prefix_cache_evicts(method, tmp_path):
    summary = assert_identical(sessions(method, seed=7, memory=0.15), tmp_path)
    assert summary.completed == 80
    assert _evicted(tmp_path) > 0  # the cache filled up: steps evicted cached blocks
