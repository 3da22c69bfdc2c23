"""The replay fit of an engine's host terms: every candidate is replayed in full, so a burst whose
batch grows with the host time is fitted, not extrapolated from one replay."""
import pytest
from conftest import synthetic_scenario

from dspark_sim.engines.model import EngineTerms
from dspark_sim.engines.fit import FITTED_METRICS, fit_replay_terms, replay, with_terms
from dspark_sim.scenario import Scenario

# front-end times of the size the shipped fits have (engines/terms.json: 8 to 20 ms a request)
TRUTH = EngineTerms(step_host_s=0.002, step_host_s_per_req=60e-6, frontend_s=0.010, stream_s=150e-6)


def _runs() -> list[Scenario]:
    """A burst (its batch, and so its TPOT, moves with the per-request host time) and a paced run,
    overlap off (an overlapped step hides host time shorter than its GPU work: the paced run
    could not tell the step terms apart)."""
    common = {"model": "qwen3-14b", "gpu": "h100", "engine": {"name": "vllm", "overlap": False}, "deployment": {},
              "speculation": {"method": "none"}}
    burst = synthetic_scenario(num_requests=100, rate_per_s=1e9, prompt=200, output=60, **common)
    paced = synthetic_scenario(num_requests=24, rate_per_s=4.0, prompt=200, output=60, **common)
    return [Scenario.from_dict(raw) for raw in (burst, paced)]


def test_fit_replays_the_runs_the_terms_made():
    runs = _runs()
    measured = [replay(with_terms(s, TRUTH)) for s in runs]
    fitted = fit_replay_terms(runs, measured, EngineTerms(), fit_step=True)
    for scenario, want in zip(runs, measured):
        got = replay(with_terms(scenario, fitted))
        for key in FITTED_METRICS:
            assert got[key] == pytest.approx(want[key], rel=0.05), key

