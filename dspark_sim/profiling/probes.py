"""Reading a GPU probe's result file (``benchmarks/*.py --run``: a JSON object with its
``provenance`` and ``points``), for the terms fitted on it; bad input is one line naming the
file and key."""
from __future__ import annotations

from pathlib import Path

from dspark_sim.cost.jsonio import read_json
from dspark_sim.errors import InputError


def read_probe(path: Path) -> dict:
    """The probe at ``path``, which must be a JSON object."""
    probe = read_json(path)
    if not isinstance(probe, dict):
        raise InputError(path, "file", type(probe).__name__, "must be a JSON object (the probe's result)")
    return probe


def provenance_of(probe: dict) -> dict:
    """The probe's provenance ({} without one)."""
    prov = probe.get("provenance")
    return prov if isinstance(prov, dict) else {}


def points_of(probe: dict) -> list:
    """The probe's points ([] without a list of them)."""
    points = probe.get("points", ())
    return points if isinstance(points, list) else []


def check_positive(point: dict, key: str, i: int, file) -> None:
    """``points[i].key`` must be a number > 0."""
    v = point.get(key)
    if not isinstance(v, (int, float)) or isinstance(v, bool) or v <= 0:
        raise InputError(file, f"points[{i}].{key}", v, "must be a number > 0")
