"""Hand-checkable behaviour of the continuous-batching engine."""
import csv
import json

import numpy as np
import pytest
from conftest import synthetic_scenario

from dspark_sim.cost import get_cost_model
from dspark_sim.cost.base import StepWork
from dspark_sim.cost.hot import duty_column
from dspark_sim.run import run_scenario
from dspark_sim.scenario import load_scenario


def _run(write_scenario, tmp_path, data, out="out"):
    scenario = load_scenario(write_scenario(data))
    return run_scenario(scenario, tmp_path / out, plots=False, show_progress=False)


def _cost(data):
    return get_cost_model(data["gpu"], data["model"], data["deployment"]["tp"], warn=False)


def test_one_request_alone(write_scenario, tmp_path):
    data = synthetic_scenario(num_requests=1, prompt=700, output=20)
    summary, _ = _run(write_scenario, tmp_path, data)
    cost = _cost(data)
    prefill_s = cost.step_s(StepWork(prefill_tokens=700, prefill_reqs=1, prefill_attn_tokens2=700 * 350.0))
    # the decode steps follow the prompt step within the duty's window: they carry the decode
    # steps' power-limit term at the duty it left (cost/hot.py)
    duty = prefill_s / cost.hot_window_s if cost.decode_hot is not None else 0.0
    decode_s = [sum(cost.breakdown(StepWork(1, 1, 700 + g, prefill_duty=duty)).values()) for g in range(1, 20)]
    assert summary.completed == 1
    assert summary.mean_ttft_ms == pytest.approx(prefill_s * 1e3, rel=1e-9)
    assert summary.mean_tpot_ms == pytest.approx(np.mean(decode_s) * 1e3, rel=1e-9)
    assert summary.mean_e2el_ms == pytest.approx((prefill_s + sum(decode_s)) * 1e3, rel=1e-9)
    assert summary.num_steps == 20


def test_two_overlapping_requests_share_steps(write_scenario, tmp_path):
    one = synthetic_scenario(num_requests=1, prompt=300, output=200)
    two = synthetic_scenario(num_requests=2, rate_per_s=1000.0, prompt=300, output=200)
    alone, _ = _run(write_scenario, tmp_path, one, "a")
    both, result = _run(write_scenario, tmp_path, two, "b")
    assert both.completed == 2
    # batched: far fewer steps than twice the single run, and slower steps than alone
    assert both.num_steps < 1.2 * alone.num_steps
    assert both.mean_tpot_ms > alone.mean_tpot_ms
    assert result.collector.steps.decode_reqs.max() == 2


def test_each_step_carries_the_serving_loops_gap_by_running_requests(write_scenario, tmp_path):
    """The profile's ``schedule`` term: every step pays the loop's time before it, priced by
    the requests running (decoding requests wait while a prompt is prefilled, but the loop
    still walks them), and steps.csv reports it."""
    data = synthetic_scenario(num_requests=6, rate_per_s=200.0, prompt=3000, output=40,
                              deployment={"max_batched_tokens": 2048})
    _run(write_scenario, tmp_path, data)
    cost = _cost(data)
    with open(tmp_path / "out" / "steps.csv") as f:
        rows = list(csv.DictReader(f))
    assert cost.profile.schedule is not None
    waiting = [r for r in rows if int(r["prefill_tokens"]) and int(r["running_reqs"]) > 1]
    assert waiting  # prefill steps with requests in the batch that do not run this step
    for r in rows:
        want = cost.profile.schedule.seconds(int(r["running_reqs"]))
        assert float(r["sched_s"]) == pytest.approx(want, rel=1e-6, abs=1e-9)
        assert float(r["step_s"]) > float(r["sched_s"]) > 0


def test_kv_exhaustion_preempts(write_scenario, tmp_path):
    # 13 % of an H200 leaves ~1.9 GB (~13k tokens) of KV next to Qwen3-8B's 16.4 GB of weights
    data = synthetic_scenario(num_requests=40, rate_per_s=1000.0, prompt=4000, output=2000,
                              deployment={"gpu_memory_fraction": 0.13})
    summary, result = _run(write_scenario, tmp_path, data)
    assert summary.completed == 40
    assert summary.num_preemptions > 0
    assert summary.kv_peak_fraction <= 1.0
    rows = (tmp_path / "out" / "requests.csv").read_text().splitlines()
    assert len(rows) == 41


def test_overloaded_queue_grows(write_scenario, tmp_path):
    data = synthetic_scenario(num_requests=300, rate_per_s=200.0, prompt=2000, output=300,
                              deployment={"max_running_requests": 8})
    _, result = _run(write_scenario, tmp_path, data)
    req = result.collector.requests
    order = np.argsort(req.arrival_s)
    queue = req.queue_delay_ms[order]
    first, last = queue[:50].mean(), queue[-50:].mean()
    assert last > 5 * first + 1000


def test_littles_law_on_steady_load(write_scenario, tmp_path):
    data = synthetic_scenario(num_requests=3000, rate_per_s=8.0, prompt=400, output=120)
    summary, result = _run(write_scenario, tmp_path, data)
    steps, req = result.collector.steps, result.collector.requests
    # time-average number in the engine, measured from the step log ...
    busy = steps.step_s.sum()
    in_engine = float((steps.running * steps.step_s).sum() / req.finish_s.max())
    # ... against arrival rate x mean time in system, measured from the request log
    lam = len(req) / req.arrival_s.max()
    w = float(np.mean(req.e2el_ms) / 1e3)
    assert busy > 0
    assert in_engine == pytest.approx(lam * w, rel=0.05)


def test_same_seed_same_bytes(write_scenario, tmp_path):
    data = synthetic_scenario(num_requests=200, rate_per_s=20.0, prompt=600, output=100,
                              speculation={"method": "dspark"})
    _run(write_scenario, tmp_path, data, "a")
    _run(write_scenario, tmp_path, data, "b")
    for name in ("summary.json", "requests.csv", "steps.csv"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name
    other = dict(data, seed=1)
    _run(write_scenario, tmp_path, other, "c")
    assert (tmp_path / "c" / "requests.csv").read_bytes() != (tmp_path / "a" / "requests.csv").read_bytes()


def test_replicas_split_load(write_scenario, tmp_path):
    for router in ("round_robin", "least_outstanding"):
        data = synthetic_scenario(num_requests=400, rate_per_s=40.0, prompt=500, output=100,
                                  deployment={"replicas": 4, "router": router})
        summary, result = _run(write_scenario, tmp_path, data, router)
        assert summary.completed == 400 and summary.num_gpus == 4
        with open(tmp_path / router / "steps.csv") as f:
            replicas = {int(r["replica"]) for r in csv.DictReader(f)}
        assert replicas == {0, 1, 2, 3}
        json.loads((tmp_path / router / "summary.json").read_text())


def test_prefill_first_holds_decoding_while_prompts_are_pending(write_scenario, tmp_path):
    """batching: prefill_first (SGLang's default) never mixes a prefill
    chunk and decode tokens in one step; mixed (vLLM) does, and decodes faster meanwhile."""
    over = {"max_batched_tokens": 2048}
    mixed = synthetic_scenario(num_requests=30, rate_per_s=20.0, prompt=3000, output=100, deployment=over)
    first = synthetic_scenario(num_requests=30, rate_per_s=20.0, prompt=3000, output=100,
                               deployment={**over, "batching": "prefill_first"})
    sm, rm = _run(write_scenario, tmp_path, mixed, "m")
    sf, rf = _run(write_scenario, tmp_path, first, "f")
    both = lambda steps: (steps.prefill_tokens > 0) & (steps.decode_reqs > 0)  # noqa: E731
    assert both(rm.collector.steps).any()
    assert not both(rf.collector.steps).any()
    assert sf.completed == sm.completed == 30
    assert sf.mean_tpot_ms > sm.mean_tpot_ms


def test_the_longest_decoding_request_reaches_the_cost_model(write_scenario, tmp_path):
    """A decode step over a short and a long request costs what the profile says for their
    summed context with the long one's as the floor, not for two of the mean length."""
    trace = tmp_path / "trace.csv"
    trace.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                     "2026-01-01 00:00:00.000000,200,30\n2026-01-01 00:00:00.000000,7900,30\n")
    data = synthetic_scenario(workload={"trace": str(trace), "format": "azure", "domain": "math"},
                              deployment={"batching": "prefill_first"})
    data["workload"].pop("synthetic")
    summary, result = _run(write_scenario, tmp_path, data)
    steps = result.collector.steps
    first = int(np.flatnonzero(steps.decode_reqs == 2)[0])
    cost = _cost(data)
    # at the prefill duty the prompt steps before it left (the decode steps' power-limit term)
    duty = duty_column(steps.start_s, steps.step_s, steps.prefill_tokens, cost.hot_window_s, every=True)[first]
    with_max = sum(cost.breakdown(StepWork(2, 2, 201 + 7901, decode_max_context=7901, prefill_duty=duty)).values())
    assert steps.step_s[first] == pytest.approx(with_max, rel=1e-9)
    assert with_max > cost.step_s(StepWork(2, 2, 201 + 7901))


def test_unknown_batching_policy_is_rejected(write_scenario):
    from dspark_sim.errors import InputError

    with pytest.raises(InputError, match="batching"):
        load_scenario(write_scenario(synthetic_scenario(deployment={"batching": "sometimes"})))


def test_a_request_arriving_while_the_host_launches_an_eager_step_joins_the_next(tmp_path):
    """The overlapped loop plans step 1 once it has launched step 0: a 2048-token prompt is eager
    and runs longer than its launch, so a request arriving during the launch is in step 1 (planned
    then, not at step 0's start), and the prompt's first token is read at its step's end, once
    step 1 (a graph replay) is launched (serving/launch.py)."""
    import yaml

    from dspark_sim.metrics.record import read_requests
    from dspark_sim.validation.cases import DEPLOYMENT, write_trace

    cost = get_cost_model("h200", "qwen3-8b", warn=False)
    launch = cost.launch_s(StepWork(prefill_tokens=2048, prefill_reqs=1))
    prefill_s = cost.step_s(StepWork(prefill_tokens=2048, prefill_reqs=1, prefill_attn_tokens2=2048 * 1024.0))
    assert 0 < launch < prefill_s
    write_trace(tmp_path / "trace.csv", np.array([0.0, launch / 2]), np.array([2048, 100]), np.array([20, 20]))
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(
        {"name": "launch", "model": "qwen3-8b", "gpu": "h200", "seed": 0,
         "workload": {"trace": "trace.csv", "format": "azure", "domain": "math"},
         "deployment": {**DEPLOYMENT, "batching": "mixed"}, "speculation": {"method": "none"}}))
    run_scenario(load_scenario(tmp_path / "s.yaml"), tmp_path / "out", plots=False, show_progress=False)
    req = read_requests(tmp_path / "out" / "requests.csv", ("request_id", "first_scheduled_s", "first_token_s"))
    first, second = np.argsort(req.request_id)
    assert req.first_scheduled_s[second] == pytest.approx(launch, abs=1e-6)  # step 1's plan, not step 2's
    assert req.first_token_s[first] == pytest.approx(prefill_s, abs=1e-6)
