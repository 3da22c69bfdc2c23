"""The serving loop's launch times, from the mixed-step probe.

The decoder's overlapped loop plans step n+1 only once it has launched step n, and reads step
n's tokens only once it has launched step n+1 (:mod:`dspark_sim.serving.launch`). The probe
(``benchmarks/mixed_steps.py``) times, beside each step's GPU time, the host's time to launch
it (``launch_s``): steps replayed from CUDA graphs (no prompt tokens, or prompt steps within the
graphs' tokens) and eager ones (kernel by kernel). The profile keeps the eager steps' median
(``TargetFit.launch_eager_s``: host time, kept under projection and TP); a graph replay's launch
is left out of the timeline (:mod:`dspark_sim.serving.launch`).
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np

from dspark_sim.cost.profile_format import Profile
from dspark_sim.cost.terms import runs_eager
from dspark_sim.errors import InputError
from dspark_sim.profiling.mixed import read_probe


def eager_launch_s(profile: Profile, points: list[dict], path: Path | None = None) -> float:
    """The median launch seconds of the probe's eager steps (``points``: R decode rows of one
    token beside a chunk), each step eager or not by the profile's own rule (:func:`runs_eager`)."""
    eager = []
    for i, p in enumerate(points):
        launch = p.get("launch_s")
        if not isinstance(launch, (int, float)) or isinstance(launch, bool) or not launch >= 0:
            raise InputError(path, f"points[{i}].launch_s", launch, "must be a number >= 0")
        if runs_eager(p["reqs"], p["chunk"], profile.target.prefill_graph_tokens):
            eager.append(float(launch))
    if not eager:
        raise InputError(path, "points", len(points), "holds no eager step to time its launch")
    return float(np.median(eager))


def with_launch_times(profile: Profile, path: Path) -> Profile:
    """``profile`` with the launch times of the probe at ``path``; unchanged by a probe that did not
    time its launches (no point has ``launch_s``)."""
    points = read_probe(path)
    if not any("launch_s" in p for p in points):
        return profile
    return replace(profile, target=replace(profile.target, launch_eager_s=eager_launch_s(profile, points, path)))
