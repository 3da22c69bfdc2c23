"""The engines' MoE roofline: MoE models the engines run on kernels the project has not profiled."""
from __future__ import annotations

import warnings
from dataclasses import replace

import pytest
from conftest import synthetic_scenario

from dspark_sim.catalog import get_gpu, get_model, served_format
from dspark_sim.cost import RooflineCost, RooflineParams, StepWork, scenario_cost
from dspark_sim.cost.parallel import Parallel
from dspark_sim.cost.profile import ProfileCost, get_cost_model
from dspark_sim.cost.roofline import attention_kind, engine_roofline_params, floor_kind
from dspark_sim.engines.model import GpuWork
from dspark_sim.scenario import Scenario

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")
WORK = GpuWork((("gqa", 60e-6), ("mla", 110e-6), ("v4", 150e-6)), (("gqa", 1e-3), ("mla", 2e-3), ("v4", 4e-3)),
               0.5, ("a", "b"))
ONE = StepWork(decode_reqs=1, verify_tokens=1, decode_context_tokens=8192, decode_max_context=8192)


def _cost(model, gpu, tp=8, work=WORK, **dep):
    raw = synthetic_scenario(model=model, gpu=gpu, engine="sglang", deployment={"replicas": 1, "tp": tp, **dep})
    scenario = Scenario.from_dict(raw)
    return scenario_cost(replace(scenario, engine=replace(scenario.engine, gpu_work=work)), warn=False).gpu


def test_attention_kinds():
    assert [attention_kind(get_model(m)) for m in ("qwen3-235b-a22b", "deepseek-v3", "deepseek-v4-pro")] == \
        ["gqa", "mla", "v4"]
    assert engine_roofline_params(get_model("qwen3-30b-a3b"), GpuWork((("mla", 1e-4),))) is None


@pytest.mark.parametrize("model, gpu, tp", [("deepseek-v3", "b200", 8), ("qwen3-235b-a22b", "b200", 8),
                                            ("deepseek-v4-pro", "b300", 8), ("deepseek-v4-flash", "h200", 4)])
def test_an_engine_prices_unprofiled_moe_models_by_the_fitted_roofline(model, gpu, tp):
    cost = _cost(model, gpu, tp)
    assert isinstance(cost, RooflineCost) and "engines' MoE roofline" in cost.source
    assert cost.provenance()["terms"]["target"]["detail"].startswith("the engines' MoE roofline")
    plain = RooflineCost(get_model(model), get_gpu(gpu), parallel=Parallel(tp))
    floor = get_model(model).num_layers * dict(WORK.layer_s)[attention_kind(get_model(model))]
    # one request: the floors of every layer on top of what it reads (the routed experts at half the bandwidth)
    assert cost.step_s(ONE) - plain.step_s(ONE) >= floor


def test_the_decoder_and_whole_profiles_keep_their_measured_costs():
    # V4-Flash's H200 profile is scaled from slices of the decoder's kernels: the decoder keeps it
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        decoder = get_cost_model("h200", "deepseek-v4-flash", parallel=Parallel(4))
    assert isinstance(decoder, ProfileCost)
    assert isinstance(_cost("qwen3-30b-a3b", "h200", 1), ProfileCost)  # measured whole: the profile prices it
    assert isinstance(_cost("qwen3-8b", "h200", 1), ProfileCost)  # dense: not an MoE model
    assert isinstance(_cost("deepseek-v3", "b200", 8, work=None), RooflineCost)  # no fit shipped: the plain one
    assert "engines' MoE roofline" not in _cost("deepseek-v3", "b200", 8, work=None).source


def test_the_first_tokens_latency_is_shared_not_queued():
    """Each request's intake is delayed by its kind's first-token latency a layer times the model's
    layers, alike for requests taken in together: sixteen at once see about the lone request's TTFT,
    not sixteen of them."""
    from dspark_sim.engines.fit import replay

    def ttft(n, work):
        raw = synthetic_scenario(num_requests=n, rate_per_s=1e9, prompt=200, output=8, model="deepseek-v3",
                                 gpu="b200", engine={"name": "sglang", "overlap": True},
                                 deployment={"replicas": 1, "tp": 8})
        scenario = Scenario.from_dict(raw)
        return replay(replace(scenario, engine=replace(scenario.engine, gpu_work=work)))["median_ttft_ms"]

    none = replace(WORK, first_token_layer_s=())
    assert ttft(1, WORK) - ttft(1, none) == pytest.approx(61 * 2.0, abs=1e-6)  # DeepSeek-V3's 61 layers
    assert ttft(16, WORK) - ttft(16, none) == pytest.approx(61 * 2.0, abs=1e-6)
    assert _cost("deepseek-v3", "b200").first_token_s == pytest.approx(61 * 2e-3)
    # a deeper model of the same kind waits longer for its first token: V4-Pro's 61 layers, V4-Flash's 43
    assert _cost("deepseek-v4-pro", "b300").first_token_s / _cost("deepseek-v4-flash", "b300", 4).first_token_s \
        == pytest.approx(61 / 43)


def test_the_expert_gemms_read_at_their_own_bandwidth_share():
    m, g = get_model("deepseek-v3"), get_gpu("b200")
    full = RooflineCost(m, g, params=RooflineParams(moe_bw_eff=0.8), parallel=Parallel(8))
    half = RooflineCost(m, g, params=RooflineParams(moe_bw_eff=0.4), parallel=Parallel(8))
    wide = StepWork(decode_reqs=256, verify_tokens=256, decode_context_tokens=256 * 2000)
    routed = full.weight_read_bytes(256) - full.weight_read_bytes(0)
    assert half.breakdown(wide)["linear_s"] - full.breakdown(wide)["linear_s"] == pytest.approx(
        routed / (g.hbm_bytes_per_s * 0.4) - routed / (g.hbm_bytes_per_s * 0.8), rel=1e-9)


def test_v4s_batch_one_step_scales_with_the_gpu_and_the_tp_degree():
    """A layer's floor is its kernels': the same on every GPU that runs the same ones (Hopper's
    Marlin path for V4's FP4 experts has its own, in the shipped fit); what a step reads and sends
    differs: Blackwell's bandwidth shortens it, a wider TP splits its weights and adds its
    all-reduces' latency."""
    steps = {(gpu, tp): _cost("deepseek-v4-flash", gpu, tp).step_s(ONE) for gpu in ("h100", "h200", "b200", "b300")
             for tp in (4, 8)}
    assert steps[("b200", 4)] < steps[("h200", 4)] < steps[("h100", 4)]
    assert steps[("b300", 8)] < steps[("h200", 8)]
    assert len({round(v, 9) for v in steps.values()}) > 4  # not one launch-bound number for all
    for gpu in ("h200", "b200"):
        assert steps[(gpu, 8)] != pytest.approx(steps[(gpu, 4)], rel=1e-3)


def test_each_term_is_fitted_on_the_runs_it_shows_in():
    """Floors and the first token's latency on runs of at most 16 concurrent requests, by attention
    kind; where the GPU serves the checkpoint through other kernels (V4's FP4 experts through Marlin
    on Hopper) a floor of its own, on the runs of one request alone; the expert bandwidth on runs of
    16 to 256 without speculation (16 requests already read most experts, so the run at 16 counts
    for both); the compute efficiency of the served format on runs at 1024 without speculation (the
    engine's cap); nothing else wider."""
    from dspark_sim.profiling.gpu_work_fit import groups

    def scenario(model, c, spec="none", gpu="b200", tp=8):
        raw = synthetic_scenario(model=model, gpu=gpu, engine="sglang", deployment={"replicas": 1, "tp": tp},
                                 speculation={"method": spec})
        raw["workload"] = {**raw["workload"], "max_concurrency": c}
        return Scenario.from_dict(raw)

    runs = [scenario("deepseek-v3", 1), scenario("qwen3-235b-a22b", 16), scenario("deepseek-v3", 64),
            scenario("deepseek-v4-pro", 64, "static"), scenario("deepseek-v4-flash", 1, gpu="h200", tp=4),
            scenario("deepseek-v4-flash", 16, "static", gpu="h200", tp=4),
            scenario("deepseek-v4-flash", 16, "static", gpu="b300", tp=4),
            scenario("deepseek-v3", 1024), scenario("deepseek-v3", 4096), scenario("deepseek-v4-flash", 1024, "static")]
    measured = [{"median_ttft_ms": 1.0, "median_tpot_ms": 1.0, "output_throughput": 1.0}] * 7 + \
        [{"mean_tpot_ms": 1.0}] * 3
    plan = groups(runs, measured)
    assert plan == {"layer_s:mla": [(0, "median_tpot_ms")], "first_token_layer_s:mla": [(0, "median_ttft_ms")],
                    "layer_s:gqa": [(1, "median_tpot_ms")], "first_token_layer_s:gqa": [(1, "median_ttft_ms")],
                    "moe_bw_eff": [(1, "median_tpot_ms"), (2, "median_tpot_ms")],
                    "layer_s:v4/fp4-experts-w4a16": [(4, "median_tpot_ms")],  # not Hopper's 16-request run
                    "first_token_layer_s:v4": [(4, "median_ttft_ms"), (5, "median_ttft_ms"), (6, "median_ttft_ms")],
                    "layer_s:v4": [(6, "median_tpot_ms")],
                    "flops_eff:fp8": [(7, "mean_tpot_ms")]}


def test_a_substituted_kernel_path_has_its_own_floor_where_one_is_fitted():
    """V4's FP4 experts run through Marlin's W4A16 kernels on Hopper: the floor keyed by that format
    prices its layers where the fit has one, the attention kind's elsewhere (and on Blackwell)."""
    hopper = GpuWork(WORK.layer_s + (("v4/fp4-experts-w4a16", 400e-6),), WORK.first_token_layer_s, 0.5)
    flash = get_model("deepseek-v4-flash")
    assert [floor_kind(flash, served_format(flash.weight_format, get_gpu(g).fp4).name)
            for g in ("h100", "h200", "b200", "b300")] == ["v4/fp4-experts-w4a16"] * 2 + ["v4"] * 2
    v3 = get_model("deepseek-v3")
    assert floor_kind(v3, served_format(v3.weight_format, get_gpu("h200").fp4).name) == "mla"  # FP8: its own
    assert engine_roofline_params(flash, hopper, gpu=get_gpu("h200")).layer_s == 400e-6
    assert engine_roofline_params(flash, hopper, gpu=get_gpu("b200")).layer_s == 150e-6
    assert engine_roofline_params(flash, WORK, gpu=get_gpu("h200")).layer_s == 150e-6  # none fitted: the kind's
    ones = [_cost("deepseek-v4-flash", "h200", 4, work=w).step_s(ONE) for w in (WORK, hopper)]
    assert ones[1] - ones[0] == pytest.approx(flash.num_layers * 250e-6, rel=1e-6)
