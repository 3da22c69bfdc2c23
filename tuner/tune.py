"""One tuning run: settings, the studies, confirmation, and the output directory.

A run's settings (base scenario, objective, SLO, space, seeds, budgets) are
stored on the DSpark study, so ``--study NAME`` resumes with exactly the
settings the study was created with, from any machine that reaches the storage.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import optuna
from optuna.trial import TrialState

from dspark_sim.errors import InputError
from dspark_sim.metrics.outdir import atomic_dir
from dspark_sim.catalog import get_model
from dspark_sim.catalog.drafters import chain_baseline_drafter
from dspark_sim.metrics.record import write_provenance
from dspark_sim.provenance import basis, provenance_line, scenario_provenance
from dspark_sim.engines import configs, knobs
from dspark_sim.tuner import exports, repeats, report, storage
from dspark_sim.tuner.confirm import Processes, confirm, winner_interval
from dspark_sim.tuner.objective import Target, feasible
from dspark_sim.tuner.runner import Job, run
from dspark_sim.tuner.storage import open_storage, open_study
from dspark_sim.tuner.scenarios import OLD_BLOCK_SIZE_KEY, configure, dspark_drafter, rebase_paths, to_scenario
from dspark_sim.tuner.space import Choice, Range, SearchSpace

BASELINES = ("none", "static", "dflash", "schedule", "threshold")


@dataclass(frozen=True)
class Settings:
    """What defines a study: stored on it, compared on resume."""

    base: dict
    target: Target
    space: SearchSpace
    trials: int = 200
    baseline_trials: int = 200  # the same budget as DSpark's by default: a like-for-like comparison
    baselines: tuple[str, ...] = BASELINES
    seeds: tuple[int, ...] = (0, 1)
    confirm_seeds: tuple[int, ...] = (2, 3, 4)
    sampler_seed: int = 0
    engine: str = "sglang"
    repeats: int = 1  # whole studies per method, sampler seeds sampler_seed, sampler_seed + 1, ...
    slices: tuple[float, ...] = ()  # minutes of the trace trials are first scored on (pruning.py; () none)

    def engine_space(self) -> SearchSpace:
        """The space searched: knobs ``engine`` does not honour held at its behaviour (engines/knobs.py),
        block sizes capped at the DSpark drafter's trained block."""
        model = get_model(self.base["model"]).name
        held = knobs.held(self.engine, chain_baseline_drafter(model))
        return self.space.restricted(held, dspark_drafter(self.base).trained_block)

    def jobs(self, url: str, name: str) -> list[Job]:
        """Per repeat (sampler seed ``sampler_seed + r``), the DSpark study first, then one study per
        baseline: ``name`` and ``name.<method>`` for the first repeat, :func:`repeat_name` after it.
        Every method's study has the same budget, but ``none`` (few knobs: a third of it covers them)."""
        space = self.engine_space()
        out = []
        for r in range(self.repeats):
            seed = self.sampler_seed + r
            out.append(Job(url, repeat_name(name, r), "dspark", self.base, space, self.target, self.seeds,
                           seed, self.trials, r, self.slices))
            for method in self.baselines:
                n = self.baseline_trials
                if method == "none":
                    n = min(n, max(4, n // 3))
                out.append(Job(url, repeat_name(f"{name}.{method}", r), method, self.base, space, self.target,
                               self.seeds, seed, n, r, self.slices))
        return out

    def to_json(self) -> dict:
        return {"base": self.base, "target": self.target.to_json(), "space": space_json(self.space),
                "trials": self.trials, "baseline_trials": self.baseline_trials,
                "baselines": list(self.baselines), "seeds": list(self.seeds),
                "confirm_seeds": list(self.confirm_seeds), "sampler_seed": self.sampler_seed,
                "engine": self.engine, "repeats": self.repeats, "slices": list(self.slices)}

    def identity(self) -> dict:
        """What makes two settings the same study: all but the budgets (trials, repeats), with file
        paths as names."""
        d = self.to_json()
        d["base"] = rebase_paths(d["base"], Path("/"), None, names_only=True)
        return {k: v for k, v in d.items() if k not in ("trials", "baseline_trials", "repeats")}

    @classmethod
    def from_json(cls, d: dict) -> Settings:
        return cls(d["base"], Target.from_json(d["target"]), space_from_json(d["space"]), d["trials"],
                   d["baseline_trials"], tuple(d["baselines"]), tuple(d["seeds"]),
                   tuple(d["confirm_seeds"]), d["sampler_seed"], d.get("engine", "sglang"), d.get("repeats", 1),
                   tuple(d.get("slices", ())))


def repeat_name(study: str, repeat: int) -> str:
    """Study ``study`` of repeat ``repeat``: the name itself for the first, ``study.rN`` after it."""
    return study if repeat == 0 else f"{study}.r{repeat}"


def space_json(space: SearchSpace) -> dict:
    return {sec: {name: ({"low": k.low, "high": k.high, "log": k.log} if isinstance(k, Range)
                         else {"values": [list(v) if isinstance(v, tuple) else v for v in k.values]})
                  for name, k in knobs.items()} for sec, knobs in space.sections.items()}


def space_from_json(d: dict) -> SearchSpace:
    def knob(v: dict):
        if "values" in v:
            return Choice(tuple(tuple(x) if isinstance(x, list) else x for x in v["values"]))
        return Range(v["low"], v["high"], v["log"])

    # a study stored before the tuner said block_size names that knob num_draft_tokens
    return SearchSpace({sec: {("block_size" if name == OLD_BLOCK_SIZE_KEY else name): knob(v)
                              for name, v in knobs.items()} for sec, knobs in d.items()})


def stored_settings(url: str, name: str) -> Settings | None:
    """The settings saved on study ``name``, or None when there is no such study yet."""
    try:
        study = optuna.load_study(study_name=name, storage=open_storage(url))
    except KeyError:
        return None
    d = study.user_attrs.get("settings")
    return None if d is None else Settings.from_json(d)


def tune(settings: Settings, url: str, name: str, out: Path, *, workers: int = 1,
         timeout_s: float | None = None, show_progress: bool = True) -> dict:
    """Run (or resume) the studies, confirm winners, write ``out``; returns the winners by study."""
    started = time.monotonic()
    jobs = settings.jobs(url, name)
    with storage.writing(url):  # the first write: a storage that refuses it stops the tune in one line
        main = jobs[0].open()
        main.set_user_attr("settings", settings.to_json())
    run(jobs, workers, timeout_s, show_progress)
    searched = time.monotonic()
    with Processes(workers) as procs:  # one set of worker processes for the confirmation and the interval
        winners = confirm(jobs, list(settings.confirm_seeds), procs)
        picks = repeats.chosen(jobs, winners)
        if "dspark" in picks:  # the best DSpark winner over the repeats: its interval, and what is exported
            job, best = picks["dspark"]
            best["interval"] = winner_interval(job, best, list(settings.confirm_seeds), procs)
            job.open().set_user_attr("winner", best)
            main.set_user_attr("chosen", best)
    phases = {"search_s": searched - started, "confirm_s": time.monotonic() - searched}
    main.set_user_attr("phases", phases)  # this run's (a resumed study: its last run's)
    scenario = to_scenario(settings.base)
    info = {"scenario": settings.base.get("name"), "model": scenario.model, "gpu": scenario.gpu,
            "num_gpus": scenario.deployment.num_gpus, "trials": settings.trials,
            "baseline_trials": settings.baseline_trials, "repeats": settings.repeats,
            "confirm_seeds": list(settings.confirm_seeds), "storage": url, "workers": workers,
            "wall_s": time.monotonic() - started, **phases, "engine": settings.engine,
            "drafter": dspark_drafter(settings.base), "notes": [],
            "provenance": {job.study: scenario_provenance(to_scenario(configure(settings.base, record["config"])))
                           for job, record in picks.values()}}
    with atomic_dir(out) as tmp:
        if "dspark" in picks:
            best = picks["dspark"][1]
            _, info["notes"] = write_exports(settings.base, best, best["study"], tmp, configs.FORMATS,
                                             out, settings.target.describe(), settings.engine)
        write_provenance(tmp, info["provenance"])
        report.write(tmp, jobs, winners, info)
    return winners


def header(study: str, record: dict, slo: str = "") -> list[str]:
    """Comment lines every exported file starts with: where it came from, what it scored,
    and, loudly, whether it meets the SLO it was tuned for."""
    mean = record.get("mean", {})
    scored = ", ".join(f"{k}={mean[k]:,.2f}" for k in ("output_throughput_per_gpu", "mean_tok_per_s_per_user",
                                                       "p99_tpot_ms") if mean.get(k) is not None)
    lines = [f"dspark-tune: study {study}, trial {record['trial']} ({record['method']})",
             f"seeds {record.get('seeds')}: {scored}"]
    if record.get("feasible") is False:
        lines.append(f"WARNING: this configuration does NOT meet the SLO ({slo or 'see report.md'}); "
                     "report.md names the binding constraint and the nearest SLO that is met")
    return lines


def write_exports(base: dict, record: dict, study: str, out: Path, formats,
                  final: Path | None = None, slo: str = "", engine: str = "sglang") -> tuple[list[str], list[str]]:
    """Write the chosen trial in each of ``formats`` into ``out``: (file names, notes).

    A DSpark trial always gets its tables (``sps_table.json``, ``sts.json``).
    ``final`` is where ``out`` ends up (outputs may be built in a temporary
    sibling): engine configs name the tables by absolute path under ``final``.
    A format the trial's method has no field for is not written; a note says why. Files for
    an engine other than ``engine`` (the one tuned for) say so in their header.
    """
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    scenario = to_scenario(configure(base, record["config"]))
    prov = scenario_provenance(scenario)
    lines = header(study, record, slo) + [f"cost model: {basis(prov)}; acceptance: {prov['acceptance']['kind']} "
                                          f"({prov['acceptance']['detail']})"]
    lines += [line] if (line := provenance_line([prov])) else []
    files, notes = exports.write_tables(scenario, out), []
    for fmt in formats:
        if fmt == "dspark":
            files.append(exports.write_dspark_yaml(base, record["config"], out, lines))
            continue
        why = configs.not_expressible(scenario, fmt)
        if why is not None:
            notes.append(f"{fmt}: not expressible in {knobs.NAMES[fmt]}: {why}")
            continue
        other = [] if fmt == engine else [
            f"tuned for {knobs.NAMES[engine]}: knobs {knobs.NAMES[fmt]} honours and {knobs.NAMES[engine]} "
            f"does not were held at {knobs.NAMES[engine]}'s behaviour (report.md, docs/tuning.md); "
            f"tune with --engine {fmt} for this engine"]
        files.append(configs.WRITERS[fmt](scenario, out, lines + other, Path(final or out)))
    return files, notes


def record_of(url: str, name: str, trial: int | None, seeds: list[int]) -> dict:
    """What to export from study ``name``: trial ``trial``, else the confirmed winner, else the best.

    ``seeds`` are the study's search seeds (a trial's metrics are means over them).
    """
    study = open_study(url, name, [], create=False)
    if trial is None and (study.user_attrs.get("chosen") or study.user_attrs.get("winner")):
        # the DSpark study holds the best winner over its repeats, which may be another repeat's
        return study.user_attrs.get("chosen") or study.user_attrs["winner"]
    done = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    if trial is not None:
        chosen = next((t for t in done if t.number == trial), None)
        if chosen is None:
            raise InputError(None, "--trial", trial, f"no complete trial {trial} in study {name}")
    elif not done:
        raise InputError(None, "--study", name, "has no complete trial yet")
    else:
        ok = [t for t in done if feasible(t.constraints)] or done
        chosen = max(ok, key=lambda t: t.values[0])
    return {"study": name, "trial": chosen.number, "method": chosen.user_attrs["method"],
            "config": chosen.user_attrs["config"],
            "mean": chosen.user_attrs["metrics"], "seeds": list(seeds), "feasible": feasible(chosen.constraints)}
