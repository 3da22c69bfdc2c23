"""Which trials confirmation takes next, once the fresh seeds have failed a round's finalists."""
from __future__ import annotations

import optuna

from dspark_sim.tuner.confirm import FINALISTS, finalists


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
