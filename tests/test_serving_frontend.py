"""The engine's front-end process: request intake and output streaming on one server, and the
times the client sees."""
import math

import numpy as np
import pytest
from conftest import synthetic_scenario

from dspark_sim.serving.frontend import FrontEnd
from dspark_sim.engines.model import EngineTerms
from dspark_sim.engines.fit import replay, with_terms
from dspark_sim.run import run_scenario
from dspark_sim.scenario import Scenario


def test_intake_alone_serves_one_request_at_a_time():
    fe = FrontEnd(intake_s=0.05, stream_s=0.0)
    assert [fe.take_in(0.0) for _ in range(3)] == pytest.approx([0.05, 0.10, 0.15])
    assert fe.take_in(1.0) == pytest.approx(1.05)  # idle in between: no wait


def test_work_is_served_in_the_order_it_came():
    fe = FrontEnd(intake_s=0.01, stream_s=0.001)
    assert fe.take_in(0.0) == pytest.approx(0.01)
    fe.streamed(0.005, 40)  # ended while the first intake ran: 40 ms of streaming after it
    fe.streamed([0.5, 0.6], [7, 9])  # ended after the next request came: streamed after its intake
    assert fe.take_in(0.004) == pytest.approx(0.01 + 0.01)  # came before the step ended: goes first
    assert fe.take_in(0.55) == pytest.approx(0.55 + 0.01)  # the step at 0.5 streamed from 0.5 to 0.507
    fe.settle()
    assert fe.delivered(0, 0.005) == pytest.approx(0.02 + 0.040)  # behind both intakes
    assert fe.delivered(0, 0.5) == pytest.approx(0.507)
    assert fe.delivered(0, np.array([0.6])) == pytest.approx([0.6 + 0.009])  # idle from 0.56: no wait


def test_a_step_ending_as_a_request_arrives_streams_first_then_replicas_in_order():
    fe = FrontEnd(intake_s=0.01, stream_s=0.001, replicas=2)  # pooled: 5 ms a request, 0.5 ms a message
    fe.streamed(1.0, 10, replica=1)
    fe.streamed(1.0, 4, replica=0)
    assert fe.take_in(1.0) == pytest.approx(1.0 + 0.002 + 0.005 + 0.005)
    assert fe.delivered(0, 1.0) == pytest.approx(1.002)
    assert fe.delivered(1, 1.0) == pytest.approx(1.007)


def test_tokens_never_reach_the_client_before_their_step_ends():
    rng = np.random.default_rng(3)
    fe = FrontEnd(intake_s=0.004, stream_s=1e-4)
    ends = np.cumsum(rng.exponential(0.02, 400))
    fe.streamed(ends, rng.integers(1, 50, ends.size))
    for arrival in np.sort(rng.uniform(0, ends[-1], 60)):
        assert fe.take_in(float(arrival)) >= arrival + 0.004
    fe.settle()
    seen = fe.delivered(0, ends)
    assert np.all(seen >= ends) and np.all(np.diff(seen) > 0)  # first come first served: in order
    with pytest.raises(KeyError):
        fe.delivered(0, ends[3] + 1e-9)  # no step ends there


def test_replicas_pool_the_front_end():
    fe = FrontEnd(intake_s=0.02, stream_s=0.002, replicas=2)
    assert (fe.intake_s, fe.stream_s) == pytest.approx((0.01, 0.001))


def test_a_lone_request_sees_each_token_one_message_late(tmp_path):
    """Requests far apart: the front end is idle whenever a step ends, so each token reaches
    the client one streamed message after its step (TTFT later by that, TPOT the same), and
    the intake delays the first step by its own time."""
    base = Scenario.from_dict(synthetic_scenario(num_requests=4, rate_per_s=0.2, prompt=64, output=12,
                                                 engine="vllm"))
    stream_s = 0.003
    runs = {}
    for name, terms in (("intake", EngineTerms(frontend_s=0.01)),
                        ("streamed", EngineTerms(frontend_s=0.01, stream_s=stream_s))):
        run_scenario(with_terms(base, terms), tmp_path / name, plots=False, show_progress=False)
        runs[name] = np.genfromtxt(tmp_path / name / "requests.csv", delimiter=",", names=True, dtype=None,
                                   encoding="utf-8")
    for col in ("first_scheduled_s", "arrival_s"):
        assert runs["streamed"][col] == pytest.approx(runs["intake"][col], abs=0)
    assert runs["streamed"]["first_token_s"] - runs["intake"]["first_token_s"] == pytest.approx(stream_s)
    assert runs["streamed"]["finish_s"] - runs["intake"]["finish_s"] == pytest.approx(stream_s)
    assert runs["streamed"]["tpot_ms"] == pytest.approx(runs["intake"]["tpot_ms"])


def test_a_bursts_tokens_wait_behind_the_intake_of_the_requests_before_them(tmp_path):
    """A burst through a front end that also streams: the intake of the whole burst came before
    the first step ended, so the first tokens reach the client after it; with no streaming
    cost, tokens still wait for the intake in service."""
    base = Scenario.from_dict(synthetic_scenario(num_requests=40, rate_per_s=1e9, prompt=64, output=40,
                                                 engine="sglang"))  # SGLang takes requests in on its streaming loop
    intake = replay(with_terms(base, EngineTerms(frontend_s=0.01)))
    streamed = replay(with_terms(base, EngineTerms(frontend_s=0.01, stream_s=2e-4)))
    assert intake["median_ttft_ms"] >= 40 * 10 - 1e-3  # every first token after all 40 intakes
    assert streamed["median_ttft_ms"] > intake["median_ttft_ms"]
    assert streamed["output_throughput"] < intake["output_throughput"]
    assert math.isfinite(streamed["median_tpot_ms"]) and streamed["median_tpot_ms"] > 0
    summary, _ = run_scenario(with_terms(base, EngineTerms(frontend_s=0.01)), tmp_path, plots=False,
                              show_progress=False)
    assert math.isfinite(summary.mean_tok_per_s_per_user)  # tokens delivered at once have no rate


def test_an_intake_off_the_streaming_loop_runs_beside_it():
    """vLLM tokenizes on its renderer's thread: requests are taken in one after another on their
    own server, and a step's messages stream without waiting for the intake of later requests."""
    fe = FrontEnd(intake_s=0.01, stream_s=0.001, shared=False)
    assert [fe.take_in(0.0) for _ in range(3)] == pytest.approx([0.01, 0.02, 0.03])
    fe.streamed(0.005, 40)
    assert fe.take_in(0.006) == pytest.approx(0.04)  # behind the other intakes, not the streaming
    fe.settle()
    assert fe.delivered(0, 0.005) == pytest.approx(0.005 + 0.040)  # the streaming from the step's end
    pooled = FrontEnd(intake_s=0.01, stream_s=0.001, processes=4, shared=False)  # one API server per DP rank
    assert (pooled.intake_s, pooled.stream_s) == pytest.approx((0.0025, 0.00025))


def test_vllm_runs_an_api_server_per_data_parallel_rank():
    from dspark_sim.engines.model import Engine

    assert Engine("vllm").front_end_layout(8) == (True, 8)
    assert Engine("sglang").front_end_layout(8) == (True, 1)
