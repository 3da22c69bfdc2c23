"""MoE routing, parallel layouts, communication and DeepSeek-V4 costs: against brute force
and hand counts."""
from __future__ import annotations

import warnings
from dataclasses import replace

import numpy as np
import pytest
from conftest import synthetic_scenario

from dspark_sim.catalog import FORMATS, get_gpu, get_model
from dspark_sim.cost import StepWork, get_cost_model
from dspark_sim.cost.comm import CommParams, comm_terms, remote_destinations
from dspark_sim.cost.moe import Routing, expected_experts, imbalance
from dspark_sim.cost.parallel import Parallel, shard_factors
from dspark_sim.cost.roofline import RooflineCost
from dspark_sim.serving.kv import kv_capacity_tokens, kv_request_tokens
from dspark_sim.errors import InputError
from dspark_sim.scenario import Deployment, load_scenario


def monte_carlo_experts(experts, k, tokens, skew, trials=400, seed=0):
    """Distinct experts over ``tokens`` tokens, each drawing k distinct experts by popularity."""
    rng = np.random.default_rng(seed)
    pop = np.arange(1, experts + 1, dtype=float) ** -skew
    pop /= pop.sum()
    counts = []
    for _ in range(trials):
        seen = set()
        for _ in range(tokens):
            seen.update(rng.choice(experts, size=k, replace=False, p=pop).tolist())
        counts.append(len(seen))
    return float(np.mean(counts))


@pytest.mark.parametrize("tokens", [1, 4, 32, 128])
def test_expected_experts_uniform_matches_sampling(tokens):
    got = expected_experts(128, 8, tokens)
    assert got == pytest.approx(monte_carlo_experts(128, 8, tokens, 0.0), rel=0.03)
    assert expected_experts(128, 8, 1) == pytest.approx(8)


@pytest.mark.parametrize("skew", [0.5, 1.0])
def test_expected_experts_skewed_matches_sampling(skew):
    for tokens in (4, 32):
        got = expected_experts(64, 4, tokens, Routing(skew))
        assert got == pytest.approx(monte_carlo_experts(64, 4, tokens, skew), rel=0.08)
        assert got < expected_experts(64, 4, tokens)  # popular experts are shared more


def test_imbalance():
    assert imbalance(256, 8, 8) == 1.0 and imbalance(256, 8, 1, Routing(1.0)) == 1.0
    assert 1.0 < imbalance(256, 8, 8, Routing(0.5)) < imbalance(256, 8, 8, Routing(1.5))
    with pytest.raises(ValueError):
        Routing(-1.0)


def test_parallel_weights_and_kv_copies():
    v4, q8, v3 = get_model("deepseek-v4-flash"), get_model("qwen3-8b"), get_model("deepseek-v3")
    bf16 = FORMATS["bf16"]
    total = v4.weight_bytes_as(bf16)
    tp = Parallel(8).weight_bytes_per_gpu(v4, bf16)
    dp = Parallel(8, 8, True).weight_bytes_per_gpu(v4, bf16)
    norms = v4.params_by_part()[3] - v4.vocab_size * v4.hidden_size
    assert tp * 8 == pytest.approx(total + 7 * 2 * norms)  # all split but the norms
    assert dp - tp == pytest.approx(2 * v4.attn_matmul_params() * 7 / 8)  # attention copied
    assert Parallel(1).weight_bytes_per_gpu(q8, bf16) == pytest.approx(q8.weight_bytes(2))
    assert Parallel(8).kv_copies(v4) == 8 and Parallel(8, 8, True).kv_copies(v4) == 1
    assert Parallel(8).kv_copies(v3) == 8 and Parallel(4).kv_copies(q8) == 1
    assert Parallel(8).kv_copies(get_model("qwen3-30b-a3b")) == 2  # 4 KV heads over 8 GPUs


@pytest.mark.parametrize("model, par, key", [
    ("deepseek-v4-flash", Parallel(16), "tp"),          # beyond one HGX node
    ("qwen3-8b", Parallel(2, 2), "ep"),                 # a dense model has no experts
    ("deepseek-v4-flash", Parallel(8, 3), "ep"),        # ep must divide tp
    ("qwen3-8b", Parallel(1, 1, True), "dp_attention"),
    ("qwen3-8b", Parallel(3), "tp"),                    # 32 heads do not split 3 ways
])
def test_parallel_check_names_the_key(model, par, key):
    with pytest.raises(InputError) as err:
        par.check(get_model(model), get_gpu("h200"), file="s.yaml")
    assert err.value.key == f"deployment.{key}"


def test_comm_terms_by_hand():
    m, g = get_model("deepseek-v4-flash"), get_gpu("b300")
    assert comm_terms(m, g, Parallel(1)) == (0.0, 0.0)
    fixed, per = comm_terms(m, g, Parallel(8))
    assert fixed == pytest.approx(2 * 43 * 12e-6)
    assert per == pytest.approx(2 * 43 * 2 * 7 / 8 * 4096 * 2 / 0.9e12)
    fixed, per = comm_terms(m, g, Parallel(8, 8, True), CommParams(a2a_latency_s=20e-6, a2a_bw_eff=0.8))
    dests = 7 * (1 - (7 / 8) ** 6)
    assert remote_destinations(6, 8) == pytest.approx(dests)
    assert fixed == pytest.approx(43 * 2 * 20e-6)
    assert per == pytest.approx(43 * dests * 4096 * (1 + 4 / 128 + 2) / 8 / (0.9e12 * 0.8))


def test_roofline_moe_reads_the_touched_experts():
    m, g = get_model("qwen3-30b-a3b"), get_gpu("h200")
    cost = RooflineCost(m, g)
    expert = 3 * 2048 * 768 * 2
    base = cost.weight_read_bytes(0)
    assert cost.weight_read_bytes(1) - base == pytest.approx(48 * 8 * expert)
    assert cost.weight_read_bytes(10 ** 6) - base == pytest.approx(48 * 128 * expert)
    hopper = RooflineCost(get_model("deepseek-v4-flash"), g)
    assert hopper.format.name == "fp4-experts-w4a16"  # Hopper runs the FP4 experts with W4A16 kernels
    assert RooflineCost(get_model("deepseek-v4-flash"), get_gpu("b300")).format.name == "fp4-experts"


def test_roofline_v4_attention_reads_what_the_architecture_says():
    m = get_model("deepseek-v4-flash")
    cost = RooflineCost(m, get_gpu("b300"), parallel=Parallel(8, 8, True))
    work = StepWork(decode_reqs=64, verify_tokens=256, decode_context_tokens=64 * 8192)
    bytes_ = m.v4.decode_bytes(64, 256, 8192, 2) / 8  # DP attention: each GPU its share
    flops = 256 * m.v4.attn_flops_per_query(8192)
    want = max(bytes_ / (8e12 * 0.8), flops / (cost.gpu.bf16_flops * 0.45 * 8))
    assert cost.breakdown(work)["attn_s"] == pytest.approx(want)
    tp_cost = RooflineCost(m, get_gpu("b300"), parallel=Parallel(8))  # every GPU reads all the KV
    assert tp_cost.breakdown(work)["attn_s"] > cost.breakdown(work)["attn_s"]


def test_shard_factors():
    q8, v4 = get_model("qwen3-8b"), get_model("deepseek-v4-flash")
    bf16, fp8 = FORMATS["bf16"], FORMATS["fp8"]
    assert shard_factors(q8, Parallel(1), bf16) == {"weights": 1.0, "kv": 1.0, "compute": 1.0, "memory": 1.0}
    f = shard_factors(v4, Parallel(8, 8, True), fp8, kv_dtype_bytes=1.0)
    assert f["kv"] == 1 / 16 and f["compute"] == 1 / 16 and f["memory"] == 1 / 8
    assert 0.5 / 8 < f["weights"] < 0.6 / 8


def test_profile_path_applies_the_deployment():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        one = get_cost_model("h200", "qwen3-8b")
        two = get_cost_model("h200", "qwen3-8b", parallel=Parallel(2))
    work = StepWork(decode_reqs=8, verify_tokens=8, decode_context_tokens=8 * 1024)
    assert "scaled from tp=1 to tp=2" in two.source and "all-reduce latency" in two.source
    assert two.breakdown(work)["linear_s"] < one.breakdown(work)["linear_s"]


def test_kv_capacity_by_hand():
    m, g = get_model("deepseek-v4-flash"), get_gpu("b300")
    dep = Deployment(tp=8, ep=8, dp_attention=True, kv_cache_dtype="fp8")
    weights = Parallel(8, 8, True).weight_bytes_per_gpu(m, FORMATS["fp4-experts"])
    free = (288 * 2 ** 30 * 0.9 - weights) * 8
    want = int(free // 3440)
    assert kv_capacity_tokens(m, g, dep) == want - want % 16
    tp_only = kv_capacity_tokens(m, g, Deployment(tp=8, kv_cache_dtype="fp8"))
    assert tp_only < kv_capacity_tokens(m, g, dep) / 6  # TP attention copies the KV to every GPU
    assert kv_request_tokens(m, dep) == -(-m.kv_bytes_per_request(1) // 3440)
    assert kv_request_tokens(get_model("qwen3-8b"), dep) == 0


def test_deployment_keys_load_and_validate(write_scenario):
    data = synthetic_scenario(model="deepseek-v4-flash", gpu="b300",
                              deployment={"tp": 8, "ep": 8, "dp_attention": True, "kv_cache_dtype": "fp8",
                                          "routing_skew": 0.5})
    dep = load_scenario(write_scenario(data)).deployment
    assert (dep.ep, dep.dp_attention, dep.kv_dtype_bytes, dep.routing_skew) == (8, True, 1.0, 0.5)
    for bad, key in (({"ep": 3}, "deployment.ep"), ({"kv_cache_dtype": "fp4"}, "deployment.kv_cache_dtype"),
                     ({"tp": 16}, "deployment.tp")):
        with pytest.raises(InputError) as err:
            load_scenario(write_scenario(synthetic_scenario(model="deepseek-v4-flash", gpu="b300",
                                                            deployment={"tp": 8, **bad})))
        assert err.value.key == key


def test_the_scenario_checks_its_layout_wherever_it_is_built(write_scenario):
    """The split is the scenario's own check: a file names itself, and a scenario made by
    replacing its deployment is refused too; the deployment checks its new keys alone."""
    path = write_scenario(synthetic_scenario(deployment={"tp": 3}))
    with pytest.raises(InputError) as err:
        load_scenario(path)
    assert (err.value.file, err.value.key) == (str(path), "deployment.tp") and "32 attention heads" in err.value.why
    scenario = load_scenario(write_scenario(synthetic_scenario(deployment={"tp": 2})))
    with pytest.raises(InputError) as err:
        replace(scenario, deployment=replace(scenario.deployment, ep=2))
    assert err.value.key == "deployment.ep" and "no experts" in err.value.why
    for bad, key in (({"routing_skew": -1}, "routing_skew"), ({"dp_attention": "yes"}, "dp_attention"),
                     ({"ep": 0}, "ep")):
        with pytest.raises(InputError) as err:
            Deployment(**bad)
        assert err.value.key == key


def test_requests_beyond_the_context_are_rejected(write_scenario):
    from dspark_sim.serving.simulator import AllRejected, simulate

    data = synthetic_scenario(num_requests=6, prompt=41000, output=20)  # Qwen3-8B: 40960 positions
    with pytest.raises(AllRejected) as err:  # nothing can run: one error for the whole run
        simulate(load_scenario(write_scenario(data)))
    assert err.value.reasons == ("context_length",) and "6 prompt + output longer than" in err.value.why
