"""The prefix cache in the engine: a request prefills only its uncached suffix (priced with its
cached context), turning the cache off equals a trace without prefixes, KV stays exact and
under capacity while blocks are shared, evicted and preempted, and the cache-aware router
keeps sessions where their history is cached."""
import csv
import json
from collections import Counter

import numpy as np
import pytest
from conftest import synthetic_scenario

from dspark_sim.cost import get_cost_model
from dspark_sim.cost.base import StepWork
from dspark_sim.serving.replica import Replica
from dspark_sim.run import run_scenario
from dspark_sim.scenario import load_scenario


def _mooncake(path, rows, with_ids=True):
    """``rows``: (arrival ms, prompt, output, hash ids)."""
    with open(path, "w") as f:
        for t, p, o, ids in rows:
            row = {"timestamp": t, "input_length": p, "output_length": o}
            if with_ids:
                row["hash_ids"] = ids
            f.write(json.dumps(row) + "\n")
    return path


def _trace_scenario(trace, **deployment):
    data = synthetic_scenario(deployment=deployment)
    data["workload"] = {"trace": str(trace), "format": "mooncake", "domain": "math"}
    return data


def _run(write_scenario, tmp_path, data, out="out"):
    scenario = load_scenario(write_scenario(data, f"{out}.yaml"))
    return run_scenario(scenario, tmp_path / out, plots=False, show_progress=False)


def _requests(tmp_path, out="out"):
    with open(tmp_path / out / "requests.csv") as f:
        return list(csv.DictReader(f))


def test_a_turn_prefills_only_its_new_tokens_priced_with_its_cached_context(write_scenario, tmp_path):
    trace = _mooncake(tmp_path / "t.jsonl", [(0, 2048, 10, [1, 2, 3, 4]), (10_000, 2348, 10, [1, 2, 3, 4, 5])])
    on, _ = _run(write_scenario, tmp_path, _trace_scenario(trace), "on")
    off, _ = _run(write_scenario, tmp_path, _trace_scenario(trace, prefix_cache=False), "off")
    cost = get_cost_model("h200", "qwen3-8b", 1, warn=False)
    rows = _requests(tmp_path, "on")
    assert [int(r["cached_tokens"]) for r in rows] == [0, 2048]
    want = cost.step_s(StepWork(prefill_tokens=300, prefill_reqs=1, prefill_attn_tokens2=300 * (2048 + 150)))
    assert float(rows[1]["ttft_ms"]) == pytest.approx(want * 1e3, abs=1e-3)
    full = cost.step_s(StepWork(prefill_tokens=2348, prefill_reqs=1, prefill_attn_tokens2=2348 * 1174))
    assert float(_requests(tmp_path, "off")[1]["ttft_ms"]) == pytest.approx(full * 1e3, abs=1e-3)
    pc = on.prefix_cache
    assert pc.hit_rate == pytest.approx(2048 / (2048 + 2348))
    assert pc.block_hit_rate == pytest.approx(4 / 9)
    assert pc.prefill_tokens_saved == 2048 and pc.prefill_tokens_computed == 2048 + 300
    assert off.prefix_cache.enabled is False and off.prefix_cache.hit_rate == 0.0


def test_cache_off_equals_the_same_trace_without_prefixes(write_scenario, tmp_path):
    rng = np.random.default_rng(3)
    rows = [(int(t), 600 + 512 * (i % 3), 40, [7, 8, 9, 100 + i][: 2 + i % 3])
            for i, t in enumerate(np.cumsum(rng.integers(5, 200, 60)))]
    with_ids = _mooncake(tmp_path / "ids.jsonl", rows)
    without = _mooncake(tmp_path / "none.jsonl", rows, with_ids=False)
    off, _ = _run(write_scenario, tmp_path, _trace_scenario(with_ids, prefix_cache=False), "off")
    plain, _ = _run(write_scenario, tmp_path, _trace_scenario(without), "plain")
    on, _ = _run(write_scenario, tmp_path, _trace_scenario(with_ids), "on")
    for name in ("requests.csv", "steps.csv"):
        assert (tmp_path / "off" / name).read_bytes() == (tmp_path / "plain" / name).read_bytes()
    assert plain.prefix_cache is None and off.prefix_cache.hit_rate == 0.0
    assert on.prefix_cache.hit_rate > 0.3 and on.mean_ttft_ms < off.mean_ttft_ms


def _sessions(num_requests, rate, **deployment):
    data = synthetic_scenario(deployment=deployment)
    data["workload"]["synthetic"] = {
        "num_requests": num_requests, "rate_per_s": rate,
        "prompt_tokens": {"dist": "lognormal", "mean": 300, "sigma": 0.8, "max_tokens": 3000},
        "output_tokens": {"dist": "lognormal", "mean": 120, "sigma": 0.5, "max_tokens": 600},
        "sessions": {"kind": "chat", "shared_prefix_tokens": 1500, "shared_prefixes": 3, "turn_gap_s": 4,
                     "max_prompt_tokens": 12000}}
    return data


def _tree(cache):
    nodes, stack = [], [cache.root]
    while stack:
        kids = list(stack.pop().children.values())
        nodes += kids
        stack += kids
    return nodes


def _audit(replica, step):
    """Recount the cache from scratch and check the KV the step runs with."""
    cache = replica.prefix
    nodes = _tree(cache)
    assert sum(n.tokens for n in nodes) == cache.tree_tokens
    assert sum(n.tokens for n in nodes if n.ref == 0) == cache.idle_tokens
    refs = Counter(id(n) for ch in cache.chains.values() for n in ch.nodes)
    for n in nodes:
        assert n.ref == refs[id(n)]
        assert n.parent is cache.root or n.parent.ref >= n.ref  # references run from the root
    assert sum(ch.shared for ch in cache.chains.values()) == cache.shared_tokens
    c, k = replica.running.cols, replica.running.n
    held = c.prefilled[:k] + c.generated[:k] - c.kv_base[:k]
    shared = np.array([cache.chains[r].shared if r in cache.chains else 0 for r in c.rid[:k].tolist()])
    assert (shared <= held).all()
    occupancy = cache.tree_tokens + int((held - shared).sum()) + k * replica.kv_per_request + step.tokens
    assert occupancy <= replica.kv_capacity
    assert step.kv_needed + cache.idle_tokens == occupancy


def test_kv_stays_exact_and_under_capacity_with_sharing_eviction_and_preemption(write_scenario, tmp_path,
                                                                                  monkeypatch):
    plan, seen = Replica._plan, Counter()

    def audited(self):
        step = plan(self)
        if step is not None:
            _audit(self, step)
            seen["steps"] += 1
            seen["evicted"] += step.evicted_blocks
        return step

    monkeypatch.setattr(Replica, "_plan", audited)
    data = _sessions(300, 3.0, gpu_memory_fraction=0.135, max_batched_tokens=4096)  # about 24k KV tokens
    summary, result = _run(write_scenario, tmp_path, data)
    assert summary.completed == 300 and result.kv_capacity_tokens < 40_000
    assert seen["evicted"] > 0 and summary.num_preemptions > 0
    pc = summary.prefix_cache
    assert pc.hit_rate > 0.2 and pc.evicted_blocks == seen["evicted"]
    with open(tmp_path / "out" / "steps.csv") as f:
        assert sum(int(r["evicted_blocks"]) for r in csv.DictReader(f)) == seen["evicted"]


def test_prefill_computed_plus_cached_is_every_prompt(write_scenario, tmp_path):
    summary, _ = _run(write_scenario, tmp_path, _sessions(200, 2.0))
    rows = _requests(tmp_path)
    assert summary.num_preemptions == 0
    prompts = sum(int(r["prompt_tokens"]) for r in rows)
    cached = sum(int(r["cached_tokens"]) for r in rows)
    pc = summary.prefix_cache
    assert pc.prefill_tokens_computed + cached == prompts and pc.prefill_tokens_saved == cached
    assert all(int(r["cached_tokens"]) % 16 == 0 and int(r["cached_tokens"]) < int(r["prompt_tokens"]) for r in rows)


def test_the_cache_aware_router_keeps_sessions_on_their_cache(write_scenario, tmp_path):
    rates = {}
    for router in ("round_robin", "least_outstanding", "cache_aware"):
        summary, _ = _run(write_scenario, tmp_path, _sessions(300, 2.0, replicas=4, router=router), router)
        rates[router] = summary.prefix_cache.hit_rate
    assert rates["cache_aware"] > rates["round_robin"] + 0.15
    assert rates["cache_aware"] > rates["least_outstanding"] + 0.15


def test_a_cache_block_that_splits_a_hash_block_is_refused_only_when_requests_carry_hash_ids(write_scenario,
                                                                                            tmp_path):
    from dspark_sim.errors import InputError

    trace = _mooncake(tmp_path / "t.jsonl", [(0, 64, 4, [1]), (10, 64, 4, [1])])
    with pytest.raises(InputError, match=r"deployment\.prefix_block_tokens=3: .*hash_block_tokens=512"):
        load_scenario(write_scenario(_trace_scenario(trace, kv_block_tokens=3), "hashed.yaml"))
    plain = synthetic_scenario(num_requests=2)
    plain["deployment"]["kv_block_tokens"] = 3
    summary, _ = _run(write_scenario, tmp_path, plain, "plain")  # no hash ids: nothing to split, the run goes on
    assert summary.completed == 2
