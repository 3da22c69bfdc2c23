"""Fit a cost profile to the profiler's raw timings, and measure its error on held-out points.

Two stages per section (target forward; each drafter kind), see :mod:`.stages`:

1. A physically shaped fit (the formulas of :mod:`.terms`): bias, per-request
   time, the roofline ridge over (padded) tokens, logits, the decode KV stream
   with its per-request latency floor and query-tile factors, prefill
   attention pairs, and the host floor of eager steps; every coefficient
   positive, started from and weakly tied to the spec-sheet roofline.
2. Knot corrections inside the grid: a ratio of the linear time at every
   measured token count, an additive time at every measured request count,
   and a ratio of decode attention at every measured (R, query tile), by
   ridge regression towards zero. Outside the grid they hold their edge
   value, so extrapolation follows the physical shape.

Held-out error: k-fold cross-validation over grid points, refitting both
stages without the fold; the strict, level-by-level error is :mod:`.levels`.
"""
from __future__ import annotations

import math
import re
from dataclasses import replace

import numpy as np

from dspark_sim.catalog import GpuSpec, ModelSpec
from dspark_sim.cost.base import DraftWork
from dspark_sim.cost.jsonio import with_file
from dspark_sim.cost.profile_format import DraftFit, GpuRef, Profile, TargetFit, check_grids
from dspark_sim.cost.roofline import RooflineCost
from dspark_sim.cost.shapes import ARRAY, hat_matrix, pow2_array
from dspark_sim.cost.term_checks import check_pad
from dspark_sim.profiling.heldout import held_out, summarize_errors
from dspark_sim.profiling.host import fit_host, fit_schedule, held_out_schedule, held_out_steps
from dspark_sim.profiling.rows import canonical_rows, draft_rows, target_rows
from dspark_sim.profiling.stages import Param, Rows, fit_knots, fit_terms, knots_of, ridge, sharpness_param
from dspark_sim.errors import InputError

DTYPE_BYTES = 2.0
MOE_TOKENS = tuple(float(2 ** i) for i in range(17))
# The profiler's decoder replays a verify step as a CUDA graph over its token count
# padded to a tier (kernels/decoder/graphs.py, token_tier): exact up to 8, then
# multiples of 8 up to 64, of 32 up to 256, of 128 above. A raw file may state its
# own tiers as provenance.pad_limits / provenance.pad_steps ([] for none).
DECODER_PAD_LIMITS = (8.0, 64.0, 256.0)
DECODER_PAD_STEPS = (1.0, 8.0, 32.0, 128.0)
# The host launches an eager step's kernels while the GPU runs them: the step lasts the
# larger of the two, up to the last kernels' latency (a sharp ridge, not fitted: one
# floor point cannot tell a sharp ridge from an additive host time).
HOST_SHARPNESS = 12.0
# The decoder's attention streams one request's keys for one KV head with
# min(16, pow2(2 * SMs / (request tier * KV heads))) programs (kernels/decoder/attention.py,
# plan): a long request among many short ones is streamed by one program per head. A raw
# file may state its own as provenance.attn_split_programs_per_sm / attn_max_splits.
DECODER_SPLIT_PROGRAMS_PER_SM = 2.0
DECODER_MAX_SPLITS = 16.0
# Its prefill attention gives a program BLOCK_M = 64 query rows: 64 / pow2(query heads per KV
# head) tokens of one request (kernels/decoder/attention.py, plan), the prefill query tile; a
# raw file may state its own as provenance.attn_query_rows.
DECODER_QUERY_ROWS = 64.0
# It runs a step with prompt tokens of at most 512 tokens in all as a CUDA graph over the next
# power of two of them, at least 16 (kernels/decoder/step.py, PREFILL_GRAPH_TOKENS); a raw file
# may state its own as provenance.prefill_graph_tokens / prefill_graph_min (0: eager).
# Its drafter's CUDA graph runs over the request tier, the next power of two of the requests
# (kernels/decoder/graphs.py, request_tier): a raw file may say otherwise as
# provenance.draft_request_tiers (false: the drafter runs over the requests themselves).
DECODER_REQUEST_TIERS = True
DECODER_PREFILL_GRAPH = {"prefill_graph_tokens": 512.0, "prefill_graph_min": 16.0}
HOST_S_PER_LAYER = 12 * 30e-6
NO_HOST = {"prefill_host_s": 0.0, "prefill_kv_s_per_token": 0.0}


# -- the target forward ---------------------------------------------------------------
class TargetModel:
    """The target fit's prediction over fit rows (stage 1 and 2 both use it)."""
    def __init__(self, fit: TargetFit):
        self.fit = fit

    def predict(self, rows: Rows) -> np.ndarray:
        return sum(self.parts(rows))

    def parts(self, rows: Rows) -> tuple:
        c = rows.cols
        return self.fit.parts(c["reqs"], c["vtok"], c["ptok"], c["ctx"], c["pairs"], c["pre"], ARRAY,
                              c["maxctx"])


def _target_params(model: ModelSpec, gpu: GpuSpec, has_prefill: bool, split_target: float = 0.0) -> list[Param]:
    bw, flops = gpu.hbm_bytes_per_s, gpu.bf16_flops
    weights = model.weight_bytes(DTYPE_BYTES) / bw
    kv = model.kv_bytes_per_token(DTYPE_BYTES) / (0.8 * bw)
    # one program streams one KV head's keys at about one SM's share of the bandwidth
    # (SMs / heads = split_target / programs per SM)
    kv_one = kv * split_target / DECODER_SPLIT_PROGRAMS_PER_SM if split_target else 3.0 * kv
    eff = lambda e_lo, e0, e_hi: (math.log(e0 / e_hi), math.log(e0 / e_lo))  # noqa: E731
    prefill_sigma = 1.0 if has_prefill else 0.05  # nothing measured: stay at the prior
    # an eager forward launches about a dozen kernels a layer at tens of microseconds of
    # Python each; with no eager step measured there is no host floor (NO_HOST)
    host = [Param("prefill_host_s", model.num_layers * HOST_S_PER_LAYER, 1.0)] if has_prefill else []
    # a short chunk's keys are streamed by a few programs, as one decoding request's are
    floor = [Param("prefill_kv_s_per_token", kv_one, 3.0), sharpness_param("prefill_sharpness", 4.0)] \
        if has_prefill else []
    return [
        Param("bias_s", 3e-4, 3.0),
        Param("req_s", 2e-6, 3.0),
        Param("weights_s", weights / 0.85, 0.3, *eff(0.15, 0.85, 1.05)),
        Param("flop_s_per_token", model.linear_flops_per_token() / (0.6 * flops), 0.5,
               *eff(0.03, 0.6, 1.05)),
        Param("logits_s_per_token", 2.0 * model.vocab_size * model.hidden_size / (0.6 * flops)
               + 6.0 * model.vocab_size / bw, 1.0),
        sharpness_param("sharpness"),
        Param("kv_s_per_token", kv, 0.5, *eff(0.02, 0.8, 2.0)),
        # one request's keys streamed by few programs: a few times slower than the whole GPU
        Param("kv_req_s_per_token", kv_one, 3.0),
        sharpness_param("kv_sharpness", 3.0),
        Param("attn_s_per_pair", model.attn_flops_per_token_per_ctx() / (0.4 * flops),
               prefill_sigma, *eff(0.02, 0.4, 1.05)),
        *host,
        *floor,
    ]


def _moe_curve(model: ModelSpec) -> dict:
    if not model.is_moe:
        return {}
    full = model.weight_bytes(DTYPE_BYTES)
    frac = tuple(model.activated_weight_bytes(int(n), DTYPE_BYTES) / full for n in MOE_TOKENS)
    return {"moe_tokens": MOE_TOKENS, "moe_fraction": frac}


def _pad_of(provenance: dict) -> dict:
    """The token tiers the measured engine pads graph steps to (see DECODER_PAD_*), and its
    prompt steps' graphs (DECODER_PREFILL_GRAPH)."""
    out = {}
    for key, default in (("pad_limits", DECODER_PAD_LIMITS), ("pad_steps", DECODER_PAD_STEPS)):
        value = provenance.get(key, default)
        if not isinstance(value, (list, tuple)) \
                or any(isinstance(v, bool) or not isinstance(v, (int, float)) for v in value):
            raise InputError(None, f"provenance.{key}", value, "must be a list of numbers")
        out[key] = tuple(float(v) for v in value)
    for key, default in DECODER_PREFILL_GRAPH.items():
        value = provenance.get(key, default)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
            raise InputError(None, f"provenance.{key}", value, "must be a number >= 0")
        out[key] = max(float(value), 1.0) if key == "prefill_graph_min" else float(value)
    try:
        check_pad(out["pad_limits"], out["pad_steps"])
    except InputError as err:
        raise with_file(err, None, "provenance") from None
    return out


def _request_tiers_of(provenance: dict) -> bool:
    """Whether the measured engine's drafter runs over the request tier (DECODER_REQUEST_TIERS)."""
    value = provenance.get("draft_request_tiers", DECODER_REQUEST_TIERS)
    if not isinstance(value, bool):
        raise InputError(None, "provenance.draft_request_tiers", value, "must be true or false")
    return value


def _splits_of(provenance: dict, model: ModelSpec) -> dict:
    """The decode attention's key splits of the measured engine (see DECODER_*SPLIT*):
    ``split_target`` = programs per SM x SMs / KV heads; none without ``sm_count``."""
    out = {}
    for key, default in (("sm_count", None), ("attn_split_programs_per_sm", DECODER_SPLIT_PROGRAMS_PER_SM),
                         ("attn_max_splits", DECODER_MAX_SPLITS)):
        value = provenance.get(key, default)
        if value is None:
            return {}
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise InputError(None, f"provenance.{key}", value, "must be a positive number")
        out[key] = float(value)
    rows = provenance.get("attn_query_rows", DECODER_QUERY_ROWS)
    if isinstance(rows, bool) or not isinstance(rows, (int, float)) or not rows >= 1:
        raise InputError(None, "provenance.attn_query_rows", rows, "must be a number >= 1")
    group = 2 ** math.ceil(math.log2(max(model.num_heads // model.num_kv_heads, 1)))
    return {"split_target": out["attn_split_programs_per_sm"] * out["sm_count"] / model.num_kv_heads,
            "max_splits": max(1.0, out["attn_max_splits"]), "prefill_tile": max(1.0, float(rows) // group)}


def pad_and_splits(provenance: dict, model: ModelSpec) -> dict:
    """The measured engine's graph token tiers and decode-attention key splits (fixed in the fit)."""
    return {**_pad_of(provenance), **_splits_of(provenance, model)}


WIDTH_TERMS = ("kv_width_ratio", "lat_width_ratio")


def _width_params(widths: tuple) -> list[Param]:
    """Factors of the KV-stream and per-request-latency terms at each widest window."""
    return [Param(f"{name}:{i}", 1.0, 1.0, math.log(0.3), math.log(30.0))
            for name in WIDTH_TERMS for i in range(len(widths))]


def _target_fields(values: dict, widths: tuple) -> dict:
    """Stage-1 values as TargetFit fields: width factors gathered into ratio tuples."""
    out = {k: v for k, v in values.items() if ":" not in k}
    if widths:
        out["width_knots"] = widths
        for name in WIDTH_TERMS:
            out[name] = tuple(values[f"{name}:{i}"] - 1.0 for i in range(len(widths)))
    return out


def fit_target(rows: Rows, model: ModelSpec, gpu: GpuSpec, pad: dict | None = None) -> TargetFit:
    """Both stages of the target fit on ``rows``; ``pad``: the graph token tiers (none if None)."""
    c = rows.cols
    has_prefill = bool(np.any(c["pre"]))
    fixed = {**_moe_curve(model), **(pad or {}), **({} if has_prefill else NO_HOST),
             "host_sharpness": HOST_SHARPNESS}
    decode = (c["reqs"] > 0) & (c["ctx"] > 0)
    widths = knots_of(decode, pow2_array(c["vtok"] / np.maximum(c["reqs"], 1))) if np.any(decode) else ()
    params = _target_params(model, gpu, has_prefill, fixed.get("split_target", 0.0))
    terms = fit_terms(params, lambda vals: TargetModel(TargetFit(**vals, **fixed)), rows)
    if widths:  # then the window-width factors, from the physical fit
        terms = fit_terms(params + _width_params(widths), lambda vals: TargetModel(
            TargetFit(**_target_fields(vals, widths), **fixed)), rows, init=terms)
    fit = TargetFit(**_target_fields(terms, widths), **fixed)
    return _fit_target_knots(fit, rows)


def _fit_target_knots(fit: TargetFit, rows: Rows) -> TargetFit:
    """Stage 2: a ratio of the linear time at each token count, an additive time at each R,
    and a ratio of the decode attention at each (R, query tile)."""
    c = rows.cols
    over, linear, per_req, attn = TargetModel(fit).parts(rows)
    pred = over + linear + per_req + attn
    # an eager step moves by d(step)/d(gpu) when its GPU time does (the host-floor ridge)
    gpu = pred - over + fit.bias_s
    slope = np.where(c["pre"] > 0, (gpu / pred) ** (fit.host_sharpness - 1.0), 1.0)
    tokens = fit.padded_tokens(c["vtok"], c["ptok"], c["pre"] > 0, ARRAY)[0]
    m_knots = knots_of(linear, tokens)
    design = [hat_matrix(m_knots, tokens) * (linear * slope)[:, None]]
    has_reqs = c["reqs"] > 0
    scale = float(np.median(rows.step_s))
    if np.any(has_reqs):
        r_knots = knots_of(has_reqs, c["reqs"])
        design.append(hat_matrix(r_knots, c["reqs"]) * (has_reqs * scale * slope)[:, None])
    dec_attn = fit.decode_attn(c["reqs"], c["vtok"], c["ctx"], ARRAY, c["maxctx"])
    if fit.width_knots:
        reqs = np.maximum(c["reqs"], 1.0)
        kv_r = knots_of(dec_attn, c["reqs"])
        cells = hat_matrix(kv_r, reqs)[:, :, None] \
            * hat_matrix(fit.width_knots, pow2_array(c["vtok"] / reqs))[:, None, :]
        design.append(cells.reshape(len(pred), -1) * (dec_attn * slope)[:, None])
    m_ratio, *rest = ridge(rows, pred, design)
    extra = {}
    if np.any(has_reqs):
        extra.update(r_knots=r_knots, r_delta_s=tuple(float(v) * scale for v in rest.pop(0)))
    if fit.width_knots:
        table = np.maximum(rest.pop(0).reshape(len(kv_r), len(fit.width_knots)), -0.9)
        extra.update(kv_r_knots=kv_r, kv_ratio=tuple(tuple(float(v) for v in row) for row in table))
    return replace(fit, m_knots=m_knots, m_ratio=tuple(float(max(v, -0.9)) for v in m_ratio),
                   **extra)


# -- the drafters ---------------------------------------------------------------------
class DraftModel:
    """A drafter fit's prediction over fit rows."""
    def __init__(self, fit: DraftFit):
        self.fit = fit

    def predict(self, rows: Rows) -> np.ndarray:
        c = rows.cols
        return self.fit.seconds(c["reqs"], c["block_size"], c["ctx"], ARRAY)


def _draft_params(kind: str, model: ModelSpec, gpu: GpuSpec) -> list[Param]:
    """Starting values read off the roofline's drafter (the architecture may differ: loose priors)."""
    roof = RooflineCost(model, gpu)
    big = 4096

    def draft_s(reqs, size=1, ctx=0):
        return roof.draft_s(DraftWork(kind, reqs, size, ctx))
    per_unit = (draft_s(2 * big) - draft_s(big)) / big
    weights = draft_s(1) * 0.9
    kv = (draft_s(1, 1, 10 ** 6) - draft_s(1)) / 10 ** 6
    return [Param("bias_s", 5e-5, 3.0), Param("launch_s", 1e-5, 3.0),
            Param("weights_s", weights, 1.0), Param("flop_s_per_token", max(per_unit, 1e-12), 0.5),
            Param("mem_s_per_token", max(per_unit, 1e-12) * 0.1, 3.0),
            Param("kv_s_per_token", max(kv, 1e-15), 1.0), sharpness_param("sharpness")]


def fit_draft(rows: Rows, kind: str, model: ModelSpec, gpu: GpuSpec) -> DraftFit:
    """Both stages of one drafter's fit on ``rows``."""
    params = _draft_params(kind, model, gpu)
    terms = fit_terms(params, lambda vals: DraftModel(DraftFit(kind, **vals)), rows)
    fit = DraftFit(kind, **terms)
    c = rows.cols
    units = c["reqs"] * c["block_size"] if kind == "block" else c["reqs"]
    # The linear (weights/GEMM) time inside the step, g times over for a chain.
    lin = fit.seconds(c["reqs"], c["block_size"], c["ctx"], ARRAY) \
        - replace(fit, weights_s=0.0, flop_s_per_token=0.0, mem_s_per_token=0.0).seconds(
            c["reqs"], c["block_size"], c["ctx"], ARRAY)
    [(knots, ratio)] = fit_knots(rows, fit.seconds(c["reqs"], c["block_size"], c["ctx"],
                                                    ARRAY), [(lin, units)])
    return replace(fit, knots=knots, ratio=tuple(float(max(v, -0.9)) for v in ratio))


def measured_model(provenance: dict, model: ModelSpec) -> tuple[ModelSpec, int]:
    """``(what the profiler timed, tp)``: ``model``, or one rank of it where the raw file was timed
    with ``--tp-rank`` (``provenance.tp``; the fit's roofline priors then are the rank's)."""
    tp = provenance.get("tp", 1)
    if isinstance(tp, bool) or not isinstance(tp, int) or tp < 1:
        raise InputError(None, "provenance.tp", tp, "must be an integer >= 1 (the tp of the rank timed)")
    try:
        return model.tp_rank(tp), tp
    except InputError as err:
        raise InputError(None, "provenance.tp", tp, err.why) from None


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
        grids = check_grids(canonical_rows(raw))
        model, tp = measured_model(provenance, model)
        pad = pad_and_splits(provenance, model)
        tiers = _request_tiers_of(provenance)
    except InputError as err:
        raise with_file(err, file) from None
    rows_t = target_rows(grids)
    target = fit_target(rows_t, model, gpu, pad)
    errors = {"target": held_out(rows_t, lambda r: fit_target(r, model, gpu, pad),
                                  lambda f, r: TargetModel(f).predict(r), folds, seed)}
    drafts, sections = {}, [rows_t.section]
    for kind in sorted({r["kind"] for r in grids["draft"]}):
        rows = draft_rows([r for r in grids["draft"] if r["kind"] == kind])
        drafts[kind] = replace(fit_draft(rows, kind, model, gpu), request_tiers=tiers)
        errors[kind] = held_out(rows, lambda r, k=kind: fit_draft(r, k, model, gpu),
                                 lambda f, r: DraftModel(f).predict(r), folds, seed)
        sections.append(rows.section)
    host = fit_host(grids.get("step", []), target, drafts)
    if grids.get("step"):
        steps = grids["step"]
        errors["step"] = held_out_steps(steps, target, drafts, folds, seed)
        sections.append(np.array(["step"] * len(steps)))
    err = np.concatenate(list(errors.values()))
    section = np.concatenate(sections)
    held = {str(s): summarize_errors(err[section == s]) for s in dict.fromkeys(section)}
    held["all"] = summarize_errors(err)
    # the gaps between steps: host time alone, noisier than any step; not part of "all"
    schedule = fit_schedule(grids.get("sched", []))
    if len(grids.get("sched", [])) >= 2:
        held["sched"] = summarize_errors(held_out_schedule(grids["sched"], folds, seed))
    date = str(provenance.get("date", "unknown date"))
    if re.match(r"\d{4}-\d\d-\d\d", date):
        date = date[:10]  # the day; provenance keeps the full timestamp
    return Profile(
        gpu=gpu.name, model=model.name, measured_date=date,
        source=f"measured on {gpu.name}, {date}",
        gpu_spec=GpuRef(gpu.name, gpu.hbm_bytes_per_s, gpu.bf16_flops, gpu.source),
        target=target, draft=drafts, host=host, schedule=schedule, held_out=held, tp=tp,
        held_out_method=f"{folds}-fold cross-validation over grid points (seed {seed}), both fit "
                        "stages refitted without the held-out fold",
        provenance=provenance, grids=grids)
