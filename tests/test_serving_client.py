"""A benchmark client with a concurrency limit (``workload.max_concurrency``): requests are sent
as earlier ones finish, and the run is the same step by step and with skip-ahead."""
import numpy as np
import pytest
from conftest import synthetic_scenario

from dspark_sim.errors import InputError
from dspark_sim.run import run_scenario
from dspark_sim.scenario import Scenario


def _run(tmp_path, name, exact=False, **over):
    raw = synthetic_scenario(num_requests=24, rate_per_s=1e9, prompt=200, output=40, **over)
    raw["workload"] = {**raw["workload"], "max_concurrency": 4}
    raw["exact"] = exact
    run_scenario(Scenario.from_dict(raw), tmp_path / name, plots=False, show_progress=False)
    return np.genfromtxt(tmp_path / name / "requests.csv", delimiter=",", names=True, dtype=None, encoding="utf-8")


@pytest.mark.parametrize("over", [{}, {"speculation": {"method": "dspark"}}, {"engine": "sglang"}],
                         ids=["none", "dspark", "sglang"])
def test_at_most_the_limit_is_in_flight_and_each_request_is_sent_as_one_finishes(tmp_path, over):
    rows = _run(tmp_path, "a", **over)
    order = np.argsort(rows["arrival_s"], kind="stable")
    sent, done = rows["arrival_s"][order], np.sort(rows["finish_s"])
    assert np.all(sent[:4] == 0.0)  # the first four at once
    # the k-th request after the first four is sent when the k-th request finishes: when its last step ends,
    # which the client sees after the front end has streamed it (SGLang's: well under a millisecond)
    assert sent[4:] == pytest.approx(done[:20], abs=1e-9 if "engine" not in over else 1e-3)
    assert np.all(sent[4:] <= done[:20])
    late = 0.0 if "engine" not in over else 1e-3  # the client sees a finish after its last message is streamed
    for t in sent:  # never more than four in flight
        assert np.count_nonzero((rows["arrival_s"] <= t) & (rows["finish_s"] > t + late)) <= 4
    assert np.all(rows["first_token_s"] > rows["arrival_s"])


@pytest.mark.parametrize("over", [{}, {"speculation": {"method": "dspark"}}], ids=["none", "dspark"])
def test_skip_ahead_and_step_by_step_runs_agree(tmp_path, over):
    fast, exact = _run(tmp_path, "fast", **over), _run(tmp_path, "exact", exact=True, **over)
    for name in fast.dtype.names:
        assert fast[name].tolist() == exact[name].tolist(), name


def test_the_limit_is_checked(write_scenario):
    from dspark_sim.scenario import load_scenario

    raw = synthetic_scenario()
    raw["workload"] = {**raw["workload"], "max_concurrency": 0}
    with pytest.raises(InputError) as err:
        load_scenario(write_scenario(raw))
    assert err.value.key == "workload.max_concurrency"
