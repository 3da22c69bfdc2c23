"""Load sweeps of the fidelity suite: their cases, levels and the budget that keeps sweeps whole."""
import json
from pathlib import Path

import numpy as np
import pytest

from dspark_sim.errors import InputError
from dspark_sim.validation import sweeps
from dspark_sim.validation.budget import Budget, Unit
from dspark_sim.workload import read_trace

SWEEPS = Path(__file__).resolve().parents[1] / "profiles" / "h200" / "validation" / "sweeps"


def test_every_level_of_every_family_is_a_case_with_its_rate():
    table = sweeps.trace_table()
    assert len(table) == len(sweeps.FAMILIES) * len(sweeps.BATCHINGS) * len(sweeps.LEVELS)
    for name, (source, count, load, batching) in table.items():
        fam_name, level, b = sweeps.level_of(name)
        fam = sweeps.family(fam_name)
        assert b == batching and fam.source == source and level in sweeps.LEVELS
        span = fam.span_s * (sweeps.LIGHT_SPAN if level < sweeps.LIGHT else 1.0)
        # the window holds the level's request rate (sessions: as near as a session rate gets)
        assert count == pytest.approx(level * fam.saturation_rps * span, rel=0.05, abs=1)
    # the two batchings of a level serve the same arrivals
    assert table["sw-chat-120"][:3] == table["sw-chat-120-mixed"][:3]


def test_the_session_rate_puts_the_level_in_the_window():
    fam = sweeps.family("sw-sess")
    rate = sweeps.source_rate(fam, 30.0, 4.0)
    assert rate < 30.0  # a session makes several requests
    assert sweeps.arrivals_within(fam, rate, 4.0) == pytest.approx(120, rel=0.05)


def test_sweeps_select_by_family_sweep_and_batching():
    assert [s.name for s in sweeps.sweeps(["sw-chat", "sw-sess:mixed"])] == [
        "sw-chat:mixed", "sw-chat:prefill_first", "sw-sess:mixed"]
    assert [s.name for s in sweeps.sweeps(None, ["prefill_first"])] == [
        f"{f}:prefill_first" for f in ("sw-chat", "sw-sess", "sw-long")]
    assert sweeps.sweeps(["sw-long:mixed"])[0].traces == tuple(
        f"sw-long-{round(x * 100):03d}-mixed" for x in sweeps.LEVELS)
    with pytest.raises(InputError, match="--only"):
        sweeps.sweeps(["sw-nothing"])


def test_committed_cases_match_their_definitions_and_plan():
    """The committed sweep cases are what the definitions write: every scenario, a trace of the
    recorded count, and a time estimate for each (python benchmarks/fidelity.py cases --sweeps)."""
    plan = json.loads((SWEEPS / sweeps.PLAN).read_text())
    table = sweeps.trace_table()
    assert set(plan["estimate_s"]) == {f"{t}__{m}" for t in table for m in ("dspark", "mtp3", "none")}
    for name, (source, count, _, _) in table.items():
        trace = SWEEPS / (f"{name}.jsonl" if source == "sessions" else f"{name}.csv")
        assert sum(len(c) for c in read_trace(trace)) == count
        assert all((SWEEPS / f"{name}__{m}.yaml").is_file() for m in ("dspark", "mtp3", "none"))


def _budget(limit_s, estimate=10.0, warm=5.0):
    units = [Unit(f"u{i}", (f"u{i}-a", f"u{i}-b")) for i in range(3)]
    est = {(t, m): estimate for u in units for t in u.traces for m in ("x", "y")}
    return Budget(units, ["x", "y"], est, {"x": warm, "y": warm}, limit_s, overhead_s=0.0, margin=1.0)


def test_budget_admits_a_unit_only_when_every_later_method_can_serve_it_too():
    b = _budget(100.0)
    assert b.estimate() == pytest.approx(2 * 5 + 6 * 2 * 10)
    # x: warm 5, then each unit 20 s for x and owes 20 s of y (plus y's warm-up 5)
    assert b.allows("x", b.units[0], 5.0)  # 5 + 20 + 5 + 20 = 50
    b.finished("x", b.units[0])
    assert b.allows("x", b.units[1], 25.0)  # 25 + 20 + 5 + 40 = 90
    b.finished("x", b.units[1])
    assert not b.allows("x", b.units[2], 45.0)  # 45 + 20 + 5 + 60 = 130
    assert [u.name for u in b.eligible("y")] == ["u0", "u1"]
    assert b.allows("y", b.units[0], 50.0) and b.allows("y", b.units[1], 70.0)


def test_budget_learns_from_cases_slower_than_estimated():
    b = _budget(1000.0)
    assert b.scale == 1.0
    b.served("u0-a", "x", 15.0)
    b.served("u0-b", "x", 15.0)
    assert b.scale == pytest.approx(1.5) and b.unit_s(b.units[1], "y") == pytest.approx(30.0)
    b.served("u1-a", "x", 1.0)  # faster cases never shrink the estimates below the simulator's
    assert b.scale >= 1.0


def test_the_first_method_may_try_every_unit_and_later_ones_only_what_it_finished():
    b = _budget(1000.0)
    assert [u.name for u in b.eligible("x")] == ["u0", "u1", "u2"]
    assert b.eligible("y") == []
    b.finished("x", b.units[2])
    assert [u.name for u in b.eligible("y")] == ["u2"]
    assert np.isfinite(b.estimate())


@pytest.mark.parametrize("args, named", [(["--gpu", "h900", "--visit", "visit99"], "--gpu"),
                                         (["--gpu", "h100", "--visit", "../visit99"], "--visit")])
def test_a_visit_is_imported_only_under_a_known_gpu_and_a_plain_name(tmp_path, args, named):
    import subprocess
    import sys

    repo = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, str(repo / "benchmarks" / "fidelity.py"), "import-visit", "--src",
                           str(tmp_path), "--parts", "capacity", "--command", "x", *args],
                          capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 2 and done.stderr.startswith(f"error: {named}") and "Traceback" not in done.stderr
    assert not (repo / "profiles" / "h100" / "validation" / "visit99").exists()
