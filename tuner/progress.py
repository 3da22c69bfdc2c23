"""The progress bar: complete trials over all studies, with the best feasible value so far."""
from __future__ import annotations

import optuna
from optuna.trial import TrialState

from dspark_sim.tuner.objective import Target, feasible, pareto_front


class Progress:
    """A tqdm bar over all jobs' trials done (complete, and pruned where pruning), showing the best
    feasible value so far."""

    def __init__(self, jobs: list, enabled: bool):
        from tqdm import tqdm

        self.jobs = jobs
        self.studies = {}
        self.bar = tqdm(total=sum(j.n_trials for j in jobs), unit="trial", disable=not enabled,
                        dynamic_ncols=True, desc="tuning")
        self.poll()

    def on_trial(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        self.poll(study)

    def poll(self, current: optuna.Study | None = None) -> None:
        """Count trials done in the storage; label DSpark's best and the study in progress."""
        done, labels = 0, []
        for i, job in enumerate(self.jobs):
            study = current if current is not None and current.study_name == job.study else self._study(job)
            counted = study.get_trials(deepcopy=False, states=job.counted)
            trials = [t for t in counted if t.state == TrialState.COMPLETE]
            done += min(len(counted), job.n_trials)
            running = 0 < len(counted) < job.n_trials
            if trials and (i == 0 or running):
                labels.append(f"{job.method}: {best_label(trials, job.target)}")
        label = " | ".join(labels[:1] + labels[-1:] if len(labels) > 1 else labels)
        self.bar.n = done
        self.bar.set_postfix_str(label, refresh=False)
        self.bar.refresh()

    def _study(self, job) -> optuna.Study:
        if job.study not in self.studies:
            self.studies[job.study] = job.open()
        return self.studies[job.study]

    def close(self) -> None:
        self.bar.close()


def best_label(trials: list[optuna.trial.FrozenTrial], target: Target) -> str:
    """'best 1,234 tok/s/GPU' over feasible trials (or the front size for Pareto studies)."""
    ok = [t for t in trials if feasible(t.constraints)]
    if not ok:
        return "no feasible trial yet"
    if target.objective == "pareto":
        return f"{len(pareto_front(ok))} on the front"
    unit = "req/s/GPU" if target.objective == "goodput" else "tok/s/GPU"
    return f"best {max(t.values[0] for t in ok):,.0f} {unit}"
