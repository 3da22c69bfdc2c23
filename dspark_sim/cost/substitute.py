"""Host terms a profile lacks, filled by labelled substitutes from sibling profiles.

A profile measured before a term was timed (the 14B's DSpark host time, the serving
loop's ``sched`` gap of every profile but the re-timed 8B, the MoE profiles' host time)
would price that part of a step at zero. :func:`fill_host_terms` fills each missing
host term from the shipped profiles measured on the same GPU, preferring those whose host
terms were timed the same day (the same decoder; :func:`host_date`), and says how:

- a missing drafter kind's host term, when the profile has another kind's: that term
  times the median ratio of the two kinds at ``RATIO_REQS`` running requests among the
  siblings that have both (the decoder's extra work per drafter, carried over);
- otherwise (no term of this profile to scale): the nearest sibling's term (by layer
  count), copied: host time does not scale with the GPU (see ``HostFit``);
- no sibling has it: left missing, and the run's provenance says so.

Every substitute is named in the returned labels, which the run's provenance block
carries (:mod:`dspark_sim.provenance`).
"""
from __future__ import annotations

from dataclasses import replace
from functools import lru_cache
from importlib import resources
from pathlib import Path
from statistics import median

from dspark_sim.cost.jsonio import read_json
from dspark_sim.cost.profile_format import Profile
from dspark_sim.cost.host_terms import HostFit, ScheduleFit
from dspark_sim.cost.terms import STEP_KINDS

RATIO_REQS = 32  # the running requests at which two drafter kinds' host times are compared
PROFILES_PACKAGE = "dspark_sim.profiles"



def host_date(provenance, fallback: str) -> str:
    """The day a profile's host terms were timed: that of the latest run in ``provenance`` (the
    newest first, then its ``merged_from`` chain) that timed whole steps or the serving loop's
    gaps (a run's ``skipped`` names every part it timed), else ``fallback`` (the measured date).
    A profile whose prefill alone was timed again keeps its host terms' day."""
    todo = [provenance]
    while todo:
        run = todo.pop(0)
        if not isinstance(run, dict):
            continue
        if any(part in (run.get("skipped") or {}) for part in ("step", "sched")) and run.get("date"):
            return str(run["date"])[:10]
        todo += run.get("merged_from") or []
    return fallback


@lru_cache(maxsize=8)
def _siblings(gpu: str) -> tuple[tuple[str, str, int, dict, ScheduleFit | None], ...]:
    """(model, host terms' date, layers, host terms, schedule) of every measured profile shipped for ``gpu``."""
    from dspark_sim.catalog import MODELS

    folder = Path(str(resources.files(PROFILES_PACKAGE).joinpath(gpu)))
    out = []
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else ():
        if path.stem not in MODELS:
            continue
        d = read_json(path)
        if not isinstance(d, dict) or d.get("projection") is not None:
            continue
        host = {k: HostFit(**v) for k, v in (d.get("host") or {}).items()}
        sched = ScheduleFit(**d["schedule"]) if d.get("schedule") else None
        day = host_date(d.get("provenance"), str(d.get("measured_date", "")))
        out.append((path.stem, day, MODELS[path.stem].num_layers, host, sched))
    return tuple(out)


def _ranked(profile: Profile, donors: list) -> list:
    """Donors whose host terms were timed the same day first (the same decoder), then by
    nearest layer count."""
    from dspark_sim.catalog import MODELS

    layers = MODELS[profile.model].num_layers if profile.model in MODELS else 0
    day = host_date(profile.provenance, profile.measured_date)
    return sorted(donors, key=lambda d: (d[1] != day, abs(d[2] - layers), d[0]))


def _where(donors: list, gpu: str) -> str:
    return ", ".join(f"{d[0]} ({gpu}, measured {d[1]})" for d in donors)


def fill_host_terms(profile: Profile, kinds=STEP_KINDS) -> tuple[Profile, dict[str, str]]:
    """``profile`` with its missing host terms (``host_<kind>`` for ``kinds``, and ``sched``)
    filled from sibling profiles, and ``{term: how it was filled}`` for each one filled."""
    gpu = profile.projection.measured_gpu.name if profile.projection else profile.gpu
    siblings = [d for d in _siblings(gpu) if d[0] != profile.model]
    host, labels = dict(profile.host), {}
    for kind in kinds:
        if kind in host:
            continue
        have = [k for k in STEP_KINDS if k in profile.host]
        pairs = _ranked(profile, [d for d in siblings if kind in d[3] and any(k in d[3] for k in have)])
        same, base = [], None
        if have and pairs:
            same = [d for d in pairs if d[1] == pairs[0][1]]
            base = next(k for k in have if k in same[0][3])
            same = [d for d in same if base in d[3] and d[3][base].seconds(RATIO_REQS) > 0]  # a ratio to 0 s: none
        if same:
            ratio = median(d[3][kind].seconds(RATIO_REQS) / d[3][base].seconds(RATIO_REQS) for d in same)
            fit = profile.host[base]
            host[kind] = HostFit(kind, fit.bias_s * ratio, fit.req_s * ratio)
            labels[f"host_{kind}"] = (f"this profile's {base} host term x {ratio:.2f}, the {kind}/{base} "
                                      f"ratio at {RATIO_REQS} requests of {_where(same, gpu)}")
            continue
        donors = _ranked(profile, [d for d in siblings if kind in d[3]])
        if donors:
            host[kind] = replace(donors[0][3][kind])
            labels[f"host_{kind}"] = f"copied from {_where(donors[:1], gpu)}"
    schedule = profile.schedule
    if schedule is None:
        donors = _ranked(profile, [d for d in siblings if d[4] is not None])
        if donors:
            schedule = donors[0][4]
            labels["sched"] = f"copied from {_where(donors[:1], gpu)}"
    if not labels:
        return profile, labels
    return replace(profile, host=host, schedule=schedule), labels


__all__ = ["fill_host_terms", "host_date", "RATIO_REQS"]
