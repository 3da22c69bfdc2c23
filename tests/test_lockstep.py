"""The decoder's serving loop and the simulator on the same arrivals and step prices make the
same steps: without speculation nothing is random, so every step's composition must agree."""
import numpy as np
import pytest

pytest.importorskip("torch")

from dspark_sim.validation.lockstep import lockstep_case  # noqa: E402


def _trace(n=160, rate=400.0, seed=3):
    rng = np.random.default_rng(seed)
    arrival = np.cumsum(rng.exponential(1.0 / rate, n))
    prompt = rng.integers(16, 200, n)
    return arrival - arrival[0], prompt, rng.integers(8, 40, n)


@pytest.mark.parametrize("batching", ["prefill_first", "mixed"])
def test_without_speculation_every_step_agrees_at_saturation(batching, tmp_path):
    """Twelve places for requests arriving four times as fast as they leave: the queue grows
    and every freed place is taken. The decoder's overlapped loop frees a finished request's
    place a step after the step that finishes it: the simulator must too (serving/inflight.py)."""
    arrival, prompt, output = _trace()
    case = lockstep_case(tmp_path, arrival, prompt, output, "none", batching, max_running_requests=12)
    assert case["first_difference"] is None
    assert case["decoder"]["steps"] == case["sim"]["steps"] > 100
    assert case["decoder"]["mean_running"] >= 11  # saturated: the places stay taken
    for key in ("output_throughput", "mean_ttft_ms", "p50_tpot_ms"):
        assert case["error"][key] == pytest.approx(0.0, abs=1e-6)  # times are written to the microsecond


def test_with_drafts_the_steps_differ_only_by_the_draws(tmp_path):
    arrival, prompt, output = _trace(n=240)
    case = lockstep_case(tmp_path, arrival, prompt, output, "mtp3", "mixed", max_running_requests=12)
    assert abs(case["error"]["output_throughput"]) < 0.03
    assert case["decoder"]["preemptions"] == case["sim"]["preemptions"] == 0
