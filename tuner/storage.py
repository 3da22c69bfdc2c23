"""Where studies live: an embedded SQLite file by default, any Optuna RDB URL otherwise.

Every ``dspark-tune`` process (local ``--workers`` or other machines given the
same ``--storage postgresql://...``) opens the same study and asks the shared
sampler for its next trial; Optuna commits each finished trial in its own
transaction, so a process killed with SIGKILL loses only the trial it was
running. Heartbeats mark such orphans FAILED after ``GRACE_S`` and
``RetryHeartbeatStaleTrialCallback`` re-queues their parameters.
"""
from __future__ import annotations

import contextlib
import functools
import os
import stat
import time
import warnings
from importlib.util import find_spec
from pathlib import Path

import numpy as np
import optuna
import sqlalchemy

from dspark_sim.errors import InputError, os_why

DEFAULT_DB = Path("runs") / "dspark-tune.db"
HEARTBEAT_S = 10
GRACE_S = 60
SCHEMES = ("sqlite", "postgresql", "mysql")
SCHEMA_ATTEMPTS = 5  # opening a fresh database that other processes are creating at the same time


def default_url(db: Path = DEFAULT_DB) -> str:
    """``sqlite:///runs/dspark-tune.db`` (:func:`open_storage` creates its directory, the only
    one it creates: another SQLite file's directory must exist)."""
    return f"sqlite:///{db}"


def check_url(url: str) -> str:
    """Reject what Optuna's RDB storage cannot open, naming the flag."""
    scheme = url.split(":", 1)[0].split("+", 1)[0]
    if "://" not in url or scheme not in SCHEMES:
        raise InputError(None, "--storage", url, f"expected a URL of {', '.join(SCHEMES)} (e.g. sqlite:///study.db)")
    return url


def in_memory(url: str) -> bool:
    """Whether ``url`` names an in-memory SQLite database (none named, ``:memory:``, or a URI filename
    opened with ``mode=memory``)."""
    if not url.startswith("sqlite"):
        return False
    query = url.split("?", 1)[1] if "?" in url else ""
    return sqlalchemy.engine.make_url(url).database in (None, "", ":memory:") or "mode=memory" in query.split("&")


def sqlite_file(url: str) -> Path | None:
    """The file of a SQLite URL; None for another database, an in-memory one or a URI filename."""
    if not url.startswith("sqlite") or in_memory(url):
        return None
    database = sqlalchemy.engine.make_url(url).database
    return None if database.startswith("file:") else Path(database)


def check_sqlite(url: str, *, exists: bool, write: bool) -> None:
    """Refuse, before Optuna opens it, an in-memory SQLite database or a study file that cannot
    serve: the file must exist when ``exists`` (reading or resuming a study creates no database),
    else its directory must (the default's, runs/, is made); ``write``: the file and its directory
    must be writable (SQLite keeps its journal beside the file). Nothing is created here."""
    query = url.split("?", 1)[1] if "?" in url else ""
    if write and url.startswith("sqlite") and any(q in ("mode=ro", "immutable=1") for q in query.split("&")):
        raise InputError(None, "--storage", _shown(url), "opens the file read-only: a study writes its file")
    if in_memory(url):
        raise InputError(None, "--storage", _shown(url), "is an in-memory SQLite database, which lives in one "
                         "connection of one process: the tuner's workers and its report read the study from a "
                         "file, e.g. sqlite:///study.db")
    path = sqlite_file(url)
    if path is None:
        return
    try:
        st = os.stat(path)
    except FileNotFoundError:
        st = None
    except OSError as err:
        raise InputError(None, "--storage", _shown(url), f"cannot open: {os_why(err)}") from None
    folder = Path(os.path.abspath(path)).parent
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise InputError(None, "--storage", _shown(url), "is not a regular file")
    if st is None and exists:
        raise InputError(None, "--storage", _shown(url), "no such file: no study is stored there")
    if st is None and path != DEFAULT_DB and not folder.is_dir():
        raise InputError(None, "--storage", _shown(url), f"{folder} is not an existing directory: create it first")
    writable = (st is None or os.access(path, os.W_OK)) and (not folder.is_dir() or os.access(folder, os.W_OK))
    if write and not writable:
        raise InputError(None, "--storage", _shown(url), "is read-only: a study writes its file and, beside it, "
                         "SQLite's journal")


@contextlib.contextmanager
def writing(url: str):
    """Turn a storage that refuses a write (a read-only file, a full disk) into one InputError."""
    try:
        yield
    except (optuna.exceptions.StorageInternalError, sqlalchemy.exc.SQLAlchemyError) as err:
        cause = getattr(err.__cause__, "orig", None) or getattr(err, "orig", None) or err.__cause__ or err
        raise InputError(None, "--storage", _shown(url), f"cannot write: {str(cause).splitlines()[0]}") from None


def driver_url(url: str) -> str:
    """``url`` with a PostgreSQL driver that is installed.

    SQLAlchemy 2.1 reads ``postgresql://`` as psycopg 3; the test extra ships
    psycopg2, so a bare scheme is pinned to psycopg2 when psycopg 3 is absent.
    """
    if url.startswith("postgresql://") and find_spec("psycopg") is None and find_spec("psycopg2") is not None:
        return "postgresql+psycopg2://" + url[len("postgresql://"):]
    return url


@functools.lru_cache(maxsize=8)
def open_storage(url: str) -> optuna.storages.RDBStorage:
    """An RDB storage with heartbeats, so killed workers' trials are failed and retried (one per URL)."""
    engine_kwargs = {"pool_pre_ping": True}
    sqlite = check_url(url).startswith("sqlite")
    if sqlite:
        # several local workers write to one file: wait for the lock instead of failing
        engine_kwargs["connect_args"] = {"timeout": 60}
        if sqlite_file(url) == DEFAULT_DB:
            DEFAULT_DB.parent.mkdir(parents=True, exist_ok=True)
    for attempt in range(SCHEMA_ATTEMPTS):
        try:
            with warnings.catch_warnings():  # heartbeats are "experimental" since Optuna 2.8
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                storage = optuna.storages.RDBStorage(
                    driver_url(url), engine_kwargs=engine_kwargs, heartbeat_interval=HEARTBEAT_S,
                    grace_period=GRACE_S,
                    heartbeat_stale_trial_callback=optuna.storages.RetryHeartbeatStaleTrialCallback(max_retry=2))
            break
        except sqlalchemy.exc.SQLAlchemyError as err:
            # processes opening a fresh database at once race to create Optuna's tables: the
            # loser's CREATE breaks a unique constraint or finds the table made (PostgreSQL's
            # ProgrammingError, SQLite's OperationalError). Once the winner has committed, the
            # tables are there and opening again finds them.
            if not _lost_schema_race(err):
                raise InputError(None, "--storage", _shown(url),
                                 f"cannot open: {str(getattr(err, 'orig', None) or err).splitlines()[0]}") from None
            if attempt == SCHEMA_ATTEMPTS - 1:
                raise InputError(None, "--storage", _shown(url), "cannot open: the schema kept changing under it "
                                 "(other processes creating it)") from None
            time.sleep(0.2 * (attempt + 1))
        except ImportError as err:
            raise InputError(None, "--storage", _shown(url), f"cannot open: {str(err).splitlines()[0]}") from None
    if sqlite:
        _write_ahead_log(storage.engine)
    return storage


def _lost_schema_race(err: Exception) -> bool:
    if isinstance(err, sqlalchemy.exc.IntegrityError):
        return True
    return (isinstance(err, (sqlalchemy.exc.ProgrammingError, sqlalchemy.exc.OperationalError))
            and "already exists" in str(err.orig))


def _shown(url: str) -> str:
    return sqlalchemy.engine.make_url(url).render_as_string(hide_password=True)


def _write_ahead_log(engine) -> None:
    """SQLite in WAL mode with ``synchronous=NORMAL``, every transaction ``BEGIN IMMEDIATE``.

    Optuna commits every parameter separately, so the default (an fsync per
    commit) made a 20 ms simulation cost half a second of trial. A killed
    process still loses nothing committed; only a power cut can drop the last
    commits. Not for SQLite files on network filesystems.

    Optuna takes a queued trial (a killed worker's, re-queued) by reading that it waits and
    then marking it running, a row lock on PostgreSQL and MySQL; SQLite has none, and Python's
    driver starts the transaction only at the write, so two workers could both take one trial
    and the second's result failed the worker ("Cannot tell a COMPLETE trial"). A transaction
    that takes the write lock at its start makes the read and the write one step.
    """
    path = engine.url.database

    def pragmas(connection, record) -> None:
        connection.isolation_level = None  # the driver begins nothing itself: ``begin`` below does
        # a file this process cannot write (a study read for its exports) takes no write lock
        writable = not path or not os.path.exists(path) or os.access(path, os.W_OK)
        record.info["begin"] = "BEGIN IMMEDIATE" if writable else "BEGIN"
        cursor = connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.close()

    def begin(connection) -> None:
        connection.exec_driver_sql(connection.info["begin"])

    sqlalchemy.event.listen(engine, "connect", pragmas)
    sqlalchemy.event.listen(engine, "begin", begin)
    engine.dispose()  # so every pooled connection is opened through the listener


STARTUP_TRIALS = 12  # TPE's random start-up trials (seeded by trial number, as the later ones)


class TrialSeededTPE(optuna.samplers.TPESampler):
    """TPE whose random streams restart from (seed, trial number) before every trial.

    One process proposes exactly what a seeded TPE would run to run; processes
    sharing a study (local workers, other machines) never replay each other's
    draws, because trial numbers are unique within a study. ``group=True``
    keeps conditional (define-by-run) knobs in their own sub-spaces; TPE reads
    the SLO constraints each trial sets (``Trial.set_constraint``).

    ``first``: parameter values trial 0 takes (where its distribution allows them),
    e.g. :func:`dspark_sim.tuner.space.tail_probe`. Trial numbers are assigned by the
    storage, so exactly one trial of a study gets them however many processes share it.
    """

    def __init__(self, seed: int, first: dict | None = None):
        with warnings.catch_warnings():  # multivariate and group are "experimental"
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            super().__init__(seed=seed, multivariate=True, group=True, n_startup_trials=STARTUP_TRIALS)
        self._base_seed = seed
        self._first = dict(first or {})

    def sample_relative(self, study, trial, search_space):
        params = super().sample_relative(study, trial, search_space)
        if trial.number == 0:
            params = {k: v for k, v in params.items() if k not in self._first}
        return params

    def sample_independent(self, study, trial, name, distribution):
        value = self._first.get(name)
        if trial.number == 0 and value is not None and distribution._contains(distribution.to_internal_repr(value)):
            return value
        return super().sample_independent(study, trial, name, distribution)

    def before_trial(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        state = np.random.SeedSequence([self._base_seed, trial.number]).generate_state(2)
        # TPESampler keeps two streams: its own and its start-up RandomSampler's
        self._rng.rng.seed(int(state[0]))
        self._random_sampler._rng.rng.seed(int(state[1]))
        super().before_trial(study, trial)


def sampler(seed: int, first: dict | None = None) -> TrialSeededTPE:
    return TrialSeededTPE(seed, first)


def open_study(url: str, name: str, directions: list[str], sampler_=None, pruner=None, *,
               create: bool = True) -> optuna.Study:
    """Load ``name`` from ``url``, creating it when ``create`` (directions must then match).
    ``pruner``: the study's (None: Optuna's default, which prunes nothing no trial reports to)."""
    storage = open_storage(url)
    if not create:
        try:
            return optuna.load_study(study_name=name, storage=storage, sampler=sampler_, pruner=pruner)
        except KeyError:
            raise InputError(None, "--study", name, f"no such study in {url}") from None
    study = optuna.create_study(storage=storage, study_name=name, sampler=sampler_, pruner=pruner,
                                directions=directions, load_if_exists=True)
    if [d.name.lower() for d in study.directions] != directions:
        raise InputError(None, "--study", name, "exists with other objectives; pick another --study name")
    return study


def study_names(url: str) -> list[str]:
    return [s.study_name for s in optuna.get_all_study_summaries(open_storage(url))]
