"""DP attention's ranks inside a replica: each rank prefills its own requests within its share of
the chunk, a rank that prefills does not decode while the others do (with SGLang's speculative
decoding no rank decodes while any prefills), and the step waits for the busiest rank's attention side; SGLang's DeepSeek-V4 window pool bounds the KV the running
requests hold."""
from __future__ import annotations

import numpy as np
import pytest
from conftest import synthetic_scenario

from dspark_sim.catalog import get_gpu, get_model
from dspark_sim.cost import RooflineCost, StepWork
from dspark_sim.cost.parallel import Parallel
from dspark_sim.engines.model import Engine
from dspark_sim.errors import InputError
from dspark_sim.scenario import Scenario
from dspark_sim.serving.ranks import busiest_rank_tokens, rank_decoders, rank_of, rank_prefill
from dspark_sim.serving.simulator import simulate

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def test_each_rank_prefills_its_own_requests_within_its_share_of_the_chunk():
    rank = rank_of(np.array([0, 1, 4, 2]), 4)
    assert rank.tolist() == [0, 1, 0, 2]
    chunk, per_rank = rank_prefill(rank, np.array([80, 150, 50, 30]), 4, 100)
    assert chunk.tolist() == [80, 100, 20, 30]  # rank 0's second request gets what its first leaves
    assert per_rank.tolist() == [100, 100, 30, 0]
    # the busiest rank: a prefilling one, beside two decoding rows of 2 verify tokens on rank 3
    assert busiest_rank_tokens(per_rank, np.array([3, 3, 2]), 2.0) == 100
    assert busiest_rank_tokens(np.zeros(4, np.int64), np.array([3, 3, 3]), 2.0) == 6


def test_ranks_kept_apart_decode_nowhere_while_any_rank_prefills():
    decoding = np.array([True, True, False, True, True])
    rank = rank_of(np.arange(5), 4)  # ranks 0, 1, 2, 3, 0
    per_rank = np.array([0, 0, 700, 0])
    assert rank_decoders(decoding, rank, per_rank, apart=False).tolist() == [0, 1, 3, 4]
    assert rank_decoders(decoding, rank, per_rank, apart=True).tolist() == []
    assert rank_decoders(decoding, rank, np.zeros(4, np.int64), apart=True).tolist() == [0, 1, 3, 4]


def test_sglang_keeps_the_ranks_prefill_apart_only_when_speculating():
    assert Engine.from_dict({"name": "sglang"}).ranks_prefill_apart(speculating=True)
    assert not Engine.from_dict({"name": "sglang"}).ranks_prefill_apart(speculating=False)
    assert not Engine.from_dict({"name": "vllm"}).ranks_prefill_apart(speculating=True)


def _dp_run(dp_attention: bool, **over):
    raw = synthetic_scenario(num_requests=24, rate_per_s=40.0, prompt=6000, output=40, model="deepseek-v3",
                             engine="sglang",
                             deployment={"tp": 8, "dp_attention": dp_attention, "chunked_prefill_tokens": 8192},
                             **over)
    return simulate(Scenario.from_dict(raw)).collector.steps


def test_with_mtp_no_rank_decodes_in_a_step_any_rank_prefills():
    """SGLang with speculative decoding under DP attention runs the ranks without prompt work idle
    in a step that prefills: no decode rows beside prefill chunks, so the run decodes in fewer,
    later steps than the same run without the rule would."""
    steps = _dp_run(True, speculation={"method": "static", "drafter": "mtp", "block_size": 1})
    prefill = steps.prefill_tokens > 0
    assert prefill.any() and (steps.decode_reqs > 0).any()
    assert (steps.decode_reqs[prefill] == 0).all()
    assert (steps.prefill_tokens[prefill] <= 8192).all()


def test_a_rank_that_prefills_leaves_the_other_ranks_decoding():
    """SGLang without mixed chunks: on one scheduler a step with prompt work decodes nothing; with
    a scheduler per rank the ranks without prompt work decode beside it, and a rank's chunk is
    at most chunked_prefill_tokens / ranks (8192 / 8) of its own prompts."""
    one, ranks = _dp_run(False), _dp_run(True)
    for steps in (one, ranks):
        assert (steps.prefill_tokens > 0).any()
    prefill = one.prefill_tokens > 0
    assert (one.decode_reqs[prefill] == 0).all()
    prefill = ranks.prefill_tokens > 0
    assert (ranks.decode_reqs[prefill] > 0).any()
    # each rank prefills at most 1,024 tokens a step: a step at most 8 ranks' worth
    assert ranks.prefill_tokens.max() <= 8192
    assert one.prefill_tokens.max() > ranks.prefill_tokens[prefill].min()


def test_the_step_waits_for_the_busiest_ranks_attention_side():
    """A chunk on one rank runs its attention projections and attention on that GPU alone: the
    step is longer than the same tokens spread over the ranks; TP attention does not change."""
    model, gpu = get_model("deepseek-v3"), get_gpu("h200")
    dp = RooflineCost(model, gpu, parallel=Parallel(8, 8, True))
    tp = RooflineCost(model, gpu, parallel=Parallel(8))
    even = StepWork(prefill_tokens=8192, prefill_reqs=8, prefill_attn_tokens2=8 * 1024 * 512)
    one = StepWork(prefill_tokens=8192, prefill_reqs=8, prefill_attn_tokens2=8 * 1024 * 512, rank_tokens=8192)
    assert dp.step_s(one) > dp.step_s(even) * 1.2
    assert dp.breakdown(one)["attn_s"] == pytest.approx(8 * dp.breakdown(even)["attn_s"])
    spread = StepWork(prefill_tokens=8192, prefill_reqs=8, prefill_attn_tokens2=8 * 1024 * 512, rank_tokens=1024)
    assert dp.step_s(spread) == pytest.approx(dp.step_s(even))
    assert tp.step_s(StepWork(prefill_tokens=8192, prefill_reqs=8)) == pytest.approx(
        tp.step_s(StepWork(prefill_tokens=8192, prefill_reqs=8, rank_tokens=0)))


def test_sglangs_v4_window_pool_bounds_the_kv_held():
    v4, qwen = get_model("deepseek-v4-flash"), get_model("qwen3-8b")
    sglang = Engine.from_dict({"name": "sglang"})
    assert sglang.held_kv_tokens(1_000_000, v4, 256) == 100_000 - 100_000 % 256
    assert sglang.held_kv_tokens(1_000_000, qwen, 16) == 1_000_000  # no window pool
    pro = Engine.from_dict({"name": "sglang", "swa_full_tokens_ratio": 0.075})
    assert pro.held_kv_tokens(1_000_000, v4, 256) == 75_000 - 75_000 % 256
    assert Engine.from_dict({"name": "vllm"}).held_kv_tokens(1_000_000, v4, 16) == 1_000_000
    with pytest.raises(InputError, match="swa_full_tokens_ratio"):
        Engine.from_dict({"name": "vllm", "swa_full_tokens_ratio": 0.1})
    with pytest.raises(InputError, match="swa_full_tokens_ratio"):
        Engine.from_dict({"name": "sglang", "swa_full_tokens_ratio": 2})
