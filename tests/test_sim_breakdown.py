"""The simulator's phases (dspark_sim/speed/breakdown.py, timed by benchmarks/sim_breakdown.py)
account for a run's time: they sum to its wall time, the functions they name exist, and little
is left outside them."""
import pytest

from dspark_sim.speed import breakdown as sim_breakdown
from dspark_sim.speed.cases import CASES, sliced


@pytest.mark.parametrize("name", ["chat-none", "chat-dspark"])
def test_phases_cover_a_tiny_run(tmp_path, name):
    row = sim_breakdown.profile(sliced(CASES[name], 60), tmp_path)
    seconds = row["seconds"]
    assert list(seconds) == sim_breakdown.NAMES
    assert min(seconds.values()) >= 0
    assert sum(seconds.values()) == pytest.approx(row["wall_s"], rel=1e-6)
    assert seconds[sim_breakdown.REST] < 0.25 * row["wall_s"]  # simpy's loop and the run's frame only
    assert row["requests"] == 60 and row["events"]["steps"] > 0 and row["events"]["stretches"] > 0
    if name == "chat-dspark":
        assert row["events"]["draws"] > 0 and seconds["acceptance draws, policy planning"] > 0
    for phase in ("arrival and admission", "stretch planning", "pricing (cost model)", "applying stretches",
                  "per-request records", "steps.csv, requests.csv writing"):
        assert seconds[phase] > 0, phase


def test_the_functions_are_put_back(tmp_path):
    """A profiled run leaves the simulator's functions as they were."""
    from dspark_sim.serving.replica import Replica
    from dspark_sim.serving.stretch import Segments

    before = (Replica.__dict__["_plan"], Segments.__dict__["decode"])
    sim_breakdown.profile(sliced(CASES["chat-none"], 20), tmp_path)
    assert (Replica.__dict__["_plan"], Segments.__dict__["decode"]) == before


def test_a_renamed_function_fails_loudly():
    with pytest.raises((AttributeError, KeyError)):
        sim_breakdown.resolve("dspark_sim.serving.replica:Replica._no_such_phase")
