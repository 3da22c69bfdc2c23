"""Measured communication: all-reduce and all-to-all time by message size, at one tp.

The file (``comm_tp<N>.json``, written by ``dspark-profile comm``; this module owns it)::

    {"format_version": 1, "gpu": "h200", "tp": 2, "source": "measured",
     "measured_date": "2026-12-01", "provenance": {...},
     "curves": {"all_reduce": {"bytes": [1024, ...], "seconds": [1.2e-05, ...]},
                "all_to_all": {...}}}

``bytes`` is the message one rank holds (an all-reduce's tensor, an all-to-all's whole
send buffer; the nccl-tests "size"), strictly increasing; ``seconds`` the median time of
one call. ``source`` says where the numbers come from: ``measured`` (NCCL on the named
GPUs), ``cpu`` (gloo on a CPU host: the plumbing, not a GPU figure), ``synthetic``, or
``projected from ...`` (:func:`retarget`). A profile embeds the sets it was fitted with
under ``comm`` (keyed by tp), and :class:`MeasuredComm` prices a step's communication from
them in place of the roofline's link model (:mod:`.comm`).
"""
from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field, replace
from pathlib import Path

from dspark_sim.cost.comm import ACT_BYTES, COMBINE_BYTES, DISPATCH_BYTES, remote_destinations
from dspark_sim.cost.jsonio import read_json, with_file, write_json_atomic
from dspark_sim.errors import InputError

FORMAT_VERSION = 1
OPS = ("all_reduce", "all_to_all")
SOURCES = ("measured", "cpu", "synthetic")  # or "projected from ..."


def _fail(key, value, why):
    raise InputError(None, key, value, why)


@dataclass(frozen=True, slots=True)
class CommCurve:
    """Seconds of one collective call by message bytes per rank (piecewise linear between
    points; below the first point its time, the latency floor; past the last, that point's
    bandwidth)."""

    bytes: tuple[int, ...]
    seconds: tuple[float, ...]

    def __post_init__(self) -> None:
        if not self.bytes or len(self.bytes) != len(self.seconds):
            _fail("bytes", len(self.bytes), f"needs one or more points, as many as seconds ({len(self.seconds)})")
        for i, b in enumerate(self.bytes):
            if isinstance(b, bool) or not isinstance(b, int) or b < 1 or (i and b <= self.bytes[i - 1]):
                _fail(f"bytes[{i}]", b, "must be integers >= 1, strictly increasing")
        for i, s in enumerate(self.seconds):
            if isinstance(s, bool) or not isinstance(s, (int, float)) or not math.isfinite(s) or s <= 0:
                _fail(f"seconds[{i}]", s, "must be finite numbers > 0")

    def seconds_at(self, nbytes: float) -> float:
        """One call's seconds for a message of ``nbytes`` (0 for an empty message)."""
        if nbytes <= 0:
            return 0.0
        b, s = self.bytes, self.seconds
        if nbytes <= b[0]:
            return s[0]
        if nbytes >= b[-1]:
            return s[-1] * nbytes / b[-1]
        i = bisect.bisect_right(b, nbytes)
        w = (nbytes - b[i - 1]) / (b[i] - b[i - 1])
        return s[i - 1] + w * (s[i] - s[i - 1])

    def to_json_dict(self) -> dict:
        """``{bytes, seconds}`` as the file holds them."""
        return {"bytes": list(self.bytes), "seconds": list(self.seconds)}


@dataclass(frozen=True)
class CommCurves:
    """The curves of one GPU kind at one tp, and where they come from."""

    gpu: str
    tp: int
    source: str
    measured_date: str
    curves: dict[str, CommCurve]
    provenance: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.gpu:
            _fail("gpu", self.gpu, "must be a non-empty string")
        if isinstance(self.tp, bool) or not isinstance(self.tp, int) or self.tp < 2:
            _fail("tp", self.tp, "must be an integer >= 2 (one GPU does not communicate)")
        if self.source not in SOURCES and not str(self.source).startswith("projected from "):
            _fail("source", self.source, f"must be one of {SOURCES} or 'projected from ...'")
        for op in self.curves:
            if op not in OPS:
                _fail(f"curves.{op}", op, f"unknown collective; expected {OPS}")

    @property
    def label(self) -> str:
        """How a cost model's source line names these numbers."""
        return f"{self.source} ({self.gpu}, tp {self.tp}, {self.measured_date})"

    def to_json_dict(self) -> dict:
        """The file's JSON object."""
        return {"format_version": FORMAT_VERSION, "gpu": self.gpu, "tp": self.tp, "source": self.source,
                "measured_date": self.measured_date, "provenance": self.provenance,
                "curves": {op: c.to_json_dict() for op, c in self.curves.items()}}

    def save(self, path: str | Path) -> None:
        """Write the file atomically."""
        write_json_atomic(path, self.to_json_dict())


def comm_from_json_dict(d: object, *, file=None, key: str = "") -> CommCurves:
    """Validate and decode one curve set; :class:`InputError` names file, key and value."""
    try:
        if not isinstance(d, dict):
            _fail(None, type(d).__name__, "must be a JSON object")
        allowed = {"format_version", "gpu", "tp", "source", "measured_date", "provenance", "curves"}
        for name in d:
            if name not in allowed:
                _fail(name, d[name], f"unknown key; allowed: {sorted(allowed)}")
        if d.get("format_version") != FORMAT_VERSION:
            _fail("format_version", d.get("format_version"), f"supported: {FORMAT_VERSION}")
        for name in ("gpu", "tp", "source", "measured_date", "curves"):
            if name not in d:
                _fail(name, None, "missing")
        curves = d["curves"]
        if not isinstance(curves, dict) or not curves:
            _fail("curves", curves, "must be a non-empty JSON object of collectives")
        parsed = {}
        for op, c in curves.items():
            if not isinstance(c, dict) or set(c) != {"bytes", "seconds"}:
                _fail(f"curves.{op}", c, "must be {bytes: [...], seconds: [...]}")
            try:
                parsed[op] = CommCurve(tuple(c["bytes"]), tuple(c["seconds"]))
            except InputError as err:
                raise with_file(err, None, f"curves.{op}") from None
        prov = d.get("provenance", {})
        if not isinstance(prov, dict):
            _fail("provenance", prov, "must be a JSON object")
        return CommCurves(str(d["gpu"]), d["tp"], d["source"], str(d["measured_date"]), parsed, prov)
    except InputError as err:
        raise with_file(err, file, key) from None


def load_comm_curves(path: str | Path) -> CommCurves:
    """Read and validate a ``comm_tp<N>.json`` file."""
    return comm_from_json_dict(read_json(path), file=path)


def retarget(curves: CommCurves, *, tp: int | None = None, bw_ratio: float = 1.0, gpu: str | None = None
             ) -> CommCurves:
    """``curves`` carried to another tp or GPU by the ring model: each point's time above the
    smallest message's (the latency floor) is bandwidth time, scaled by the ring's bytes a
    GPU moves (``2 (n-1) / n`` for all-reduce, ``(n-1) / n`` for all-to-all) and by
    ``bw_ratio`` (the measured GPU's link bandwidth over the target's); the floor scales with
    the ring's steps ``n - 1``. Labelled ``projected from`` the curves' own label."""
    n0, n1 = curves.tp, tp or curves.tp
    out = {}
    for op, c in curves.curves.items():
        share = (2.0 if op == "all_reduce" else 1.0)
        moved = (share * (n1 - 1) / n1) / (share * (n0 - 1) / n0)
        floor = c.seconds[0]
        secs = tuple(floor * (n1 - 1) / (n0 - 1) + (s - floor) * moved * bw_ratio for s in c.seconds)
        out[op] = CommCurve(c.bytes, secs)
    return replace(curves, gpu=gpu or curves.gpu, tp=n1, curves=out, source=f"projected from {curves.label}")


class MeasuredComm:
    """A step's communication seconds from curves (``seconds(tokens)``), for ``model`` on a
    replica split as ``par``: TP attention all-reduces ``tokens x hidden`` bf16 twice a layer;
    DP attention dispatches and combines (all-to-all) on its MoE layers and all-reduces on the
    rest. Built only when the curves hold every collective the mode needs (:func:`measured_comm`)."""

    def __init__(self, model, par, curves: CommCurves):
        self.model, self.par, self.curves = model, par, curves
        self.source = f"communication: {curves.label}"

    def seconds(self, tokens: float) -> float:
        """Communication seconds of a step over ``tokens`` tokens of the replica."""
        if tokens <= 0:
            return 0.0
        m, par, c = self.model, self.par, self.curves.curves
        act = tokens * m.hidden_size * ACT_BYTES
        if not par.dp_attention:
            return 2 * m.num_layers * c["all_reduce"].seconds_at(act)
        a2a_layers = m.num_moe_layers if par.ep == par.tp else 0
        # gather and scatter on the other layers: two all-reduces of half the bytes each
        gathered = m.num_layers - a2a_layers
        gather = gathered * 2 * c["all_reduce"].seconds_at(act / 2) if gathered else 0.0
        if not a2a_layers:
            return gather
        pairs = tokens / par.tp * remote_destinations(m.experts_per_token, par.ep) * m.hidden_size
        a2a = c["all_to_all"]
        return gather + a2a_layers * (a2a.seconds_at(pairs * DISPATCH_BYTES) + a2a.seconds_at(pairs * COMBINE_BYTES))


def needed_ops(model, par) -> tuple[str, ...]:
    """The collectives a replica split as ``par`` runs."""
    if par.dp_attention and par.ep == par.tp and model.is_moe:
        return ("all_to_all",) if model.num_moe_layers == model.num_layers else OPS
    return ("all_reduce",)


def measured_comm(model, par, sets: dict[int, CommCurves], *, gpu_bw_ratio: float = 1.0,
                  gpu: str | None = None) -> MeasuredComm | None:
    """Communication priced from ``sets`` (curves by tp): the set at ``par.tp``, else the
    nearest measured tp below it retargeted by the ring model; None when no set holds every
    collective the mode needs (the roofline's link model stays)."""
    if par.tp < 2:
        return None
    ok = {n: s for n, s in sets.items() if all(op in s.curves for op in needed_ops(model, par))}
    if not ok:
        return None
    below = [n for n in ok if n <= par.tp]
    base = ok[max(below)] if below else ok[min(ok)]
    if base.tp != par.tp or gpu_bw_ratio != 1.0:
        base = retarget(base, tp=par.tp, bw_ratio=gpu_bw_ratio, gpu=gpu)
    return MeasuredComm(model, par, base)


__all__ = ["CommCurve", "CommCurves", "MeasuredComm", "FORMAT_VERSION", "OPS", "load_comm_curves",
           "comm_from_json_dict", "retarget", "measured_comm", "needed_ops"]
