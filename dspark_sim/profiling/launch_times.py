"""The serving loop's launch times, from the mixed-step probe.

The decoder's overlapped loop plans step n+1 only once it has launched step n, and reads step
n's tokens only once it has launched step n+1 (:mod:`dspark_sim.serving.launch`). The probe
(``benchmarks/mixed_steps.py``) times, beside each step's GPU time, the host's time to launch
it (``launch_s``): steps replayed from CUDA graphs (no prompt tokens, or prompt steps within the
graphs' tokens) and eager ones (kernel by kernel). The profile keeps the eager steps' median
(``TargetFit.launch_eager_s``: host time, kept under projection and TP); the graph steps' median
is reported (:func:`launch_times`), not kept: the timeline leaves their launch out
(:mod:`dspark_sim.serving.launch`).
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np

from dspark_sim.cost.profile_format import Profile
from dspark_sim.errors import InputError
from dspark_sim.profiling.mixed import read_probe


def launch_times(profile: Profile, points: list[dict], path: Path | None = None) -> tuple[float, float]:
    """(eager, graph) median launch seconds of the probe's ``points``, each step eager or not by
    the profile's own rule (:meth:`~dspark_sim.cost.terms.TargetFit.launch_s`)."""
    target, eager, graph = profile.target, [], []
    for i, p in enumerate(points):
        launch = p.get("launch_s")
        if not isinstance(launch, (int, float)) or isinstance(launch, bool) or not launch >= 0:
            raise InputError(path, f"points[{i}].launch_s", launch, "must be a number >= 0")
        is_eager = p["chunk"] > 0 and p["chunk"] + p["reqs"] > target.prefill_graph_tokens
        (eager if is_eager else graph).append(float(launch))
    if not eager or not graph:
        raise InputError(path, "points", len(points), "needs eager and graph steps to time both launches")
    return float(np.median(eager)), float(np.median(graph))


def with_launch_times(profile: Profile, path: Path) -> Profile:
    """``profile`` with the launch times of the probe at ``path``; unchanged by a probe that did not
    time its launches (no point has ``launch_s``)."""
    points = read_probe(path)
    if not any("launch_s" in p for p in points):
        return profile
    eager, _ = launch_times(profile, points, path)
    return replace(profile, target=replace(profile.target, launch_eager_s=eager))
