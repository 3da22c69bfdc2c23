"""Fit a cost profile to the profiler's raw timings, and measure its error on held-out points.

Two stages per section (target forward; each drafter kind):

1. A physically shaped fit: bias + per-request + roofline ridge over tokens
   + KV reads (+ prefill attention), every coefficient positive, started
   from and weakly tied to the spec-sheet roofline (efficiency priors), by
   robust nonlinear least squares on log step time.
2. Knot corrections inside the grid: a multiplicative ratio of the linear
   (weights/GEMM) time at every measured token count and, for the target, an
   additive per-request time at every measured request count, by ridge
   regression towards zero. Outside the grid they hold their edge value, so
   extrapolation follows the physical shape.

Held-out error: k-fold cross-validation over grid points, refitting both
stages without the fold.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace

import numpy as np
from scipy.optimize import least_squares

from dspark_sim.catalog import GpuSpec, ModelSpec
from dspark_sim.cost.base import DraftWork
from dspark_sim.cost.jsonio import with_file
from dspark_sim.cost.profile_format import (DraftFit, GpuRef, HeldOut, Profile, TargetFit,
                                            check_grids)
from dspark_sim.cost.roofline import RooflineCost
from dspark_sim.cost.shapes import ARRAY, hat_matrix, pad_tokens
from dspark_sim.errors import InputError

DTYPE_BYTES = 2.0
SHARPNESS_STARTS = (2.0, 5.0, 12.0)
SHARPNESS_BOUNDS = (1.0, 24.0)
PRIOR_WEIGHT = 0.01  # one prior sigma costs what one point off by 1 % costs
KNOT_RIDGE = float(__import__("os").environ.get("KR", 3.0))     # shrinkage of knot corrections: a knot backed by one point moves little
ROBUST_SCALE = 0.05  # soft-L1 scale of log-residuals: points off by > 5 % count less
MOE_TOKENS = tuple(float(2 ** i) for i in range(17))
# The profiler's decoder replays a verify step as a CUDA graph over its token count
# padded to a tier (kernels/decoder/graphs.py, token_tier): exact up to 8, then
# multiples of 8 up to 64, of 32 up to 256, of 128 above. A raw file may state its
# own tiers as provenance.pad_limits / provenance.pad_steps ([] for none).
DECODER_PAD_LIMITS = (8.0, 64.0, 256.0)
DECODER_PAD_STEPS = (1.0, 8.0, 32.0, 128.0)
NO_HOST = {"prefill_host_s": 0.0, "host_sharpness": 8.0}


@dataclass(frozen=True)
class _Param:
    """One fitted number: a positive coefficient (``shape=False``: fitted as ``start * e^u``,
    prior width ``sigma`` and bounds ``lo``/``hi`` on u) or a shape (``shape=True``: the value
    itself within [lo, hi], no prior)."""

    name: str
    start: float
    sigma: float = 1.0
    lo: float = -14.0
    hi: float = 8.0
    shape: bool = False


def _sharpness(name: str, start: float = SHARPNESS_STARTS[1]) -> _Param:
    return _Param(name, start, lo=SHARPNESS_BOUNDS[0], hi=SHARPNESS_BOUNDS[1], shape=True)


@dataclass
class _Rows:
    """Measured rows of one section as arrays (the columns a formula needs)."""

    cols: dict
    step_s: np.ndarray
    section: np.ndarray

    def take(self, idx: np.ndarray) -> _Rows:
        return _Rows({k: v[idx] for k, v in self.cols.items()}, self.step_s[idx], self.section[idx])


# -- stage 1: the physical fit ------------------------------------------------------
def _fit_terms(params: list[_Param], build, rows: _Rows) -> dict:
    """Values minimising robust log error of ``build(values).predict(rows)``, plus priors.

    Restarted from each of ``SHARPNESS_STARTS`` for the parameter named ``sharpness``.
    """
    shape = np.array([p.shape for p in params])
    start = np.array([p.start for p in params])
    sigma = np.array([p.sigma for p in params])
    lo, hi = np.array([p.lo for p in params]), np.array([p.hi for p in params])
    log_meas = np.log(rows.step_s)

    def values(u):
        return {p.name: float(x if p.shape else s * math.exp(x)) for p, s, x in zip(params, start, u)}

    def residuals(u):
        pred = build(values(u)).predict(rows)
        return np.concatenate([np.log(np.maximum(pred, 1e-12)) - log_meas,
                               PRIOR_WEIGHT * u[~shape] / sigma[~shape]])

    best = None
    for k in SHARPNESS_STARTS:
        u0 = np.where(shape, start, 0.0)
        u0[[p.name == "sharpness" for p in params]] = k
        u0 = np.clip(u0, lo + 1e-9, hi - 1e-9)
        res = least_squares(residuals, u0, bounds=(lo, hi), loss="soft_l1", f_scale=ROBUST_SCALE,
                            x_scale=1.0, max_nfev=400)
        if best is None or res.cost < best.cost:
            best = res
    return values(best.x)


def _ridge(rows: _Rows, pred: np.ndarray, design: list[np.ndarray]) -> list[np.ndarray]:
    """Coefficients of each design block [N, K] so that ``pred + sum(block @ coef)`` fits the
    measured step, by ridge regression of the relative residual (towards zero)."""
    y = (rows.step_s - pred) / rows.step_s
    x = np.hstack([d / rows.step_s[:, None] for d in design])
    coef = np.linalg.solve(x.T @ x + KNOT_RIDGE * np.eye(x.shape[1]), x.T @ y)
    return np.split(coef, np.cumsum([d.shape[1] for d in design])[:-1])


def _knots_of(component: np.ndarray, axis: np.ndarray) -> tuple[float, ...]:
    """Knots at the measured values of ``axis`` where ``component`` is non-zero."""
    pts = np.unique(axis[component != 0]) if np.any(component != 0) else np.unique(axis)
    return tuple(float(v) for v in pts)


def _fit_knots(rows: _Rows, pred: np.ndarray, blocks) -> list[tuple[tuple, np.ndarray]]:
    """Ridge-fit knot values so that ``pred + sum(component * interp(knots, values, axis))`` fits.

    ``blocks``: (component [N], axis [N]) per correction; returns (knots, values) per block.
    """
    knots = [_knots_of(component, axis) for component, axis in blocks]
    design = [hat_matrix(k, axis) * component[:, None] for k, (component, axis) in zip(knots, blocks)]
    return list(zip(knots, _ridge(rows, pred, design)))


# -- the target forward ---------------------------------------------------------------
class _TargetModel:
    def __init__(self, fit: TargetFit):
        self.fit = fit

    def predict(self, rows: _Rows) -> np.ndarray:
        return sum(self.parts(rows))

    def parts(self, rows: _Rows) -> tuple:
        c = rows.cols
        return self.fit.parts(c["reqs"], c["vtok"], c["ptok"], c["ctx"], c["pairs"], c["pre"], ARRAY)


def _target_rows(grids: dict) -> _Rows:
    v, p = grids["verify"], grids["prefill"]
    col = lambda rows, k: np.array([r[k] for r in rows], dtype=np.float64)  # noqa: E731
    chunk, cached, none = col(p, "chunk"), col(p, "cached"), np.zeros(len(p))
    cols = {"reqs": np.concatenate([col(v, "reqs"), none]),
            "vtok": np.concatenate([col(v, "tokens"), none]),
            "ptok": np.concatenate([np.zeros(len(v)), chunk]),
            "ctx": np.concatenate([col(v, "reqs") * col(v, "context"), none]),
            "pairs": np.concatenate([np.zeros(len(v)), chunk * (cached + chunk / 2)]),
            "pre": np.concatenate([np.zeros(len(v)), np.ones(len(p))])}
    step = np.concatenate([col(v, "step_s"), col(p, "step_s")])
    section = np.array(["verify"] * len(v) + ["prefill"] * len(p))
    return _Rows(cols, step, section)


def _target_params(model: ModelSpec, gpu: GpuSpec, has_prefill: bool) -> list[_Param]:
    bw, flops = gpu.hbm_bytes_per_s, gpu.bf16_flops
    weights = model.weight_bytes(DTYPE_BYTES) / bw
    kv = model.kv_bytes_per_token(DTYPE_BYTES) / (0.8 * bw)
    eff = lambda e_lo, e0, e_hi: (math.log(e0 / e_hi), math.log(e0 / e_lo))  # noqa: E731
    prefill_sigma = 1.0 if has_prefill else 0.05  # nothing measured: stay at the prior
    host = [_Param("prefill_host_s", 5e-3, 3.0), _sharpness("host_sharpness", 8.0)] if has_prefill \
        else []  # no eager step measured: no host floor (NO_HOST)
    return [
        _Param("bias_s", 3e-4, 3.0),
        _Param("req_s", 2e-6, 3.0),
        _Param("weights_s", weights / 0.85, 0.3, *eff(0.15, 0.85, 1.05)),
        _Param("flop_s_per_token", model.linear_flops_per_token() / (0.6 * flops), 0.5,
               *eff(0.03, 0.6, 1.05)),
        _Param("mem_s_per_token", 8.0 * model.vocab_size / bw, 3.0),
        _sharpness("sharpness"),
        _Param("kv_s_per_token", kv, 0.5, *eff(0.02, 0.8, 2.0)),
        # one request's keys streamed by few programs: a few times slower than the whole GPU
        _Param("kv_req_s_per_token", 3.0 * kv, 3.0),
        _sharpness("kv_sharpness", 3.0),
        _Param("attn_s_per_pair", model.attn_flops_per_token_per_ctx() / (0.4 * flops),
               prefill_sigma, *eff(0.02, 0.4, 1.05)),
        *host,
    ]


def _moe_curve(model: ModelSpec) -> dict:
    if not model.is_moe:
        return {}
    full = model.weight_bytes(DTYPE_BYTES)
    frac = tuple(model.activated_weight_bytes(int(n), DTYPE_BYTES) / full for n in MOE_TOKENS)
    return {"moe_tokens": MOE_TOKENS, "moe_fraction": frac}


def _pad_of(provenance: dict) -> dict:
    """The token tiers the measured engine pads graph steps to (see DECODER_PAD_*)."""
    limits = provenance.get("pad_limits", DECODER_PAD_LIMITS)
    steps = provenance.get("pad_steps", DECODER_PAD_STEPS)
    return {"pad_limits": tuple(float(v) for v in limits), "pad_steps": tuple(float(v) for v in steps)}


WIDTH_TERMS = ("kv_width_ratio", "lat_width_ratio")


def _width_params(widths: tuple) -> list[_Param]:
    """Factors of the KV-stream and per-request-latency terms at each widest window."""
    return [_Param(f"{name}:{i}", 1.0, 1.0, math.log(0.3), math.log(30.0))
            for name in WIDTH_TERMS for i in range(len(widths))]


def _target_fields(values: dict, widths: tuple) -> dict:
    """Stage-1 values as TargetFit fields: width factors gathered into ratio tuples."""
    out = {k: v for k, v in values.items() if ":" not in k}
    if widths:
        out["width_knots"] = widths
        for name in WIDTH_TERMS:
            out[name] = tuple(values[f"{name}:{i}"] - 1.0 for i in range(len(widths)))
    return out


def fit_target(rows: _Rows, model: ModelSpec, gpu: GpuSpec, pad: dict | None = None) -> TargetFit:
    """Both stages of the target fit on ``rows``; ``pad``: the graph token tiers (none if None)."""
    c = rows.cols
    has_prefill = bool(np.any(c["pre"]))
    fixed = {**_moe_curve(model), **(pad or {}), **({} if has_prefill else NO_HOST)}
    decode = (c["reqs"] > 0) & (c["ctx"] > 0)
    widths = _knots_of(decode, np.ceil(c["vtok"] / np.maximum(c["reqs"], 1))) if np.any(decode) else ()
    params = _target_params(model, gpu, has_prefill) + _width_params(widths)
    terms = _fit_terms(params, lambda vals: _TargetModel(TargetFit(**_target_fields(vals, widths),
                                                                   **fixed)), rows)
    fit = TargetFit(**_target_fields(terms, widths), **fixed)
    return _fit_target_knots(fit, rows)


def _fit_target_knots(fit: TargetFit, rows: _Rows) -> TargetFit:
    """Stage 2: ratio of the linear time at each token count, additive time at each R,
    and the ratio of decode attention at each (R, widest window)."""
    c = rows.cols
    over, linear, per_req, attn = _TargetModel(fit).parts(rows)
    pred = over + linear + per_req + attn
    # an eager step moves by d(step)/d(gpu) when its GPU time does (the host-floor ridge)
    gpu = pred - over + fit.bias_s
    slope = np.where(c["pre"] > 0, (gpu / pred) ** (fit.host_sharpness - 1.0), 1.0)
    tokens = c["vtok"] + c["ptok"]
    if fit.pad_steps:
        tokens = np.where(c["pre"] > 0, tokens, pad_tokens(fit.pad_limits, fit.pad_steps, tokens))
    has_reqs = c["reqs"] > 0
    reqs = np.maximum(c["reqs"], 1.0)
    dec_attn = replace(fit, attn_s_per_pair=0.0)._decode_attn(c["reqs"], c["vtok"], c["ctx"], ARRAY)
    width = np.ceil(c["vtok"] / reqs)
    m_knots = _knots_of(linear, tokens)
    design = [hat_matrix(m_knots, tokens) * (linear * slope)[:, None]]
    r_knots = kv_r = kv_w = ()
    if np.any(has_reqs):
        scale = float(np.median(rows.step_s))
        r_knots = _knots_of(has_reqs, c["reqs"])
        design.append(hat_matrix(r_knots, c["reqs"]) * (has_reqs * scale * slope)[:, None])
        kv_r, kv_w = _knots_of(dec_attn, c["reqs"]), _knots_of(dec_attn, width)
        cells = hat_matrix(kv_r, reqs)[:, :, None] * hat_matrix(kv_w, width)[:, None, :]
        design.append(cells.reshape(len(pred), -1) * (dec_attn * slope)[:, None])
    m_ratio, *rest = _ridge(rows, pred, design)
    extra = {}
    if rest:
        r_coef, kv_coef = rest
        table = np.maximum(kv_coef.reshape(len(kv_r), len(kv_w)), -0.9)
        extra = {"r_knots": r_knots, "r_delta_s": tuple(float(v) * scale for v in r_coef),
                 "kv_r_knots": kv_r, "kv_w_knots": kv_w,
                 "kv_ratio": tuple(tuple(float(v) for v in row) for row in table)}
    return replace(fit, m_knots=m_knots, m_ratio=tuple(float(max(v, -0.9)) for v in m_ratio),
                   **extra)


# -- the drafters ---------------------------------------------------------------------
class _DraftModel:
    def __init__(self, fit: DraftFit):
        self.fit = fit

    def predict(self, rows: _Rows) -> np.ndarray:
        c = rows.cols
        return self.fit.seconds(c["reqs"], c["block_size"], c["ctx"], ARRAY)


def _draft_rows(rows: list[dict]) -> _Rows:
    col = lambda k: np.array([r[k] for r in rows], dtype=np.float64)  # noqa: E731
    cols = {"reqs": col("reqs"), "block_size": col("block_size"), "ctx": col("reqs") * col("context")}
    return _Rows(cols, col("step_s"), np.array([f"draft_{r['kind']}" for r in rows]))


def _draft_params(kind: str, model: ModelSpec, gpu: GpuSpec) -> list[_Param]:
    """Starting values read off the roofline's drafter (the architecture may differ: loose priors)."""
    roof = RooflineCost(model, gpu)
    big = 4096

    def draft_s(reqs, size=1, ctx=0):
        return roof.draft_s(DraftWork(kind, reqs, size, ctx))
    per_unit = (draft_s(2 * big) - draft_s(big)) / big
    weights = draft_s(1) * 0.9
    kv = (draft_s(1, 1, 10 ** 6) - draft_s(1)) / 10 ** 6
    return [_Param("bias_s", 5e-5, 3.0), _Param("launch_s", 1e-5, 3.0),
            _Param("weights_s", weights, 1.0), _Param("flop_s_per_token", max(per_unit, 1e-12), 0.5),
            _Param("mem_s_per_token", max(per_unit, 1e-12) * 0.1, 3.0),
            _Param("kv_s_per_token", max(kv, 1e-15), 1.0), _sharpness("sharpness")]


def fit_draft(rows: _Rows, kind: str, model: ModelSpec, gpu: GpuSpec) -> DraftFit:
    """Both stages of one drafter's fit on ``rows``."""
    params = _draft_params(kind, model, gpu)
    terms = _fit_terms(params, lambda vals: _DraftModel(DraftFit(kind, **vals)), rows)
    fit = DraftFit(kind, **terms)
    c = rows.cols
    units = c["reqs"] * c["block_size"] if kind == "block" else c["reqs"]
    # The linear (weights/GEMM) time inside the step, g times over for a chain.
    lin = fit.seconds(c["reqs"], c["block_size"], c["ctx"], ARRAY) \
        - replace(fit, weights_s=0.0, flop_s_per_token=0.0, mem_s_per_token=0.0).seconds(
            c["reqs"], c["block_size"], c["ctx"], ARRAY)
    [(knots, ratio)] = _fit_knots(rows, fit.seconds(c["reqs"], c["block_size"], c["ctx"],
                                                    ARRAY), [(lin, units)])
    return replace(fit, knots=knots, ratio=tuple(float(max(v, -0.9)) for v in ratio))


# -- cross-validation and the whole profile -----------------------------------------------
def _held_out(rows: _Rows, fit_fn, predict_fn, folds: int, seed: int) -> np.ndarray:
    """Relative errors of k-fold predictions, one per row."""
    n = rows.step_s.size
    order = np.random.default_rng(seed).permutation(n)
    pred = np.empty(n)
    for fold in range(min(folds, n)):
        test = order[fold::min(folds, n)]
        train = np.setdiff1d(order, test)
        pred[test] = predict_fn(fit_fn(rows.take(train)), rows.take(test))
    return np.abs(pred / rows.step_s - 1.0)


def _summary(err: np.ndarray) -> HeldOut:
    if err.size == 0:
        return HeldOut(0.0, 0.0, 0.0, 0)
    return HeldOut(float(np.median(err)), float(np.percentile(err, 90)), float(err.max()), int(err.size))


# The profiler's spellings (kernels/profiler) of the canonical columns; a draft row
# without a kind is the DSpark block drafter, the only one it times.
RAW_ALIASES = {"draft": {"gamma": "block_size"}, "prefill": {"context": "cached"}}


def _canonical_rows(raw: dict) -> dict:
    """The raw sections with aliased columns renamed and a missing draft kind set to block."""
    out = {}
    for section in ("verify", "draft", "prefill"):
        rows, aliases = raw.get(section, []), RAW_ALIASES.get(section, {})
        if isinstance(rows, list):
            rows = [{aliases.get(k, k): v for k, v in r.items()} if isinstance(r, dict) else r
                    for r in rows]
            if section == "draft":
                rows = [{"kind": "block", **r} if isinstance(r, dict) else r for r in rows]
        out[section] = rows
    return out


def fit_profile(raw: dict, model: ModelSpec, gpu: GpuSpec, *, folds: int = 10, seed: int = 0,
                file=None) -> Profile:
    """Fit a :class:`Profile` to the profiler's raw JSON (see ``docs/profiles.md``).

    ``raw``: ``{"provenance": {...}, "verify": [...], "draft": [...], "prefill": [...]}``.
    ``folds``: k of the k-fold cross-validation that measures the held-out error.
    """
    try:
        if not isinstance(raw, dict):
            raise InputError(None, None, type(raw).__name__, "raw profile must be a JSON object")
        provenance = raw.get("provenance", {})
        if not isinstance(provenance, dict):
            raise InputError(None, "provenance", provenance, "must be a JSON object")
        grids = check_grids(_canonical_rows(raw))
    except InputError as err:
        raise with_file(err, file) from None
    target_rows = _target_rows(grids)
    pad = _pad_of(provenance)
    target = fit_target(target_rows, model, gpu, pad)
    errors = {"target": _held_out(target_rows, lambda r: fit_target(r, model, gpu, pad),
                                  lambda f, r: _TargetModel(f).predict(r), folds, seed)}
    drafts, sections = {}, [target_rows.section]
    for kind in sorted({r["kind"] for r in grids["draft"]}):
        rows = _draft_rows([r for r in grids["draft"] if r["kind"] == kind])
        drafts[kind] = fit_draft(rows, kind, model, gpu)
        errors[kind] = _held_out(rows, lambda r, k=kind: fit_draft(r, k, model, gpu),
                                 lambda f, r: _DraftModel(f).predict(r), folds, seed)
        sections.append(rows.section)
    err = np.concatenate(list(errors.values()))
    section = np.concatenate(sections)
    held = {str(s): _summary(err[section == s]) for s in dict.fromkeys(section)}
    held["all"] = _summary(err)
    date = str(provenance.get("date", "unknown date"))
    if re.match(r"\d{4}-\d\d-\d\d", date):
        date = date[:10]  # the day; provenance keeps the full timestamp
    return Profile(
        gpu=gpu.name, model=model.name, measured_date=date,
        source=f"measured on {gpu.name}, {date}",
        gpu_spec=GpuRef(gpu.name, gpu.hbm_bytes_per_s, gpu.bf16_flops, gpu.source),
        target=target, draft=drafts, held_out=held,
        held_out_method=f"{folds}-fold cross-validation over grid points (seed {seed}), both fit "
                        "stages refitted without the held-out fold",
        provenance=provenance, grids=grids)
