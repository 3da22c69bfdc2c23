"""How an engine admits and schedules, beyond the step budget: the KV it reserves at admission for
output still to come (TensorRT-LLM's GUARANTEED_NO_EVICT, SGLang's new-token ratio; vLLM none), and
vLLM 0.6's multi-step scheduling (a request waits for the schedule's last step)."""
from dataclasses import replace

import numpy as np
import pytest
from conftest import synthetic_scenario

from dspark_sim.serving.simulator import simulate
from dspark_sim.engines.model import KV_RESERVE, EngineTerms, KvReserve
from dspark_sim.metrics.summary import summarize
from dspark_sim.engines.fit import with_terms
from dspark_sim.scenario import Scenario


def _burst(engine, n=60, prompt=600, output=400, **deployment) -> Scenario:
    """``n`` requests at once into a KV pool of a few thousand tokens (qwen3-14b, h100)."""
    dep = {"gpu_memory_fraction": 0.39, **deployment}
    return Scenario.from_dict(synthetic_scenario(num_requests=n, rate_per_s=1e9, prompt=prompt, output=output,
                                                 model="qwen3-14b", gpu="h100", engine=engine, deployment=dep))


def test_no_evict_reserves_every_output_so_nothing_is_preempted():
    vllm, trtllm = simulate(_burst("vllm")), simulate(_burst("trtllm"))
    assert vllm.num_preemptions > 0  # admitted on the prompt alone, the pool overflows while decoding
    assert trtllm.num_preemptions == 0
    # every running request holds its prompt and its whole output within the pool
    running = trtllm.collector.steps.running
    assert running.max() * (600 + 400) <= trtllm.kv_capacity_tokens
    assert running.max() < vllm.collector.steps.running.max()


def test_sglang_reservation_falls_from_its_initial_ratio():
    r = KV_RESERVE["sglang"]
    assert (r.new_ratio, r.running_init, r.clip_tokens, r.decay_steps) == (1.0, 0.7, 4096, 600)
    assert r.decay_per_step == pytest.approx((0.7 - 0.7 * 0.14) / 600)
    with pytest.raises(Exception):
        KvReserve(1.0, 0.1, 0.5)  # a floor above the start
    sglang = simulate(_burst("sglang"))
    first = int(sglang.collector.steps.running[0])
    assert first * (600 + 400) <= sglang.kv_capacity_tokens  # the first plan reserves whole outputs
    assert sglang.collector.steps.running.max() > first  # the ratio falls: more fit later


def _two_requests(multi_step: int):
    """A at 0 (a long output), B just after A's first decode step starts; steps and B's schedule."""
    data = synthetic_scenario(num_requests=2, rate_per_s=1.0, prompt=64, output=40, model="qwen3-14b", gpu="h100",
                              engine={"name": "vllm", "multi_step": multi_step, "overlap": False})
    scenario = with_terms(Scenario.from_dict(data), EngineTerms())  # no front end: B reaches the engine at once
    first = simulate(replace(scenario, workload=replace(scenario.workload, synthetic=replace(
        scenario.workload.synthetic, num_requests=1))))
    steps = first.collector.steps
    b_arrives = float(steps.start_s[1]) + 1e-4  # during A's first decode step
    from dspark_sim.validation.cases import write_trace
    return scenario, b_arrives, write_trace


@pytest.mark.parametrize("multi_step", [1, 4])
def test_a_request_joins_when_the_schedule_ends(tmp_path, multi_step):
    scenario, b_arrives, write_trace = _two_requests(multi_step)
    trace = tmp_path / "trace.csv"
    write_trace(trace, np.array([0.0, b_arrives]), np.array([64, 64]), np.array([40, 40]))
    from dspark_sim.scenario import Workload

    run = simulate(replace(scenario, workload=Workload(trace=trace, format="azure", domain_mix=(("chat", 1.0),))))
    starts = run.collector.steps.start_s
    req = run.collector.requests
    b = int(np.argmax(req.arrival_s))
    # step 0 prefills A, steps 1.. decode it; B's plan is the first step after the schedule B came in
    scheduled_s = req.arrival_s[b] + req.queue_delay_ms[b] / 1e3
    assert scheduled_s == pytest.approx(float(starts[1 + multi_step]), abs=1e-6)


def test_a_schedule_ends_when_its_requests_do(tmp_path):
    """A finishes two steps into a four-step schedule while B waits: B is scheduled at once."""
    scenario, b_arrives, write_trace = _two_requests(4)
    trace = tmp_path / "trace.csv"
    write_trace(trace, np.array([0.0, b_arrives]), np.array([64, 64]), np.array([3, 40]))
    from dspark_sim.scenario import Workload

    run = simulate(replace(scenario, workload=Workload(trace=trace, format="azure", domain_mix=(("chat", 1.0),))))
    starts, req = run.collector.steps.start_s, run.collector.requests
    b = int(np.argmax(req.arrival_s))
    assert req.arrival_s[b] + req.queue_delay_ms[b] / 1e3 == pytest.approx(float(starts[3]), abs=1e-6)


@pytest.mark.parametrize("engine", ["sglang", "trtllm", {"name": "vllm", "multi_step": 4, "overlap": False}])
def test_skip_ahead_is_step_by_step(engine):
    scenario = _burst(engine, n=40)
    fast, exact = summarize(simulate(scenario)), summarize(simulate(replace(scenario, exact=True)))
    for key in ("median_ttft_ms", "median_tpot_ms", "output_throughput", "num_steps"):
        assert getattr(fast, key) == getattr(exact, key), key
