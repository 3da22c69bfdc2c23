"""SGLang under DP attention runs a step with prompt tokens in which some rank is idle without CUDA
graphs on every rank: the step lasts at least the host's eager forward (the target's layers and,
with MTP, its draft pass over the prompt), and with DeepEP (ep > 1) the launches add to the GPU's
time (normal-mode dispatch makes the host wait at every MoE layer). Steps in which every rank
works, decode steps, TP attention and the other engines keep their times."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from conftest import synthetic_scenario

from dspark_sim.catalog import get_model
from dspark_sim.cost import StepWork, scenario_cost
from dspark_sim.cost.parallel import Parallel
from dspark_sim.engines.model import Engine, GpuWork, shipped_gpu_work
from dspark_sim.engines.step_cost import EagerPrefill, eager_prefill
from dspark_sim.scenario import Scenario
from dspark_sim.serving.ranks import idle_ranks
from dspark_sim.serving.simulator import simulate
from dspark_sim.speculation.config import Speculation

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")
LAYER_S = 2e-3
MTP = {"method": "static", "drafter": "mtp", "block_size": 1}


def _scenario(engine="sglang", eager=LAYER_S, speculation=None, rate=40.0, **dep):
    raw = synthetic_scenario(num_requests=24, rate_per_s=rate, prompt=3000, output=40, model="deepseek-v4-flash",
                             gpu="b200", engine=engine,
                             deployment={"tp": 4, "dp_attention": True, "chunked_prefill_tokens": 8192, **dep},
                             speculation=speculation or {"method": "none"})
    scenario = Scenario.from_dict(raw)
    work = replace(shipped_gpu_work(), eager_layer_s=(("v4", eager),) if eager else ())
    return replace(scenario, engine=replace(scenario.engine, gpu_work=work))


def test_idle_ranks_are_those_with_no_prompt_and_no_decoding_row():
    assert idle_ranks(np.array([100, 0, 0, 0]), np.array([2, 2])) == 2
    assert idle_ranks(np.array([100, 0, 0, 0]), np.array([1, 2, 3])) == 0
    assert idle_ranks(np.zeros(4, np.int64), np.array([], np.intp)) == 4


def test_only_sglang_under_dp_attention_runs_prompt_steps_eagerly():
    model, spec = get_model("deepseek-v4-flash"), Speculation()
    sglang, vllm = Engine.from_dict({"name": "sglang"}), Engine.from_dict({"name": "vllm"})
    assert eager_prefill(sglang, model, Parallel(4, 1, True), spec, LAYER_S) == \
        EagerPrefill(LAYER_S, model.num_layers, serial=False)
    assert eager_prefill(sglang, model, Parallel(4, 4, True), spec, LAYER_S).serial  # DeepEP's normal mode
    assert eager_prefill(sglang, model, Parallel(4), spec, LAYER_S) is None  # TP attention: graphs replay
    assert eager_prefill(vllm, model, Parallel(4, 4, True), spec, LAYER_S) is None
    assert eager_prefill(sglang, model, Parallel(4, 4, True), spec, None) is None  # nothing fitted for the kind
    mtp = eager_prefill(sglang, model, Parallel(4, 4, True), Speculation(method="static", drafter="mtp"), LAYER_S)
    assert mtp.layers == model.num_layers + model.mtp_layers  # the draft pass over the prompt


@pytest.mark.parametrize("ep", [1, 4])
def test_a_prompt_step_with_an_idle_rank_lasts_the_eager_forward(ep):
    cost = scenario_cost(_scenario(ep=ep), warn=False)
    prompt = dict(prefill_tokens=256, prefill_reqs=1, prefill_attn_tokens2=256 * 128.0, rank_tokens=256)
    idle = cost.breakdown(StepWork(**prompt, idle_ranks=3))
    busy = cost.breakdown(StepWork(**prompt, idle_ranks=0))
    gpu = sum(v for k, v in busy.items() if k not in ("engine_s", "eager_s"))
    forward = LAYER_S * get_model("deepseek-v4-flash").num_layers
    assert busy["eager_s"] == 0.0
    if ep > 1:  # the host waits for the GPU at every MoE layer: the launches add to the GPU's time
        assert idle["eager_s"] == pytest.approx(forward)
    else:  # the launches run beside the GPU's work: the step lasts the longer of the two
        assert sum(idle.values()) == pytest.approx(max(gpu, forward))
    decode = StepWork(decode_reqs=8, verify_tokens=8, decode_context_tokens=8 * 3000, idle_ranks=3)
    assert cost.breakdown(decode)["eager_s"] == 0.0  # decode graphs replay on idle ranks


def test_the_run_pays_the_eager_forward_on_its_prompt_steps_only():
    """A DP-attention run with MTP (no rank decodes while one prefills), its requests arriving apart
    (a prompt at a time, so every prompt step leaves ranks idle): its prompt steps are longer by the
    eager forward, and the run ends later."""
    runs = {eager: simulate(_scenario(eager=eager, speculation=MTP, rate=2.0, ep=4)) for eager in (LAYER_S, 0.0)}
    slow, fast = (runs[e].collector.steps for e in (LAYER_S, 0.0))
    prompt = slow.prefill_tokens > 0
    layers = get_model("deepseek-v4-flash").num_layers + get_model("deepseek-v4-flash").mtp_layers
    assert prompt.any() and (slow.step_s[prompt] >= LAYER_S * layers).all()
    fast_prompt = fast.prefill_tokens > 0
    assert slow.step_s[prompt].mean() > fast.step_s[fast_prompt].mean() + LAYER_S * layers * 0.9
    assert runs[LAYER_S].collector.requests.finish_s.max() > runs[0.0].collector.requests.finish_s.max()


def test_tp_attention_keeps_its_prompt_graphs():
    """The same deployment with TP attention: no rank is ever idle, the fitted time prices nothing."""
    with_time = simulate(_scenario(dp_attention=False, speculation=MTP)).collector.steps
    without = simulate(_scenario(eager=0.0, dp_attention=False, speculation=MTP)).collector.steps
    assert np.array_equal(with_time.step_s, without.step_s)


def test_the_fitted_layer_time_round_trips_through_json():
    work = GpuWork((("v4", 1e-4),), (("v4", 2e-3),), 0.4, ("a",), (("fp4-experts", 0.9),), (("v4", 3e-3),))
    assert GpuWork.from_json_dict(work.to_json_dict()) == work
    assert dict(shipped_gpu_work().eager_layer_s).keys() <= {"gqa", "mla", "v4"}


def test_the_eager_layer_time_is_fitted_on_dp_runs_with_speculation_only():
    """The runs with DP attention and speculative decoding up to 256 requests fit it (on TPOT and
    throughput); a DP run without speculation or a TP run with it fits other terms."""
    from dspark_sim.profiling.gpu_work_fit import groups

    def scenario(c, spec, dp):
        raw = synthetic_scenario(model="deepseek-v4-flash", gpu="b200", engine="sglang",
                                 deployment={"replicas": 1, "tp": 4, "dp_attention": dp}, speculation=spec)
        raw["workload"] = {**raw["workload"], "max_concurrency": c}
        return Scenario.from_dict(raw)

    runs = [scenario(64, MTP, True), scenario(64, {"method": "none"}, True), scenario(64, MTP, False),
            scenario(1024, MTP, True)]
    measured = [{"mean_ttft_ms": 1.0, "mean_tpot_ms": 1.0, "output_throughput": 1.0}] * 4
    assert groups(runs, measured)["eager_layer_s:v4"] == [(0, "mean_tpot_ms"), (0, "output_throughput")]


def test_the_diagnostic_replays_without_step_host_time_leave_the_eager_layers_out():
    from dspark_sim.validation.published_check import variant_scenario

    scenario = _scenario()
    for variant, kept in (("shipped", True), ("no front end", True), ("no step host time", False),
                          ("no host terms", False)):
        work = variant_scenario(scenario, variant).engine.gpu_work
        assert bool(work.eager_layer_s) is kept, variant
        assert work.layer_s == scenario.engine.gpu_work.layer_s  # the GPU work stays the check's


def test_a_term_the_fit_no_longer_has_is_refused():
    """A terms file fitted before a term was renamed (first_token_s, now a layer's share) is not
    read as if the term were absent."""
    from dspark_sim.errors import InputError

    raw = GpuWork((("v4", 1e-4),), (("v4", 2e-3),), 0.4).to_json_dict() | {"first_token_s": {"v4": 0.14}}
    with pytest.raises(InputError, match="first_token_s"):
        GpuWork.from_json_dict(raw)
