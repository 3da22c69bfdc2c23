"""The engine's front-end process: request intake and output streaming on one server."""
import pytest
from conftest import synthetic_scenario

from dspark_sim.engine.frontend import FrontEnd
from dspark_sim.engines import EngineTerms
from dspark_sim.profiling.engine_fit import replay, with_terms
from dspark_sim.scenario import Scenario


def test_intake_alone_serves_one_request_at_a_time():
    fe = FrontEnd(intake_s=0.05, stream_s=0.0)
    assert [fe.take_in(0.0) for _ in range(3)] == pytest.approx([0.05, 0.10, 0.15])
    assert fe.take_in(1.0) == pytest.approx(1.05)  # idle in between: no wait


def test_messages_streamed_before_an_intake_delay_it():
    fe = FrontEnd(intake_s=0.01, stream_s=0.001)
    assert fe.take_in(0.0) == pytest.approx(0.01)
    fe.streamed(0.005, 40)  # ended while the first intake ran: 40 ms of streaming before the next
    fe.streamed([0.5, 0.6], [7, 9])  # not ended yet when the next request is taken in
    assert fe.take_in(0.01) == pytest.approx(0.01 + 0.040 + 0.01)
    assert fe.take_in(0.55) == pytest.approx(0.55 + 0.01)  # 7 ms streamed while idle from 0.06 to 0.55
    fe.streamed(0.6, 100)
    # 109 messages ended by 0.6, 40 ms of them streamed while idle from 0.56
    assert fe.take_in(0.6) == pytest.approx(0.6 + 0.109 - 0.04 + 0.01)


def test_replicas_pool_the_front_end():
    fe = FrontEnd(intake_s=0.02, stream_s=0.002, replicas=2)
    assert (fe.intake_s, fe.stream_s) == pytest.approx((0.01, 0.001))


def test_streaming_slows_a_bursts_intake_and_nothing_else():
    """A burst through a front end that also streams: requests reach the scheduler later, so its
    first tokens come later; with no streaming cost the run is the intake-only run."""
    base = Scenario.from_dict(synthetic_scenario(num_requests=40, rate_per_s=1e9, prompt=64, output=40,
                                                 engine="vllm"))
    intake = replay(with_terms(base, EngineTerms(frontend_s=0.01)))
    same = replay(with_terms(base, EngineTerms(frontend_s=0.01, stream_s=0.0)))
    streamed = replay(with_terms(base, EngineTerms(frontend_s=0.01, stream_s=2e-4)))
    assert same == intake
    assert streamed["median_ttft_ms"] > intake["median_ttft_ms"]
    assert streamed["output_throughput"] < intake["output_throughput"]
