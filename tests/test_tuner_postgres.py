"""Two `dspark-tune` processes work one study on a real PostgreSQL server.

.ci/postgres starts the server and exports DSPARK_TEST_POSTGRES_URL. The test
skips only outside CI when the variable is unset; in CI (CI=true) it must run.
"""
from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections import Counter
from contextlib import contextmanager

import optuna
import pytest
from test_tuner_fixtures import tune_args

from dspark_sim.tuner.storage import STARTUP_TRIALS, open_storage

URL = os.environ.get("DSPARK_TEST_POSTGRES_URL")

if URL is None and os.environ.get("CI", "").lower() != "true":
    pytest.skip("DSPARK_TEST_POSTGRES_URL is unset (source .ci/postgres to run this test)",
                allow_module_level=True)


@contextmanager
def two_processes(tmp_path, make_args, timeout_s: float = 120):
    """Run ``dspark-tune`` twice at once on one fresh study in PostgreSQL, as if on two machines
    (separate processes, separate outputs; ``make_args(dir, study)`` gives each one's arguments);
    yields the study's trials and deletes the study after."""
    assert URL, "CI=true but DSPARK_TEST_POSTGRES_URL is unset: .ci/postgres did not run"
    study = f"pg-{uuid.uuid4().hex[:12]}"
    procs = []
    for k in range(2):
        (tmp_path / str(k)).mkdir()
        args = make_args(tmp_path / str(k), study)
        args[args.index("--storage") + 1] = URL
        procs.append(subprocess.Popen([sys.executable, "-m", "dspark_sim.tuner.cli", *args],
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    logs = [p.communicate(timeout=timeout_s)[0] for p in procs]
    storage = open_storage(URL)
    try:
        assert [p.returncode for p in procs] == [0, 0], logs
        trials = optuna.load_study(study_name=study, storage=storage).get_trials(deepcopy=False)
        states = Counter(t.state for t in trials)
        # nothing lost: every trial either finished or was never started past the budget
        assert states[optuna.trial.TrialState.RUNNING] == 0 and states[optuna.trial.TrialState.FAIL] == 0
        yield trials
    finally:
        for summary in optuna.get_all_study_summaries(storage):
            if summary.study_name.startswith(study):
                optuna.delete_study(study_name=summary.study_name, storage=storage)


def test_two_processes_share_one_study(tmp_path):
    n_trials = 16
    with two_processes(tmp_path, lambda d, study: tune_args(d, study, trials=n_trials)) as trials:
        complete = [t for t in trials if t.state == optuna.trial.TrialState.COMPLETE]
        assert n_trials <= len(complete) <= n_trials + 1  # the two may each finish one past the count
        # both processes contributed, and no trial is stored twice
        workers = Counter(t.user_attrs["worker"] for t in complete)
        assert len(workers) == 2 and min(workers.values()) >= 2
        assert len({t.number for t in complete}) == len(complete)
        # the start-up draws are seeded by trial number: neither process replays the other's. After
        # them TPE may propose one point twice (two processes reading the same history at once).
        startup = [t for t in complete if t.number < STARTUP_TRIALS]
        assert len({tuple(sorted(t.params.items())) for t in startup}) == len(startup)
        assert all(t.user_attrs.get("per_seed") and t.values for t in complete)


def test_two_processes_share_one_pruned_study(tmp_path):
    """With --slices the two share the pruner's rungs through the database: the budget counts
    complete and pruned trials, and every pruned trial keeps its rungs and where it stopped."""
    from test_tuner_pruning import pruned_args

    n_trials = 16
    with two_processes(tmp_path, lambda d, study: pruned_args(d, study, trials=n_trials), 300) as trials:
        states = Counter(t.state for t in trials)
        done = states[optuna.trial.TrialState.COMPLETE] + states[optuna.trial.TrialState.PRUNED]
        assert n_trials <= done <= n_trials + 1 and states[optuna.trial.TrialState.PRUNED] > 0
        assert len({t.user_attrs["worker"] for t in trials if "worker" in t.user_attrs}) == 2
        assert all(t.user_attrs["rungs"] for t in trials)
        assert all(t.user_attrs.get("pruned_at") for t in trials if t.state == optuna.trial.TrialState.PRUNED)
        # every trial's first-rung value is in the database, where both processes' pruners read it
        assert all("completed_rung_0" in t.system_attrs for t in trials)


def test_processes_opening_a_fresh_database_at_once_all_open_it():
    """Optuna creates its tables on first open; processes doing so at the same moment race on
    PostgreSQL's catalog, and every one of them must still open the storage."""
    import time

    import sqlalchemy

    from dspark_sim.tuner.storage import driver_url

    schema = f"fresh_{uuid.uuid4().hex[:12]}"  # a namespace of its own: the tables do not exist yet
    admin = sqlalchemy.create_engine(driver_url(URL), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sqlalchemy.text(f"CREATE SCHEMA {schema}"))
    url = f"{URL}?options=-csearch_path%3D{schema}"
    opener = ("import sys, time\nfrom dspark_sim.tuner.storage import open_storage\n"
              "time.sleep(max(0.0, float(sys.argv[2]) - time.time()))\nopen_storage(sys.argv[1])\n")
    try:
        start = time.time() + 3.0  # every process imported and waiting: they open together
        procs = [subprocess.Popen([sys.executable, "-c", opener, url, str(start)], stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True) for _ in range(6)]
        logs = [p.communicate(timeout=120)[0] for p in procs]
        assert [p.returncode for p in procs] == [0] * len(procs), logs
        with admin.connect() as conn:
            tables = conn.execute(sqlalchemy.text(
                "SELECT count(*) FROM information_schema.tables WHERE table_schema = :s"), {"s": schema}).scalar()
        assert tables > 0
    finally:
        with admin.connect() as conn:
            conn.execute(sqlalchemy.text(f"DROP SCHEMA {schema} CASCADE"))
        admin.dispose()
