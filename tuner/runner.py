"""Running studies: the trial function, local worker processes and the progress bar.

One :class:`Job` per study (the DSpark study and one per baseline). Every
worker runs the jobs in order; a study stops once it holds ``n_trials``
complete trials (with ``--slices``, complete or pruned: :mod:`.pruning`), counted in
the storage, so workers on other machines pulling the same study share that count. ``--timeout`` is a wall-clock deadline over
all jobs.
"""
from __future__ import annotations

import multiprocessing
import os
import socket
import sys
import time
import warnings
from dataclasses import dataclass

import optuna
from optuna.trial import TrialState

from dspark_sim.errors import Terminated, raise_if_stopped, stops_deferred
from dspark_sim.tuner import pruning, storage
from dspark_sim.tuner.objective import Target, score
from dspark_sim.tuner.progress import Progress
from dspark_sim.tuner.scenarios import configure
from dspark_sim.tuner.space import SearchSpace, suggest, tail_probe


@dataclass(frozen=True)
class Job:
    """Everything a worker needs to run trials of one study; picklable."""

    url: str
    study: str
    method: str
    base: dict
    space: SearchSpace
    target: Target
    seeds: tuple[int, ...]
    sampler_seed: int
    n_trials: int
    repeat: int = 0  # which repeat of the method's study (sampler seed = the settings' + repeat)
    slices: tuple[float, ...] = ()  # minutes of the trace a trial is first scored on (pruning.py)

    def open(self) -> optuna.Study:
        # a TPOT-bound study's trial 0 probes where the tail is smallest (space.tail_probe)
        first = tail_probe(self.space) if self.target.slo.tpot_ms is not None else None
        return storage.open_study(self.url, self.study, self.target.directions,
                                  storage.sampler(self.sampler_seed, first), pruning.pruner(self.slices))

    @property
    def counted(self) -> tuple[TrialState, ...]:
        """The trials the budget ``n_trials`` counts: complete ones, and pruned ones where pruning."""
        return (TrialState.COMPLETE, TrialState.PRUNED) if self.slices else (TrialState.COMPLETE,)


class TrialFunction:
    """The Optuna objective of a job: sample, simulate at every seed, store what the report needs."""

    def __init__(self, job: Job):
        self.job = job

    def __call__(self, trial: optuna.Trial):
        job = self.job
        config = suggest(trial, job.method, job.space)
        trial.set_user_attr("method", job.method)
        trial.set_user_attr("config", config)
        trial.set_user_attr("worker", f"{socket.gethostname()}:{os.getpid()}")
        try:
            if job.slices:
                result = pruning.staged_score(trial, configure(job.base, config), job.target, list(job.seeds),
                                              job.slices)
            else:
                result = score(job.base, config, job.target, list(job.seeds))
        except optuna.TrialPruned:
            raise
        except Exception as err:
            trial.set_user_attr("error", f"{type(err).__name__}: {err}")
            raise
        for name, value in result["constraints"].items():
            trial.set_constraint(name, value)
        trial.set_user_attr("metrics", result["mean"])
        trial.set_user_attr("worst", result["worst"])
        trial.set_user_attr("per_seed", result["per_seed"])
        values = result["values"]
        return tuple(values) if len(values) > 1 else values[0]


def done_count(study: optuna.Study, job: Job) -> int:
    """Trials of ``study`` that count towards ``job``'s budget (:attr:`Job.counted`)."""
    return len(study.get_trials(deepcopy=False, states=job.counted))


_SEEN: set[str] = set()


def warn_once(message, category, filename, lineno, file=None, line=None) -> None:
    """``warnings.showwarning`` printing each distinct message once, on one line.

    Trials re-run the same scenario hundreds of times; its warnings need saying once.
    """
    if str(message) not in _SEEN:
        _SEEN.add(str(message))
        print(f"warning: {message}", file=sys.stderr)


_STOPPED_TRIALS: set[str] = set()


def _not_a_stop(record) -> bool:
    """False for Optuna's report of the trial a stop (Ctrl-C, SIGTERM) cut short, its traceback and
    its value: the command's own ``interrupted``/``terminated`` line says it."""
    message = record.getMessage()
    if isinstance(record.exc_info[1] if record.exc_info else None, (KeyboardInterrupt, Terminated)):
        _STOPPED_TRIALS.add(message.split(" failed", 1)[0])
        return False
    return message.split(" failed", 1)[0] not in _STOPPED_TRIALS


def quiet() -> None:
    """Warnings once each, on one line; no Optuna INFO lines or experimental-feature notices."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    for handler in optuna.logging.get_logger("optuna").handlers:  # its modules' records reach these
        handler.addFilter(_not_a_stop)
    warnings.showwarning = warn_once
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)


def work(jobs: list[Job], deadline: float | None, callback=None, parent: int | None = None) -> None:
    """Run every job's trials until its study holds ``n_trials`` complete ones (or the deadline).

    ``parent``: the pid of the process that started this worker; when it is gone (killed
    without a chance to stop its workers) the worker stops after its current trial."""
    quiet()
    for job in jobs:
        if parent is not None and os.getppid() != parent:
            return
        study = job.open()
        if done_count(study, job) >= job.n_trials:
            continue
        left_s = None if deadline is None else deadline - time.monotonic()
        if left_s is not None and left_s <= 0:
            return
        callbacks = [optuna.study.MaxTrialsCallback(job.n_trials, states=job.counted),
                     FailureGuard()]
        if parent is not None:
            callbacks.append(OrphanGuard(parent))
        if callback is not None:
            callbacks.append(callback)
        # a configuration the simulator rejects fails its trial, not the study
        if parent is not None:
            study.optimize(TrialFunction(job), timeout=left_s, callbacks=callbacks, catch=(Exception,))
            continue
        # in this process: a stop is raised inside a trial's simulation or between trials, never
        # inside Optuna's bookkeeping of a trial
        with stops_deferred():
            study.optimize(TrialFunction(job), timeout=left_s, catch=(Exception,),
                           callbacks=[*callbacks, lambda study, trial: raise_if_stopped()])


class OrphanGuard:
    """Stop the study in a worker whose parent has died (its trials so far are kept)."""

    def __init__(self, parent: int):
        self.parent = parent

    def __call__(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        if os.getppid() != self.parent:
            study.stop()


class FailureGuard:
    """Stop a study whose trials keep failing (a broken scenario, not an unlucky configuration)."""

    def __init__(self, limit: int = 10):
        self.limit = limit
        self.in_a_row = 0

    def __call__(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        self.in_a_row = self.in_a_row + 1 if trial.state == TrialState.FAIL else 0
        if self.in_a_row >= self.limit:
            warnings.warn(f"study {study.study_name}: {self.limit} trials failed in a row; stopping it "
                          f"(last error: {trial.user_attrs.get('error', 'see the log')})")
            study.stop()


def run(jobs: list[Job], workers: int, timeout_s: float | None, show_progress: bool = True) -> None:
    """Run all jobs on ``workers`` local processes (in this process when 1), with a progress bar."""
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    bar = Progress(jobs, show_progress)
    try:
        if workers == 1:
            work(jobs, deadline, callback=bar.on_trial)
            return
        ctx = multiprocessing.get_context("spawn")
        procs = [ctx.Process(target=work, args=(jobs, deadline, None, os.getpid()), daemon=True)
                 for _ in range(workers)]
        for p in procs:
            p.start()
        try:
            with stops_deferred():  # a stop ends the wait between polls, never inside one (SQLite mid-query)
                while any(p.is_alive() for p in procs):
                    raise_if_stopped()
                    bar.poll()
                    time.sleep(0.25)
        finally:
            for p in procs:
                if p.is_alive():
                    p.terminate()
                p.join()
        bar.poll()
        crashed = [p.exitcode for p in procs if p.exitcode]
        if crashed:
            warnings.warn(f"{len(crashed)} of {workers} workers exited with codes {crashed}; "
                          "their finished trials are kept")
    finally:
        bar.close()
