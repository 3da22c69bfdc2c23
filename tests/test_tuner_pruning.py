"""Pruned studies (``dspark-tune --slices``): what each rung compares, the rule that stops a trial,
completed trials scored as without pruning, the report, resume after SIGKILL, CLI errors."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import optuna
import pytest
from optuna.trial import TrialState
from test_tuner_fixtures import TINY, sqlite_url, tiny_scenario, tune_args

from dspark_sim.tuner.cli import main as tune_main
from dspark_sim.tuner.objective import assess, score, simulate
from dspark_sim.tuner.pruning import REDUCTION, rung_value, slice_of
from dspark_sim.tuner.scenarios import configure
from dspark_sim.tuner.tune import stored_settings

# 150 requests at 15 a second: arrivals over 10 s, so slices of 3 s and 6 s (0.05 and 0.1 min)
SLOW = {**TINY["workload"], "synthetic": {**TINY["workload"]["synthetic"], "num_requests": 150, "rate_per_s": 15.0}}
SLICES = "0.05,0.1"


def pruned_args(tmp_path, study: str, *extra: str, trials: int = 18) -> list[str]:
    """A tiny pruned tune's arguments, on the tiny scenario with arrivals spread over 10 s."""
    args = tune_args(tmp_path, study, "--slices", SLICES, *extra, trials=trials)
    tiny_scenario(tmp_path, workload=SLOW)  # in place of the one tune_args wrote
    return args


def _trials(url: str, study: str) -> list[optuna.trial.FrozenTrial]:
    return optuna.load_study(study_name=study, storage=url).get_trials(deepcopy=False)


@pytest.fixture(scope="module")
def pruned_study(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("pruned")
    assert tune_main(pruned_args(tmp_path, "cut")) == 0
    url = sqlite_url(tmp_path)
    return tmp_path, url, _trials(url, "cut"), stored_settings(url, "cut")


def test_the_budget_counts_complete_and_pruned_trials(pruned_study):
    _, _, trials, settings = pruned_study
    states = [t.state for t in trials]
    assert states.count(TrialState.COMPLETE) + states.count(TrialState.PRUNED) == 18  # one worker: exactly
    assert states.count(TrialState.PRUNED) > 0 and states.count(TrialState.COMPLETE) > 0
    assert settings.slices == (0.05, 0.1)


def test_a_rung_is_the_objective_on_the_same_slice_and_seed(pruned_study):
    """Every trial's value at a rung is the study's objective (SLO met first) on that slice of the
    first seed, simulated apart from the tuner; a trial that passes every rung is scored as an
    unpruned study scores it."""
    _, _, trials, settings = pruned_study
    labels = ["first 0.05 min", "first 0.1 min", "whole trace, first seed"]
    for t in trials[:6] + [t for t in trials if t.state == TrialState.COMPLETE][:2]:
        rungs = t.user_attrs["rungs"]
        assert [r["slice"] for r in rungs] == labels[:len(rungs)]
        assert (t.state == TrialState.PRUNED) == (t.user_attrs.get("pruned_at") is not None)
        raw = configure(settings.base, t.user_attrs["config"])
        for r in rungs:
            alone = assess(simulate(slice_of(raw, r["until_s"]), [settings.seeds[0]]), settings.target)
            assert r["value"] == rung_value(alone)
        if t.state == TrialState.COMPLETE:
            assert len(rungs) == 3
            assert t.values[0] == score(settings.base, t.user_attrs["config"], settings.target,
                                        list(settings.seeds))["values"][0]


def test_a_trial_stops_unless_in_the_best_third_of_its_rung(pruned_study):
    """One worker runs trials in order: at each rung a trial goes on only when its value is among
    the best 1/REDUCTION of the values that trials before it reached there, with its own (the
    first ones, too few for a third, go on when best)."""
    _, _, trials, _ = pruned_study
    seen: dict[int, list[float]] = {}
    for t in sorted(trials, key=lambda t: t.number):
        rungs = t.user_attrs["rungs"]
        for i, r in enumerate(rungs):
            values = sorted(seen.setdefault(i, []) + [r["value"]], reverse=True)
            goes_on = r["value"] >= values[max(len(values) // REDUCTION, 1) - 1]
            seen[i].append(r["value"])
            last = i == len(rungs) - 1
            assert goes_on == (not last or t.state == TrialState.COMPLETE), (t.number, i)


def test_the_report_names_the_pruned_trials_and_their_slice(pruned_study):
    tmp_path, _, trials, _ = pruned_study
    report = (tmp_path / "out" / "report.md").read_text()
    data = json.loads((tmp_path / "out" / "report.json").read_text())
    assert "## Pruning" in report and data["slices"] == [0.05, 0.1]
    by_slice = data["pruned"]["cut"]
    assert sorted(n for numbers in by_slice.values() for n in numbers) == \
        [t.number for t in trials if t.state == TrialState.PRUNED]
    for label, numbers in by_slice.items():
        cells = ", ".join(map(str, numbers)) or "-"
        assert f"| {label} | {len(numbers)} | {cells} |" in report
    # the comparison counts the trials done, complete or pruned: the budget is met
    assert data["comparison"]["methods"]["dspark"]["completed"] == [18]


def test_sigkill_then_resume_keeps_the_pruned_and_complete_trials(tmp_path):
    url = sqlite_url(tmp_path)
    args = pruned_args(tmp_path, "kill", trials=400)
    proc = subprocess.Popen([sys.executable, "-m", "dspark_sim.tuner.cli", *args],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    done = (TrialState.COMPLETE, TrialState.PRUNED)
    deadline = time.monotonic() + 120
    try:
        while sum(t.state in done for t in _trials_or_none(url, "kill")) < 4:
            assert time.monotonic() < deadline, "timed out"
            time.sleep(0.05)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    before = [(t.number, t.state, t.params, t.values) for t in _trials(url, "kill") if t.state in done]
    target = len(before) + 4
    assert tune_main(["--study", "kill", "--storage", url, "--trials", str(target), "--quiet",
                      "--out", str(tmp_path / "resumed")]) == 0
    after = [(t.number, t.state, t.params, t.values) for t in _trials(url, "kill") if t.state in done]
    assert after[:len(before)] == before and len(after) >= target
    assert stored_settings(url, "kill").slices == (0.05, 0.1)  # resumed with the study's own slices


def _trials_or_none(url: str, study: str) -> list[optuna.trial.FrozenTrial]:
    try:
        return _trials(url, study)
    except KeyError:  # not created yet
        return []


@pytest.mark.parametrize("extra,needle", [
    (["--objective", "pareto"], "one objective"),
    (["--slices", "0.1,0.05"], "increasing order"),
    (["--slices", "5,x"], "separated by commas"),
    (["--slices", "1"], "not shorter than the trace"),
])
def test_bad_slices_one_line_exit_2(tmp_path, capsys, extra, needle):
    args = pruned_args(tmp_path, "bad")
    if "--slices" in extra:  # replace the fixture's slices
        i = args.index("--slices")
        del args[i:i + 2]
    assert tune_main(args + extra) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and "--slices" in err and needle in err and "\n" not in err
    assert not (tmp_path / "out").exists()


def test_a_study_resumed_with_other_slices_is_refused(tmp_path, capsys):
    assert tune_main(pruned_args(tmp_path, "own", trials=2)) == 0
    args = pruned_args(tmp_path, "own", trials=3)
    args[args.index("--slices") + 1] = "0.05"
    assert tune_main(args) == 2
    assert "exists with other settings" in capsys.readouterr().err
