"""DP attention as the engines run it: a scheduler and host terms per rank, attention batched per
rank (a step waits for the busiest rank), MoE over every rank's tokens."""
from __future__ import annotations

import math
import warnings
import zlib

import numpy as np
import pytest
from conftest import synthetic_scenario
from test_cost_vectorised import assert_same, random_works

from dspark_sim.catalog import get_gpu, get_model
from dspark_sim.cost import RooflineCost, StepWork, get_cost_model
from dspark_sim.cost.base import StepWorks
from dspark_sim.engines.step_cost import EngineCost
from dspark_sim.cost.parallel import Parallel, busiest_rank, rank_share
from dspark_sim.serving.simulator import build_context
from dspark_sim.engines.model import KV_RESERVE, Engine, EngineTerms
from dspark_sim.metrics.collector import Collector
from dspark_sim.scenario import Scenario

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")
DP8 = Parallel(8, 8, True)


def test_requests_are_dealt_round_robin_over_the_ranks():
    assert [busiest_rank(r, 8) for r in (0, 1, 8, 9, 1024)] == [0, 1, 1, 2, 128]
    assert busiest_rank(np.array([1, 8, 9]), 4).tolist() == [1, 2, 3]
    assert busiest_rank(7, 1) == 7
    # the busiest rank over an even split: one request's attention is all on one GPU
    assert [rank_share(r, 8) for r in (1, 4, 8, 9, 1024)] == pytest.approx([8.0, 2.0, 1.0, 16 / 9, 1.0])
    assert rank_share(0, 8) == 1.0 and rank_share(5, 1) == 1.0


def test_the_host_time_per_request_is_the_busiest_ranks():
    """At 1,024 running requests on 8 ranks each scheduler handles 128: the host term is 128
    requests' time, not 1,024's (one host loop for the whole replica)."""
    gpu = RooflineCost(get_model("deepseek-v3"), get_gpu("h200"), parallel=DP8)
    terms = EngineTerms(step_host_s=1e-3, step_host_s_per_req=1.6e-4)
    one_loop = EngineCost(gpu, terms, label="sglang")
    per_rank = EngineCost(gpu, terms, label="sglang", dp_ranks=8)
    work = StepWork(decode_reqs=1024, verify_tokens=1024, decode_context_tokens=1024 * 2000)
    assert one_loop.breakdown(work)["engine_s"] == pytest.approx(1e-3 + 1024 * 1.6e-4)
    assert per_rank.breakdown(work)["engine_s"] == pytest.approx(1e-3 + 128 * 1.6e-4)
    works = StepWorks.of([work, StepWork(3, 3, 300), StepWork(0, 0, 0, 500, 2, 1e5)])
    assert per_rank.breakdown_array(works)["engine_s"].tolist() == [per_rank.breakdown(works.at(i))["engine_s"]
                                                                  for i in range(3)]


def test_one_request_keeps_one_rank_busy_with_its_whole_attention():
    """Each rank attends over its own requests: one request, or one on each of 8 ranks, take
    one request's attention on one GPU; a ninth doubles the busiest rank's."""
    dp = RooflineCost(get_model("deepseek-v3"), get_gpu("h200"), parallel=DP8)

    def attn(reqs):
        return dp.breakdown(StepWork(reqs, reqs, reqs * 8000))["attn_s"]

    assert attn(8) == pytest.approx(attn(1))
    assert attn(9) == pytest.approx(2 * attn(1))
    assert attn(1024) == pytest.approx(128 * attn(1))


@pytest.mark.parametrize("gpu, model, tp", [("h200", "qwen3-30b-a3b", 4), ("b300", "deepseek-v4-flash", 8)])
@pytest.mark.parametrize("kind", [None, "chain"])
def test_the_vectorised_path_prices_dp_attention_as_the_scalar_one(gpu, model, tp, kind):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cost = get_cost_model(gpu, model, parallel=Parallel(tp, tp, True))
    assert cost.dp_ranks == tp
    rng = np.random.default_rng(zlib.crc32(f"{gpu}/{model}/{kind}".encode()))
    assert_same(cost, StepWorks.of(random_works(rng, kind, 200)))
    for n in (1, 3, 64):  # a stretch: one request count for all its steps
        ctx = np.cumsum(rng.integers(n, n * 8, 20)) + n * 500
        assert_same(cost, StepWorks(n, n, ctx, decode_max_context=ctx // n, running_reqs=n))


def test_a_profile_prices_a_lone_request_on_one_rank():
    """The profile's KV terms are split evenly over the ranks; a lone request's attention is one
    rank's whole work, four times the even share on four ranks (the terms are linear in context)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dp = get_cost_model("h200", "qwen3-30b-a3b", parallel=Parallel(4, 4, True))
    lone = StepWork(1, 1, 8000, decode_max_context=8000)
    busiest = dp.breakdown(lone)["attn_s"]
    dp.dp_ranks = 1  # the same terms, evenly split
    assert busiest == pytest.approx(4 * dp.breakdown(lone)["attn_s"], rel=1e-12)
    dp.dp_ranks = 4
    eight = StepWork(8, 8, 8 * 8000, decode_max_context=8000)
    assert dp.breakdown(eight)["attn_s"] == pytest.approx(dp.breakdown(eight)["attn_s"])  # balanced: unchanged
    dp.dp_ranks = 1
    even = dp.breakdown(eight)["attn_s"]
    dp.dp_ranks = 4
    assert dp.breakdown(eight)["attn_s"] == pytest.approx(even, rel=1e-12)


def test_engines_capture_graphs_and_reserve_kv_per_rank():
    h200 = get_gpu("h200")
    sglang = Engine("sglang")
    assert sglang.graph_max_batch(h200, 8, dp_ranks=8) == 8 * sglang.graph_max_batch(h200, 8)
    assert Engine("vllm").graph_max_batch(h200, 8, 256, dp_ranks=8) == 8 * 512
    base, dp = sglang.kv_reserve_for(False), sglang.kv_reserve_for(True)
    assert base == KV_RESERVE["sglang"]
    assert dp.running_init == pytest.approx(0.7 * 0.3) and dp.running_min == pytest.approx(0.7 * 0.14 * 0.3)
    assert dp.new_ratio == 1.0 and dp.decay_steps == 600
    assert Engine("vllm").kv_reserve_for(True) is None


def test_a_dp_attention_scenario_prices_per_rank():
    raw = synthetic_scenario(model="deepseek-v3", gpu="h200", engine="sglang",
                             deployment={"replicas": 1, "tp": 8, "ep": 8, "dp_attention": True})
    scenario = Scenario.from_dict(raw)
    ctx = build_context(scenario, Collector(None))
    assert ctx.cost.dp_ranks == 8 and ctx.cost.gpu.parallel.dp_ranks == 8
    assert math.isclose(ctx.kv_reserve.running_init, 0.21)
