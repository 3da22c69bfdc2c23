"""Confirmation: which trials it takes next, once the fresh seeds have failed a round's finalists, and
its simulations shared over worker processes."""
from __future__ import annotations

import optuna
from test_tuner_fixtures import tiny_scenario

from dspark_sim.slo import Slo
from dspark_sim.tuner import runner
from dspark_sim.tuner.confirm import FINALISTS, Processes, confirm, finalists
from dspark_sim.tuner.objective import Target
from dspark_sim.tuner.scenarios import load_base
from dspark_sim.tuner.space import load_space
from dspark_sim.tuner.tune import Settings


def trial(value: float, slack: float) -> optuna.trial.FrozenTrial:
    """A complete trial meeting its one SLO with ``slack`` (relative) to spare."""
    return optuna.trial.create_trial(value=value, constraints={"p99_tpot": -slack})


def test_a_first_round_takes_the_best_trials_whatever_their_slack():
    queue = [trial(100 - i, 0.001 * (i + 1)) for i in range(10)]
    assert finalists(queue, 0.0) == queue[:FINALISTS]


def test_after_a_failed_round_only_trials_with_more_slack_than_the_seeds_took():
    # the best trials crowd the SLO's edge (0.1-0.9 % slack); a few further down have 6-8 %
    edge = [trial(100 - i, 0.001 * (i + 1)) for i in range(9)]
    roomy = [trial(80 - i, 0.06 + 0.01 * i) for i in range(3)]
    queue = edge + roomy + [trial(50, 0.2)]
    assert finalists(queue, 0.04) == roomy  # best value first among those with the slack


def test_where_no_trial_has_that_slack_the_roomiest_go_next():
    queue = [trial(100 - i, 0.001 * (i + 1)) for i in range(6)]
    assert finalists(queue, 0.5) == [queue[5], queue[4], queue[3]]


def test_confirmation_on_two_processes_gives_the_records_of_one(tmp_path):
    """Each finalist's fresh seeds are simulated as separate tasks on the worker processes; put
    back together they are the records one process makes, seed by seed in order."""
    base = load_base(tiny_scenario(tmp_path))
    settings = Settings(base, Target(slo=Slo(tpot_ms=40)), load_space(tmp_path / "space.yaml"), trials=4, baselines=())
    url = f"sqlite:///{tmp_path / 'c.db'}"
    jobs = settings.jobs(url, "c")
    runner.run(jobs, workers=1, timeout_s=None, show_progress=False)
    alone = confirm(jobs, [7, 8, 9], 1)
    with Processes(2) as procs:
        shared = confirm(jobs, [7, 8, 9], procs)
        again = confirm(jobs, [7, 8, 9], procs)  # the same processes serve a second map
    assert alone == shared == again
    assert alone["c"]["seeds"][-3:] == [7, 8, 9]
