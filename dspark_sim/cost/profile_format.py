"""The measured-profile file: versioned frozen dataclasses that validate themselves.

A profile holds, for one GPU and one model (the whole model, ``tp`` 1, or one rank of a
``tp``-way tensor-parallel replica timed on one GPU): the measured grids (the
profiler's raw rows), the fitted physical terms of the target forward and of
each drafter, their held-out error, and, for a projected profile, the
spec-sheet ratios it was projected with. ``docs/profiles.md`` documents every
key; :func:`load_profile` rejects anything else with an :class:`InputError`
naming the file, the key and the value.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, fields
from pathlib import Path

from dspark_sim.cost.jsonio import read_json, with_file, write_json_atomic
from dspark_sim.cost.term_checks import fail
from dspark_sim.cost.host_terms import HostFit, ScheduleFit
from dspark_sim.cost.terms import DRAFT_KINDS, STEP_KINDS, DraftFit, TargetFit
from dspark_sim.errors import InputError

FORMAT_VERSION = 2
SUPPORTED_VERSIONS = (2,)

# Raw grid rows: column -> (type, smallest allowed value).
ROW_COLUMNS = {
    "verify": {"reqs": (int, 1), "tokens": (int, 1), "context": (int, 0), "step_s": (float, 0.0)},
    "draft": {"reqs": (int, 1), "block_size": (int, 1), "kind": (str, None), "context": (int, 0),
              "step_s": (float, 0.0)},
    "prefill": {"chunk": (int, 1), "cached": (int, 0), "step_s": (float, 0.0)},
    "step": {"kind": (str, None), "reqs": (int, 1), "verify_tokens": (float, 0.0),
             "block_size": (int, 0), "context": (int, 0), "step_s": (float, 0.0)},
    # the serving loop's host time between steps of ``reqs`` running requests (median gap)
    "sched": {"kind": (str, None), "reqs": (int, 1), "step_s": (float, 0.0)},
}
ROW_KINDS = {"draft": DRAFT_KINDS, "step": STEP_KINDS, "sched": STEP_KINDS}
# Columns a row may carry: host_s, the host part of whole steps whose graphs were timed too;
# max_context, the longest request of a verify step whose requests differ (context: the mean).
ROW_OPTIONAL = {"step": {"host_s": (float, None)}, "verify": {"max_context": (int, 0)}}


@dataclass(frozen=True)
class HeldOut:
    """Relative error |predicted / measured - 1| on grid points left out of the fit; the
    median of the signed error (predicted / measured - 1) where it was recorded."""

    median_rel_err: float
    p90_rel_err: float
    max_rel_err: float
    num_points: int
    median_signed_err: float | None = None

    def __post_init__(self) -> None:
        for name in ("median_rel_err", "p90_rel_err", "max_rel_err"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                fail(name, value, "must be a finite number >= 0")
        if self.num_points < 0:
            fail("num_points", self.num_points, "must be >= 0")


@dataclass(frozen=True)
class GpuRef:
    """The spec-sheet numbers a profile was measured or projected against, with their citation."""

    name: str
    hbm_bytes_per_s: float
    bf16_flops: float
    source: str

    def __post_init__(self) -> None:
        for name in ("hbm_bytes_per_s", "bf16_flops"):
            if not (math.isfinite(getattr(self, name)) and getattr(self, name) > 0):
                fail(name, getattr(self, name), "must be a positive finite number")


@dataclass(frozen=True)
class Projection:
    """How a projected profile was made: ratios of the target GPU's spec sheet to the measured one's."""

    measured_gpu: GpuRef
    measured_date: str
    memory_ratio: float
    compute_ratio: float

    def __post_init__(self) -> None:
        for name in ("memory_ratio", "compute_ratio"):
            if not (math.isfinite(getattr(self, name)) and getattr(self, name) > 0):
                fail(name, getattr(self, name), "must be a positive finite number")


@dataclass(frozen=True)
class Profile:
    """One GPU x model cost profile: the whole model (``tp`` 1) or one rank of a ``tp``-way
    tensor-parallel replica (``ModelSpec.tp_rank``, collectives left out). See ``docs/profiles.md``
    for the file format."""

    gpu: str
    model: str
    source: str
    measured_date: str
    gpu_spec: GpuRef
    target: TargetFit
    draft: dict[str, DraftFit]
    held_out: dict[str, HeldOut]
    held_out_method: str
    provenance: dict
    projection: Projection | None = None
    grids: dict | None = None
    host: dict[str, HostFit] = dataclasses.field(default_factory=dict)
    schedule: ScheduleFit | None = None
    tp: int = 1
    comm: dict = dataclasses.field(default_factory=dict)  # tp -> CommCurves (measured collectives)
    format_version: int = FORMAT_VERSION

    def __post_init__(self) -> None:
        if self.format_version not in SUPPORTED_VERSIONS:
            fail("format_version", self.format_version, f"supported: {SUPPORTED_VERSIONS}")
        if isinstance(self.tp, bool) or not isinstance(self.tp, int) or self.tp < 1:
            fail("tp", self.tp, "the tp a rank was measured at: an integer >= 1 (1: the whole model)")
        for name in ("gpu", "model", "source"):
            if not getattr(self, name):
                fail(name, getattr(self, name), "must be a non-empty string")
        for section in ("draft", "host"):
            for kind, fit in getattr(self, section).items():
                if kind != fit.kind:
                    fail(f"{section}.{kind}.kind", fit.kind, f"must equal its key {kind!r}")
        if self.grids is not None:
            object.__setattr__(self, "grids", check_grids(self.grids, prefix="grids"))
        for tp, curves in self.comm.items():
            if curves.tp != tp or curves.gpu != self.gpu:
                fail(f"comm.{tp}", f"{curves.gpu} tp {curves.tp}", f"must be {self.gpu}'s curves at tp {tp}")

    def to_json_dict(self) -> dict:
        """The profile as the JSON object :func:`load_profile` reads (``comm`` only when it holds curves)."""
        out = {"format_version": self.format_version, **{
            f.name: dataclasses.asdict(getattr(self, f.name)) if dataclasses.is_dataclass(
                getattr(self, f.name)) else getattr(self, f.name)
            for f in fields(self) if f.name not in ("format_version", "draft", "held_out", "host", "comm")},
            "draft": {k: dataclasses.asdict(v) for k, v in self.draft.items()},
            "host": {k: dataclasses.asdict(v) for k, v in self.host.items()},
            "held_out": {k: {f: x for f, x in dataclasses.asdict(v).items() if x is not None}
                         for k, v in self.held_out.items()}}
        if self.comm:
            out["comm"] = {str(tp): c.to_json_dict() for tp, c in sorted(self.comm.items())}
        return out

    def save(self, path: str | Path) -> None:
        """Write the profile JSON atomically."""
        write_json_atomic(path, self.to_json_dict())


# -- decoding -----------------------------------------------------------------------
def _convert(value: object, kind: str, key: str):
    if kind.endswith(" | None"):
        return None if value is None else _convert(value, kind.removesuffix(" | None"), key)
    if kind in ("float", "int"):
        if isinstance(value, bool) or not isinstance(value, (int, float) if kind == "float" else int):
            fail(key, value, f"must be a JSON {'number' if kind == 'float' else 'integer'}")
        if kind == "float" and not math.isfinite(value):
            fail(key, value, "must be finite")
        return float(value) if kind == "float" else value
    if kind == "str":
        if not isinstance(value, str):
            fail(key, value, "must be a string")
        return value
    if kind == "bool":
        if not isinstance(value, bool):
            fail(key, value, "must be true or false")
        return value
    if kind == "dict":
        if not isinstance(value, dict):
            fail(key, value, "must be a JSON object")
        return value
    if kind == "tuple[tuple[float, ...], ...]":
        if not isinstance(value, list):
            fail(key, value, "must be a JSON list of lists of numbers")
        return tuple(_convert(v, "tuple[float, ...]", f"{key}[{i}]") for i, v in enumerate(value))
    if kind == "tuple[float, ...]":
        if not isinstance(value, list):
            fail(key, value, "must be a JSON list of numbers")
        return tuple(_convert(v, "float", f"{key}[{i}]") for i, v in enumerate(value))
    raise TypeError(kind)


def _build(cls, d: object, key: str, nested: dict | None = None):
    """An instance of dataclass ``cls`` from JSON object ``d``; errors carry ``key`` as prefix."""
    if not isinstance(d, dict):
        fail(key, d, "must be a JSON object")
    nested = nested or {}
    known = {f.name: f for f in fields(cls)}
    for name in d:
        if name not in known:
            fail(f"{key}.{name}" if key else name, d[name], "unknown key")
    kwargs = {}
    for name, f in known.items():
        sub = f"{key}.{name}" if key else name
        if name not in d:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                fail(sub, None, "missing")
            continue
        kwargs[name] = nested[name](d[name], sub) if name in nested else _convert(d[name], f.type, sub)
    try:
        return cls(**kwargs)
    except InputError as err:
        raise with_file(err, None, key) from None


def _mapping(cls, allowed=None):
    def build(value, key):
        if not isinstance(value, dict):
            fail(key, value, "must be a JSON object")
        if allowed is not None and (bad := [k for k in value if k not in allowed]):
            fail(f"{key}.{bad[0]}", value[bad[0]], f"unknown key; allowed: {allowed}")
        return {k: _build(cls, v, f"{key}.{k}") for k, v in value.items()}
    return build


def _optional(cls, nested=None):
    return lambda value, key: None if value is None else _build(cls, value, key, nested)


def profile_from_json_dict(d: object, *, file=None) -> Profile:
    """Validate and decode a profile JSON object; :class:`InputError` names file, key and value."""
    try:
        if isinstance(d, dict) and "format_version" not in d:
            fail("format_version", None, "missing: not a dspark-sim profile")
        if isinstance(d, dict) and d.get("format_version") not in SUPPORTED_VERSIONS:
            fail("format_version", d.get("format_version"), f"supported: {SUPPORTED_VERSIONS}")
        gpu_ref = lambda v, k: _build(GpuRef, v, k)  # noqa: E731
        return _build(Profile, d, "", {
            "gpu_spec": gpu_ref, "target": lambda v, k: _build(TargetFit, v, k),
            "draft": _mapping(DraftFit, DRAFT_KINDS), "held_out": _mapping(HeldOut),
            "host": _mapping(HostFit, STEP_KINDS), "schedule": _optional(ScheduleFit),
            "projection": _optional(Projection, {"measured_gpu": gpu_ref}),
            "grids": lambda v, k: None if v is None else _convert(v, "dict", k), "comm": _comm})
    except InputError as err:
        raise with_file(err, file) from None


def _comm(value, key: str) -> dict:
    """``comm``: measured collectives by tp (``{"2": <comm_tp2.json's object>, ...}``)."""
    from dspark_sim.cost.comm_curves import comm_from_json_dict

    if not isinstance(value, dict):
        fail(key, value, "must be a JSON object of curve sets keyed by tp")
    out = {}
    for tp, d in value.items():
        if not tp.isdigit():
            fail(f"{key}.{tp}", tp, "keys are tp values (integers)")
        out[int(tp)] = comm_from_json_dict(d, key=f"{key}.{tp}")
    return out


def load_profile(path: str | Path) -> Profile:
    """Read, validate and decode a profile file (``format_version`` checked first)."""
    return profile_from_json_dict(read_json(path), file=path)


def check_grids(grids: object, *, prefix: str = "") -> dict:
    """Validate measured rows (the profiler's raw ``verify``/``draft``/``prefill``/``step``/``sched`` lists).

    Returns ``{section: [row, ...]}`` with ints and floats normalised; sections
    may be absent or empty except ``verify``.
    """
    def key(*parts):
        return ".".join(p for p in (prefix, *parts) if p)
    if not isinstance(grids, dict):
        fail(prefix or None, type(grids).__name__, "must be a JSON object")
    out = {}
    for section, columns in ROW_COLUMNS.items():
        rows = grids.get(section, [])
        if not isinstance(rows, list):
            fail(key(section), type(rows).__name__, "must be a JSON list of rows")
        out[section] = [_check_row(row, columns, key(f"{section}[{i}]"), ROW_KINDS.get(section, ()),
                                   ROW_OPTIONAL.get(section, {})) for i, row in enumerate(rows)]
    if not out["verify"]:
        fail(key("verify"), [], "needs at least one measured row")
    return out


def _check_row(row: object, columns: dict, key: str, kinds: tuple = (),
               optional: dict | None = None) -> dict:
    optional = optional or {}
    if not isinstance(row, dict):
        fail(key, row, "must be a JSON object")
    out = {}
    for name, (kind, low) in {**columns, **optional}.items():
        if name not in row:
            if name in optional:
                continue
            fail(f"{key}.{name}", None, "missing")
        value = _convert(row[name], kind.__name__, f"{key}.{name}")
        if kind is str and value not in kinds:
            fail(f"{key}.{name}", value, f"must be one of {kinds}")
        if low is not None and (value < low or (kind is float and value <= low)):
            fail(f"{key}.{name}", value, f"must be {'>' if kind is float else '>='} {low}")
        out[name] = value
    return out


__all__ = ["FORMAT_VERSION", "Profile", "TargetFit", "DraftFit", "HostFit", "ScheduleFit", "HeldOut", "GpuRef", "Projection",
           "load_profile", "profile_from_json_dict", "check_grids"]
