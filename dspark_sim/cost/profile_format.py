"""The measured-profile file: versioned frozen dataclasses that validate themselves.

A profile holds, for one GPU and one model at tp=1: the measured grids (the
profiler's raw rows), the fitted physical terms of the target forward and of
each drafter, their held-out error, and, for a projected profile, the
spec-sheet ratios it was projected with. ``docs/profiles.md`` documents every
key; :func:`load_profile` rejects anything else with an :class:`InputError`
naming the file, the key and the value.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, fields, replace
from pathlib import Path

import numpy as np

from dspark_sim.cost.jsonio import read_json, with_file, write_json_atomic
from dspark_sim.cost.shapes import Ops, pad_tokens, roof, smax
from dspark_sim.errors import InputError

FORMAT_VERSION = 2
SUPPORTED_VERSIONS = (2,)
DRAFT_KINDS = ("block", "chain")

# Which resource bounds each term: projection and tensor parallelism scale a
# "memory" term by a bandwidth ratio and a "compute" term by a FLOP/s ratio;
# "fixed" terms (host and launch time) and shapes stay as measured.
TARGET_BOUNDS = {"bias_s": "fixed", "req_s": "memory", "weights_s": "memory",
                 "flop_s_per_token": "compute", "mem_s_per_token": "memory",
                 "kv_s_per_token": "memory", "kv_req_s_per_token": "memory",
                 "attn_s_per_pair": "compute", "prefill_host_s": "fixed", "r_delta_s": "memory"}
DRAFT_BOUNDS = {"bias_s": "fixed", "launch_s": "fixed", "weights_s": "memory",
                "flop_s_per_token": "compute", "mem_s_per_token": "memory",
                "kv_s_per_token": "memory"}

# Raw grid rows: column -> (type, smallest allowed value).
ROW_COLUMNS = {
    "verify": {"reqs": (int, 1), "tokens": (int, 1), "context": (int, 0), "step_s": (float, 0.0)},
    "draft": {"reqs": (int, 1), "block_size": (int, 1), "kind": (str, None), "context": (int, 0),
              "step_s": (float, 0.0)},
    "prefill": {"chunk": (int, 1), "cached": (int, 0), "step_s": (float, 0.0)},
}


def _fail(key: str, value: object, why: str):
    raise InputError(None, key, value, why)


def _check_knots(knots_key: str, knots: tuple, values_key: str, values: tuple) -> None:
    if len(knots) != len(values):
        _fail(values_key, len(values), f"must have the length of {knots_key} ({len(knots)})")
    _check_increasing(knots_key, knots)


def _check_increasing(key: str, values: tuple) -> None:
    if any(b <= a for a, b in zip(values, values[1:])):
        _fail(key, list(values), "must be strictly increasing")


def _check_terms(obj, names, shapes=("sharpness",)) -> None:
    for name in names:
        value = getattr(obj, name)
        if not (math.isfinite(value) and value >= 0):
            _fail(name, value, "must be a finite number >= 0")
    for name in shapes:
        if not 1.0 <= getattr(obj, name) <= 64.0:
            _fail(name, getattr(obj, name), "must lie in [1, 64]")


def _check_pad(limits: tuple, steps: tuple) -> None:
    if steps and len(steps) != len(limits) + 1:
        _fail("pad_steps", list(steps), f"must have one more entry than pad_limits ({len(limits)})")
    if not steps and limits:
        _fail("pad_limits", list(limits), "needs pad_steps")
    if any(s < 1 or s != int(s) for s in steps):
        _fail("pad_steps", list(steps), "steps must be whole numbers >= 1")
    _check_increasing("pad_limits", limits)


def _check_table(fit) -> None:
    """kv_ratio is [len(kv_r_knots)] rows of [len(kv_w_knots)] factors - 1, or empty."""
    _check_increasing("kv_r_knots", fit.kv_r_knots)
    _check_increasing("kv_w_knots", fit.kv_w_knots)
    if not fit.kv_ratio and not fit.kv_r_knots and not fit.kv_w_knots:
        return
    if len(fit.kv_ratio) != len(fit.kv_r_knots) or not fit.kv_w_knots:
        _fail("kv_ratio", len(fit.kv_ratio), f"must have one row per kv_r_knots ({len(fit.kv_r_knots)})")
    for i, row in enumerate(fit.kv_ratio):
        if len(row) != len(fit.kv_w_knots):
            _fail(f"kv_ratio[{i}]", len(row), f"must have the length of kv_w_knots ({len(fit.kv_w_knots)})")
        if any(v <= -1 for v in row):
            _fail(f"kv_ratio[{i}]", list(row), "ratios must be > -1 (a positive factor)")


def _scaled(obj, bounds: dict, ratio: dict):
    """``obj`` with every term multiplied by ``ratio[bound]`` (bound per ``bounds``)."""
    changes = {}
    for name, bound in bounds.items():
        value = getattr(obj, name)
        k = ratio.get(bound, 1.0)
        changes[name] = tuple(v * k for v in value) if isinstance(value, tuple) else value * k
    return replace(obj, **changes)


@dataclass(frozen=True)
class TargetFit:
    """Fitted target forward: seconds of one step of R decoding requests and M tokens.

    A step without prefill is a CUDA-graph replay over T = pad(M) tokens (the
    ``pad_limits``/``pad_steps`` tiers); a step with prefill runs eagerly over
    T = M tokens while the host launches kernels, so it lasts the smooth
    maximum of the host's launch time and the GPU's time::

        gpu   = bias_s + [req_s*R + r_delta(R)] + lin(T) + dec_attn + attn_s_per_pair*A2
        lin   = [roof(weights_s*moe(T), flop_s_per_token, T, sharpness) + mem_s_per_token*T]
                * (1 + m_ratio(T))
        dec_attn = smax(kv_s_per_token*S, kv_req_s_per_token*S/R, kv_sharpness)
                   * (1 + kv_ratio(R, ceil(V/R)))
        step  = gpu                                        (graph: no prefill)
              = smax(prefill_host_s, gpu, host_sharpness)  (eager: prefill chunks)

    with V the verify tokens, S the summed decode context, A2 the prefill
    attention pairs. ``dec_attn`` streams the KV (bandwidth) but one request's
    keys are read by a bounded number of programs (the latency floor per
    request, S/R); ``kv_ratio`` is the measured efficiency of the attention
    launch shape at R requests and a widest window of ceil(V/R) query tokens
    (knots ``kv_r_knots`` x ``kv_w_knots``). m_ratio, r_delta and kv_ratio
    interpolate their knots (clamped).
    """

    bias_s: float
    req_s: float
    weights_s: float
    flop_s_per_token: float
    mem_s_per_token: float
    sharpness: float
    kv_s_per_token: float
    kv_req_s_per_token: float
    kv_sharpness: float
    attn_s_per_pair: float
    prefill_host_s: float
    host_sharpness: float
    pad_limits: tuple[float, ...] = ()
    pad_steps: tuple[float, ...] = ()
    moe_tokens: tuple[float, ...] = ()
    moe_fraction: tuple[float, ...] = ()
    m_knots: tuple[float, ...] = ()
    m_ratio: tuple[float, ...] = ()
    r_knots: tuple[float, ...] = ()
    r_delta_s: tuple[float, ...] = ()
    width_knots: tuple[float, ...] = ()
    kv_width_ratio: tuple[float, ...] = ()
    lat_width_ratio: tuple[float, ...] = ()
    kv_r_knots: tuple[float, ...] = ()
    kv_w_knots: tuple[float, ...] = ()
    kv_ratio: tuple[tuple[float, ...], ...] = ()

    def __post_init__(self) -> None:
        _check_terms(self, [n for n in TARGET_BOUNDS if n != "r_delta_s"],
                     ("sharpness", "kv_sharpness", "host_sharpness"))
        _check_knots("moe_tokens", self.moe_tokens, "moe_fraction", self.moe_fraction)
        _check_knots("m_knots", self.m_knots, "m_ratio", self.m_ratio)
        _check_knots("r_knots", self.r_knots, "r_delta_s", self.r_delta_s)
        _check_knots("width_knots", self.width_knots, "kv_width_ratio", self.kv_width_ratio)
        _check_knots("width_knots", self.width_knots, "lat_width_ratio", self.lat_width_ratio)
        _check_pad(self.pad_limits, self.pad_steps)
        _check_table(self)
        if any(not 0 < f <= 1 for f in self.moe_fraction):
            _fail("moe_fraction", list(self.moe_fraction), "fractions must lie in (0, 1]")
        if any(r <= -1 for r in self.m_ratio):
            _fail("m_ratio", list(self.m_ratio), "ratios must be > -1 (a positive factor)")

    def parts(self, reqs, verify_tokens, prefill_tokens, ctx, pairs, prefill_reqs, ops: Ops):
        """(overhead_s, linear_s, per_req_s, attn_s); floats or arrays, ``ops`` to match.

        ``prefill_reqs`` > 0 marks the eager path (see the class docstring);
        overhead_s holds ``bias_s`` and, there, the time the GPU waits for the host.
        """
        eager = prefill_reqs > 0
        tokens = verify_tokens + prefill_tokens
        if self.pad_steps:
            padded = pad_tokens(self.pad_limits, self.pad_steps, tokens)
            tokens = padded + eager * (tokens - padded)
        weights = self.weights_s
        if self.moe_tokens:
            weights = weights * ops.interp(self.moe_tokens, self.moe_fraction, tokens)
        linear = roof(weights, self.flop_s_per_token, tokens, self.sharpness) \
            + self.mem_s_per_token * tokens
        if self.m_knots:
            linear = linear * (1.0 + ops.interp(self.m_knots, self.m_ratio, tokens))
        per_req = self.req_s * reqs
        if self.r_knots:
            per_req = per_req + (reqs > 0) * ops.interp(self.r_knots, self.r_delta_s, reqs)
        attn = self.attn_s_per_pair * pairs + self._decode_attn(reqs, verify_tokens, ctx, ops)
        over = self.bias_s
        if self.prefill_host_s and eager is not False:  # False: a float step on the graph path
            gpu = over + linear + per_req + attn
            over = over + eager * (smax(self.prefill_host_s, gpu, self.host_sharpness) - gpu)
        return over, linear, per_req, attn

    def _decode_attn(self, reqs, verify_tokens, ctx, ops: Ops):
        """Decode (verify) attention seconds: the KV stream, floored per request, times the tile."""
        if not isinstance(reqs, np.ndarray):
            if reqs <= 0:
                return 0.0
            r = reqs
        else:
            r = np.maximum(reqs, 1)
        stream, latency = self.kv_s_per_token * ctx, self.kv_req_s_per_token * ctx / r
        width = ops.ceil(verify_tokens / r)
        if self.width_knots:
            stream = stream * (1.0 + ops.interp(self.width_knots, self.kv_width_ratio, width))
            latency = latency * (1.0 + ops.interp(self.width_knots, self.lat_width_ratio, width))
        out = smax(stream, latency, self.kv_sharpness)
        if self.kv_ratio:
            out = out * (1.0 + ops.interp2(self.kv_r_knots, self.kv_w_knots, self.kv_ratio, r, width))
        return out * (reqs > 0)

    def scaled(self, ratio: dict) -> TargetFit:
        """Terms scaled by ``ratio`` = {"memory": x, "compute": y} (missing bounds stay)."""
        return _scaled(self, TARGET_BOUNDS, ratio)


@dataclass(frozen=True)
class DraftFit:
    """Fitted drafter step over R requests and block size g (summed context S).

    block: bias_s + launch_s*g + lin(R*g) + kv_s_per_token*S
    chain: bias_s + g*(launch_s + lin(R) + kv_s_per_token*S)
    lin(u) = (roof(weights_s, flop_s_per_token, u, sharpness) + mem_s_per_token*u)*(1 + ratio(u))
    """

    kind: str
    bias_s: float
    launch_s: float
    weights_s: float
    flop_s_per_token: float
    mem_s_per_token: float
    sharpness: float
    kv_s_per_token: float
    knots: tuple[float, ...] = ()
    ratio: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        if self.kind not in DRAFT_KINDS:
            _fail("kind", self.kind, f"must be one of {DRAFT_KINDS}")
        _check_terms(self, DRAFT_BOUNDS)
        _check_knots("knots", self.knots, "ratio", self.ratio)
        if any(r <= -1 for r in self.ratio):
            _fail("ratio", list(self.ratio), "ratios must be > -1 (a positive factor)")

    def seconds(self, reqs, block_size, ctx, ops: Ops):
        """Draft seconds; floats or arrays, ``ops`` to match."""
        units = reqs * block_size if self.kind == "block" else reqs
        lin = roof(self.weights_s, self.flop_s_per_token, units, self.sharpness) \
            + self.mem_s_per_token * units
        if self.knots:
            lin = lin * (1.0 + ops.interp(self.knots, self.ratio, units))
        if self.kind == "block":
            return self.bias_s + self.launch_s * block_size + lin + self.kv_s_per_token * ctx
        return self.bias_s + block_size * (self.launch_s + lin + self.kv_s_per_token * ctx)

    def scaled(self, ratio: dict) -> DraftFit:
        """Terms scaled by ``ratio`` = {"memory": x, "compute": y}."""
        return _scaled(self, DRAFT_BOUNDS, ratio)


@dataclass(frozen=True)
class HeldOut:
    """Relative error |predicted / measured - 1| on grid points left out of the fit."""

    median_rel_err: float
    p90_rel_err: float
    max_rel_err: float
    num_points: int

    def __post_init__(self) -> None:
        for name in ("median_rel_err", "p90_rel_err", "max_rel_err"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                _fail(name, value, "must be a finite number >= 0")
        if self.num_points < 0:
            _fail("num_points", self.num_points, "must be >= 0")


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
                _fail(name, getattr(self, name), "must be a positive finite number")


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
                _fail(name, getattr(self, name), "must be a positive finite number")


@dataclass(frozen=True)
class Profile:
    """One GPU x model cost profile (tp=1). See ``docs/profiles.md`` for the file format."""

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
    tp: int = 1
    format_version: int = FORMAT_VERSION

    def __post_init__(self) -> None:
        if self.format_version not in SUPPORTED_VERSIONS:
            _fail("format_version", self.format_version, f"supported: {SUPPORTED_VERSIONS}")
        if self.tp != 1:
            _fail("tp", self.tp, "profiles are measured at tp=1 (get_cost_model scales to tp>1)")
        for name in ("gpu", "model", "source"):
            if not getattr(self, name):
                _fail(name, getattr(self, name), "must be a non-empty string")
        for kind, fit in self.draft.items():
            if kind != fit.kind:
                _fail(f"draft.{kind}.kind", fit.kind, f"must equal its key {kind!r}")
        if self.grids is not None:
            object.__setattr__(self, "grids", check_grids(self.grids, prefix="grids"))

    def to_json_dict(self) -> dict:
        """The profile as the JSON object :func:`load_profile` reads."""
        return {"format_version": self.format_version, **{
            f.name: dataclasses.asdict(getattr(self, f.name)) if dataclasses.is_dataclass(
                getattr(self, f.name)) else getattr(self, f.name)
            for f in fields(self) if f.name not in ("format_version", "draft", "held_out")},
            "draft": {k: dataclasses.asdict(v) for k, v in self.draft.items()},
            "held_out": {k: dataclasses.asdict(v) for k, v in self.held_out.items()}}

    def save(self, path: str | Path) -> None:
        """Write the profile JSON atomically."""
        write_json_atomic(path, self.to_json_dict())


# -- decoding -----------------------------------------------------------------------
def _convert(value: object, kind: str, key: str):
    if kind in ("float", "int"):
        if isinstance(value, bool) or not isinstance(value, (int, float) if kind == "float" else int):
            _fail(key, value, f"must be a JSON {'number' if kind == 'float' else 'integer'}")
        if kind == "float" and not math.isfinite(value):
            _fail(key, value, "must be finite")
        return float(value) if kind == "float" else value
    if kind == "str":
        if not isinstance(value, str):
            _fail(key, value, "must be a string")
        return value
    if kind == "dict":
        if not isinstance(value, dict):
            _fail(key, value, "must be a JSON object")
        return value
    if kind == "tuple[tuple[float, ...], ...]":
        if not isinstance(value, list):
            _fail(key, value, "must be a JSON list of lists of numbers")
        return tuple(_convert(v, "tuple[float, ...]", f"{key}[{i}]") for i, v in enumerate(value))
    if kind == "tuple[float, ...]":
        if not isinstance(value, list):
            _fail(key, value, "must be a JSON list of numbers")
        return tuple(_convert(v, "float", f"{key}[{i}]") for i, v in enumerate(value))
    raise TypeError(kind)


def _build(cls, d: object, key: str, nested: dict | None = None):
    """An instance of dataclass ``cls`` from JSON object ``d``; errors carry ``key`` as prefix."""
    if not isinstance(d, dict):
        _fail(key, d, "must be a JSON object")
    nested = nested or {}
    known = {f.name: f for f in fields(cls)}
    for name in d:
        if name not in known:
            _fail(f"{key}.{name}" if key else name, d[name], "unknown key")
    kwargs = {}
    for name, f in known.items():
        sub = f"{key}.{name}" if key else name
        if name not in d:
            if f.default is dataclasses.MISSING:
                _fail(sub, None, "missing")
            continue
        kwargs[name] = nested[name](d[name], sub) if name in nested else _convert(d[name], f.type, sub)
    try:
        return cls(**kwargs)
    except InputError as err:
        raise with_file(err, None, key) from None


def _mapping(cls, allowed=None):
    def build(value, key):
        if not isinstance(value, dict):
            _fail(key, value, "must be a JSON object")
        if allowed is not None and (bad := [k for k in value if k not in allowed]):
            _fail(f"{key}.{bad[0]}", value[bad[0]], f"unknown key; allowed: {allowed}")
        return {k: _build(cls, v, f"{key}.{k}") for k, v in value.items()}
    return build


def _optional(cls, nested=None):
    return lambda value, key: None if value is None else _build(cls, value, key, nested)


def profile_from_json_dict(d: object, *, file=None) -> Profile:
    """Validate and decode a profile JSON object; :class:`InputError` names file, key and value."""
    try:
        if isinstance(d, dict) and "format_version" not in d:
            _fail("format_version", None, "missing: not a dspark-sim profile")
        if isinstance(d, dict) and d.get("format_version") not in SUPPORTED_VERSIONS:
            _fail("format_version", d.get("format_version"), f"supported: {SUPPORTED_VERSIONS}")
        gpu_ref = lambda v, k: _build(GpuRef, v, k)  # noqa: E731
        return _build(Profile, d, "", {
            "gpu_spec": gpu_ref, "target": lambda v, k: _build(TargetFit, v, k),
            "draft": _mapping(DraftFit, DRAFT_KINDS), "held_out": _mapping(HeldOut),
            "projection": _optional(Projection, {"measured_gpu": gpu_ref}),
            "grids": lambda v, k: None if v is None else _convert(v, "dict", k)})
    except InputError as err:
        raise with_file(err, file) from None


def load_profile(path: str | Path) -> Profile:
    """Read, validate and decode a profile file (``format_version`` checked first)."""
    return profile_from_json_dict(read_json(path), file=path)


def check_grids(grids: object, *, prefix: str = "") -> dict:
    """Validate measured rows (the profiler's raw ``verify``/``draft``/``prefill`` lists).

    Returns ``{section: [row, ...]}`` with ints and floats normalised; sections
    may be absent or empty except ``verify``.
    """
    def key(*parts):
        return ".".join(p for p in (prefix, *parts) if p)
    if not isinstance(grids, dict):
        _fail(prefix or None, type(grids).__name__, "must be a JSON object")
    out = {}
    for section, columns in ROW_COLUMNS.items():
        rows = grids.get(section, [])
        if not isinstance(rows, list):
            _fail(key(section), type(rows).__name__, "must be a JSON list of rows")
        out[section] = [_check_row(row, columns, key(f"{section}[{i}]")) for i, row in enumerate(rows)]
    if not out["verify"]:
        _fail(key("verify"), [], "needs at least one measured row")
    return out


def _check_row(row: object, columns: dict, key: str) -> dict:
    if not isinstance(row, dict):
        _fail(key, row, "must be a JSON object")
    out = {}
    for name, (kind, low) in columns.items():
        if name not in row:
            _fail(f"{key}.{name}", None, "missing")
        value = _convert(row[name], kind.__name__, f"{key}.{name}")
        if kind is str and value not in DRAFT_KINDS:
            _fail(f"{key}.{name}", value, f"must be one of {DRAFT_KINDS}")
        if low is not None and (value < low or (kind is float and value <= low)):
            _fail(f"{key}.{name}", value, f"must be {'>' if kind is float else '>='} {low}")
        out[name] = value
    return out


__all__ = ["FORMAT_VERSION", "Profile", "TargetFit", "DraftFit", "HeldOut", "GpuRef", "Projection",
           "load_profile", "profile_from_json_dict", "check_grids"]
