"""The fitted step formulas of a profile: the target forward and the drafters (a drafter's:
:mod:`dspark_sim.cost.draft_fit`; the host's: :mod:`dspark_sim.cost.host_terms`).

:class:`TargetFit` and :class:`DraftFit` hold the fitted terms, check them on
construction (errors name the key and value) and evaluate a step on Python
floats (the engine, :data:`~dspark_sim.cost.shapes.SCALAR`), on arrays (the
fit, :data:`~dspark_sim.cost.shapes.ARRAY`) or on arrays with the engine's numbers
(:data:`~dspark_sim.cost.shapes.EXACT`). ``docs/profiles.md`` gives the
formulas and what bounds each term.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from dspark_sim.cost.draft_fit import DRAFT_BOUNDS, DRAFT_KINDS, DraftFit
from dspark_sim.cost.hot import hot_scale
from dspark_sim.cost.shapes import DecodeShape, Ops, held, pad_tokens, roof, scaled_terms, smax, spread_tail
from dspark_sim.cost.term_checks import check_knots, check_pad, check_rows, check_table, check_terms, fail

STEP_KINDS = ("none",) + DRAFT_KINDS  # a decode step: no drafter, or which one

# Which resource bounds each term: projection and tensor parallelism scale a
# "memory" term by a bandwidth ratio and a "compute" term by a FLOP/s ratio;
# "fixed" terms (host and launch time) and shapes stay as measured.
TARGET_BOUNDS = {"bias_s": "fixed", "req_s": "memory", "weights_s": "memory",
                 "flop_s_per_token": "compute", "logits_s_per_token": "compute",
                 "kv_s_per_token": "memory", "kv_req_s_per_token": "memory",
                 "attn_s_per_pair": "compute", "prefill_host_s": "fixed", "r_delta_s": "memory",
                 "prefill_kv_s_per_token": "memory", "mixed_s_per_row_tile": "compute",
                 "launch_eager_s": "fixed"}


def runs_eager(verify_tokens, prefill_tokens, graph_tokens):
    """Whether a step (or each of arrays of steps) runs eagerly, kernel by kernel: it carries prompt
    tokens and its tokens pass the prompt graphs' ``graph_tokens`` (``TargetFit.prefill_graph_tokens``)."""
    return (prefill_tokens > 0) & (verify_tokens + prefill_tokens > graph_tokens)


@dataclass(frozen=True)
class TargetFit:
    """Fitted target forward: seconds of one step (see ``docs/profiles.md``, "Target step").

    A step without prefill replays a CUDA graph over T = pad(M) tokens (tiers
    ``pad_limits``/``pad_steps``); a step with prefill of at most ``prefill_graph_tokens``
    tokens replays one over T = max(prefill_graph_min, pow2(M)), a larger one runs
    eagerly over T = M tokens while the host launches its kernels; a step with prefill
    lasts the smooth maximum of the host's launch time and the GPU's::

        gpu  = bias_s + req_s*R + r_delta(R) + lin + dec_attn + pre_attn
        lin  = [roof(weights_s*moe(T), flop_s_per_token, T, sharpness) + logits_s_per_token*L]
               * (1 + m_ratio(T))
        dec_attn = smax(kv_s_per_token*S*(1 + kv_width_ratio(W)),
                        kv_req_s_per_token*C/splits(R)*(1 + lat_width_ratio(W)), kv_sharpness)
                   * (1 + kv_ratio(R, W))
        pre_attn = smax(attn_s_per_pair*A2, prefill_kv_s_per_token*A2/P/splits(Q), prefill_sharpness)
                   + mixed_s_per_row_tile*R*ceil(Pmax/prefill_tile)     (decode rows beside chunks)
        dec_attn += spread_ratio * max(0, 1 - spread_slots/(R*splits(R)))
                    * kv_req_s_per_token*(C - S/R)/splits(R)*(1 + lat_width_ratio(W))
        (in the stream, S less shared(W) * D, D the KV tokens read from prefix pages another
         running request reads too, shared(W) ``shared_ratio`` at ``shared_widths``)
        step = gpu                                        (graph: no prefill)
             = smax(prefill_host_s, gpu, host_sharpness)  (eager: prefill chunks)

    R decoding requests, V their verify tokens, M = V + prefill tokens, L the
    tokens given logits (T on the graph path, V on the eager one: a prefill
    chunk needs no logits), S the summed decode context, C the longest decoding
    request's context (S/R in the profiler's grid, where all are equal), A2 the prefill
    attention pairs, P the prefill tokens, Q the prefill requests, Pmax the longest chunk
    (P/Q where not known), W = the power of two
    >= ceil(V/R) (the query tile of the widest window). A prefill chunk's attention is
    the pairs' compute, floored by the stream of one request's keys (A2/P: the keys a
    prefill query reads, token-weighted) by the few programs a short chunk gets (one per
    KV head and query tile of ``prefill_tile`` tokens); chunks no longer than one tile
    split their keys as a decode does (``splits(Q)``; 1 when ``prefill_tile`` is 0). The decode attention streams the KV over the whole GPU,
    but one request's keys are streamed by a few programs only, a latency
    floor set by the longest request (C), whose keys ``splits(R)`` programs per KV head
    share (flash-decoding: min(max_splits, pow2(split_target / pow2(R))), the measured
    decoder's plan; none when split_target is 0); both depend on the query tile. A step that
    carries decode rows beside prompt chunks plans its attention for the longest query: each
    decode row gets the chunk's query tiles (mostly empty) and no key splits, which
    ``mixed_s_per_row_tile`` prices per row and tile (fitted on mixed steps measured apart,
    :mod:`dspark_sim.profiling.mixed`; 0 where none were). When the requests' contexts differ,
    the longest one's programs start late once there are more programs than the GPU runs at
    once (R x splits(R) past ``spread_slots``): the last ones queue behind the stream, and the
    step runs over the smooth maximum by ``spread_ratio`` of the longest request's lag over the
    mean one's, scaled by the share of programs that queue (fitted on steps of long-tailed
    contexts, :mod:`dspark_sim.profiling.spread`; 0 where none were). Requests whose first pages
    are the same cached pages (the prefix cache) read them once from memory and again, in
    part, from the L2: a step streams ``shared_ratio`` of those repeated tokens less, by the
    query tile's width (``shared_widths``; wider windows do more work per byte and gain less),
    fitted on steps of requests sharing prefixes (:mod:`dspark_sim.profiling.shared`; none
    where none were). On a GPU at its power limit, prompt steps run up to ``hot_ratio`` slower
    by their prefill duty over ``hot_window_s`` past ``hot_duty0`` (:mod:`dspark_sim.cost.hot`). m_ratio, r_delta,
    the width ratios and the kv_ratio table interpolate their knots, clamped.
    """

    bias_s: float
    req_s: float
    weights_s: float
    flop_s_per_token: float
    logits_s_per_token: float
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
    kv_ratio: tuple[tuple[float, ...], ...] = ()
    split_target: float = 0.0
    max_splits: float = 1.0
    prefill_kv_s_per_token: float = 0.0
    prefill_sharpness: float = 4.0
    prefill_tile: float = 0.0
    prefill_graph_tokens: float = 0.0
    prefill_graph_min: float = 1.0
    mixed_s_per_row_tile: float = 0.0
    spread_ratio: float = 0.0
    spread_slots: float = 0.0
    shared_widths: tuple[float, ...] = ()
    shared_ratio: tuple[float, ...] = ()
    hot_ratio: float = 0.0
    hot_window_s: float = 0.0
    hot_duty0: float = 0.0
    hot_decode_reqs: tuple[float, ...] = ()  # decode steps' power-limit term (.hot.DecodeHot): knots
    hot_decode: tuple[tuple[float, ...], ...] = ()  # its ratios per drafter kind (none, chain, block)
    launch_eager_s: float = 0.0  # the serving loop's host time to launch an eager step (.launch_s)

    def __post_init__(self) -> None:
        check_terms(self, [n for n in TARGET_BOUNDS if n != "r_delta_s"],
                     ("sharpness", "kv_sharpness", "host_sharpness", "prefill_sharpness"))
        if not (math.isfinite(self.prefill_tile) and self.prefill_tile >= 0):
            fail("prefill_tile", self.prefill_tile, "must be a number >= 0 (0: prefill keys never split)")
        if not (math.isfinite(self.prefill_graph_tokens) and self.prefill_graph_tokens >= 0):
            fail("prefill_graph_tokens", self.prefill_graph_tokens, "must be a number >= 0 (0: prompt steps eager)")
        if not (math.isfinite(self.prefill_graph_min) and self.prefill_graph_min >= 1):
            fail("prefill_graph_min", self.prefill_graph_min, "must be a number >= 1")
        if len(self.shared_ratio) != len(self.shared_widths) or not all(0.0 <= r <= 1.0 for r in self.shared_ratio):
            fail("shared_ratio", self.shared_ratio, "must hold a number from 0 to 1 for each of shared_widths")
        for name in ("hot_ratio", "hot_window_s"):
            if not (math.isfinite(getattr(self, name)) and getattr(self, name) >= 0):
                fail(name, getattr(self, name), "must be a number >= 0")
        if not 0.0 <= self.hot_duty0 < 1.0:
            fail("hot_duty0", self.hot_duty0, "must be a number from 0 to below 1")
        check_knots("moe_tokens", self.moe_tokens, "moe_fraction", self.moe_fraction)
        if self.hot_decode_reqs or self.hot_decode:
            check_rows("hot_decode_reqs", self.hot_decode_reqs, "hot_decode", self.hot_decode, 3)
        check_knots("m_knots", self.m_knots, "m_ratio", self.m_ratio)
        check_knots("r_knots", self.r_knots, "r_delta_s", self.r_delta_s)
        check_knots("width_knots", self.width_knots, "kv_width_ratio", self.kv_width_ratio)
        check_knots("width_knots", self.width_knots, "lat_width_ratio", self.lat_width_ratio)
        check_pad(self.pad_limits, self.pad_steps)
        check_table(self)
        if any(not 0 < f <= 1 for f in self.moe_fraction):
            fail("moe_fraction", list(self.moe_fraction), "fractions must lie in (0, 1]")
        for name in ("m_ratio", "kv_width_ratio", "lat_width_ratio"):
            if any(r <= -1 for r in getattr(self, name)):
                fail(name, list(getattr(self, name)), "ratios must be > -1 (a positive factor)")
        if not (math.isfinite(self.split_target) and self.split_target >= 0):
            fail("split_target", self.split_target, "must be a number >= 0 (0: keys never split)")
        if not (math.isfinite(self.max_splits) and self.max_splits >= 1):
            fail("max_splits", self.max_splits, "must be a number >= 1")
        object.__setattr__(self, "_shapes", {})  # (R, V) -> DecodeShape; not a field (nor in the file)

    def splits(self, reqs, ops: Ops):
        """Programs that stream one request's keys for each KV head: the power of two near
        ``split_target`` over the request tier (the next power of two of R), at most
        ``max_splits``; 1 when ``split_target`` is 0."""
        if not self.split_target:
            return 1.0
        wanted = ops.pow2(self.split_target / ops.pow2(reqs))
        return np.minimum(wanted, self.max_splits) if isinstance(wanted, np.ndarray) \
            else min(wanted, self.max_splits)

    def parts(self, reqs, verify_tokens, prefill_tokens, ctx, pairs, prefill_reqs, ops: Ops,
              max_ctx=None, shared=0, longest_chunk=0):
        """(overhead_s, linear_s, per_req_s, attn_s); floats or arrays, ``ops`` to match.

        ``prefill_reqs`` > 0 marks the eager path (see the class docstring);
        overhead_s holds ``bias_s`` and, there, the time the GPU waits for the host.
        ``max_ctx``: the longest decoding request's context (None or 0: the mean, S/R);
        ``shared``: the KV tokens read from prefix pages another running request reads too;
        ``longest_chunk``: the longest prompt chunk (0: the mean, P/Q).
        """
        eager = prefill_reqs > 0
        over, linear, per_req = self.fixed_parts(reqs, verify_tokens, prefill_tokens, eager, ops)
        attn = self.prefill_attn(prefill_tokens, pairs, prefill_reqs, ops) \
            + self.decode_attn(reqs, verify_tokens, ctx, ops, max_ctx, shared=shared) \
            + self.mixed_attn(reqs, prefill_tokens, prefill_reqs, ops, longest_chunk)
        if self.prefill_host_s and eager is not False:  # False: a float step on the graph path
            gpu = over + linear + per_req + attn
            over = over + eager * (smax(self.prefill_host_s, gpu, self.host_sharpness, ops.power) - gpu)
        return over, linear, per_req, attn

    def fixed_parts(self, reqs, verify_tokens, prefill_tokens, eager, ops: Ops):
        """(bias_s, linear_s, per_req_s): the terms :meth:`parts` takes before the attention
        (none depends on the context), the wait for the host apart."""
        tokens, own = self.padded_tokens(verify_tokens, prefill_tokens, eager, ops)
        # prefill computes no logits but the last token's (nor do a prompt graph's padding rows)
        logits = own - prefill_tokens
        weights = self.weights_s
        if self.moe_tokens:
            weights = weights * ops.interp(self.moe_tokens, self.moe_fraction, tokens)
        linear = roof(weights, self.flop_s_per_token, tokens, self.sharpness, ops.power) \
            + self.logits_s_per_token * logits
        if self.m_knots:
            linear = linear * (1.0 + ops.interp(self.m_knots, self.m_ratio, tokens))
        per_req = self.req_s * reqs
        if self.r_knots:
            per_req = per_req + (reqs > 0) * ops.interp(self.r_knots, self.r_delta_s, reqs)
        return self.bias_s, linear, per_req

    def prefill_attn(self, prefill_tokens, pairs, prefill_reqs, ops: Ops):
        """Prefill attention seconds of ``prefill_reqs`` chunks of ``prefill_tokens`` tokens in
        all with ``pairs`` attention pairs: the pairs' compute, floored by the stream of one
        request's keys (see the class docstring)."""
        compute = self.attn_s_per_pair * pairs
        if not self.prefill_kv_s_per_token:
            return compute
        array = isinstance(prefill_tokens, np.ndarray) or isinstance(pairs, np.ndarray)
        tokens = np.maximum(prefill_tokens, 1) if array else max(prefill_tokens, 1)
        floor = self.prefill_kv_s_per_token * pairs / tokens
        if self.prefill_tile and self.split_target:
            reqs = np.maximum(prefill_reqs, 1) if array else max(prefill_reqs, 1)
            short = prefill_tokens <= self.prefill_tile * reqs  # one query tile a request: keys split
            floor = floor / (1.0 + short * (self.splits(reqs, ops) - 1.0))
        return smax(compute, floor, self.prefill_sharpness, ops.power)

    def mixed_attn(self, reqs, prefill_tokens, prefill_reqs, ops: Ops, longest_chunk=0):
        """Seconds the decode rows of a step with prompt chunks spend in its attention beyond a
        decode step's: ``mixed_s_per_row_tile`` per row and query tile of the longest chunk (the
        decoder plans the step's attention for it), or of the mean chunk where the longest is not
        given (0)."""
        if not self.mixed_s_per_row_tile:
            return 0.0
        tile = self.prefill_tile or 1.0
        if isinstance(reqs, np.ndarray) or isinstance(prefill_reqs, np.ndarray) \
                or isinstance(longest_chunk, np.ndarray):
            q = np.maximum(prefill_reqs, 1)
            chunk = np.where(longest_chunk > 0, longest_chunk, prefill_tokens / q)
            return self.mixed_s_per_row_tile * reqs * np.ceil(chunk / tile) * (prefill_reqs > 0)
        if prefill_reqs <= 0 or reqs <= 0:
            return 0.0
        chunk = longest_chunk if longest_chunk > 0 else prefill_tokens / prefill_reqs
        return self.mixed_s_per_row_tile * reqs * math.ceil(chunk / tile)

    def launch_s(self, verify_tokens: int, prefill_tokens: int) -> float:
        """The serving loop's host seconds to launch a step (``dspark_sim/profiling/launch_times.py``):
        an eager one (prompt tokens, the step's tokens past ``prefill_graph_tokens``) kernel by kernel;
        0 for a replay of CUDA graphs (a few milliseconds, left out: :mod:`dspark_sim.serving.launch`)."""
        return self.launch_eager_s if runs_eager(verify_tokens, prefill_tokens, self.prefill_graph_tokens) else 0.0

    def padded_tokens(self, verify_tokens, prefill_tokens, eager, ops: Ops):
        """Tokens the linear layers run over: a graph step (no prefill) its token tier
        (``pad_limits``/``pad_steps``); a step with prompt tokens of at most
        ``prefill_graph_tokens`` in all a CUDA graph over the next power of two (at least
        ``prefill_graph_min``); a larger one its own count (eager). And beside it the same
        without the prompt graphs (their padding rows compute no logits)."""
        tokens = verify_tokens + prefill_tokens
        if self.pad_steps:
            padded = pad_tokens(self.pad_limits, self.pad_steps, tokens)
            tokens = padded + eager * (tokens - padded)
        own = tokens
        if self.prefill_graph_tokens:
            raw = verify_tokens + prefill_tokens
            graph = eager * (raw <= self.prefill_graph_tokens)
            tier = ops.pow2(raw)
            tier = np.maximum(tier, self.prefill_graph_min) if isinstance(tier, np.ndarray) \
                else max(tier, self.prefill_graph_min)
            tokens = tokens + graph * (tier - tokens)
        return tokens, own

    def decode_shape(self, reqs, verify_tokens, ops: Ops) -> DecodeShape:
        """The decode attention's factors of R requests verifying V tokens (R >= 1): key splits,
        and the tile's factors on the stream, the latency floor and the whole (not to be changed:
        the engine's steps share them)."""
        return held(self._shapes, self._decode_shape, reqs, verify_tokens, ops)

    def _decode_shape(self, reqs, verify_tokens, ops: Ops) -> DecodeShape:
        width = ops.pow2(verify_tokens / reqs)
        shape = DecodeShape(self.splits(reqs, ops))
        if self.width_knots:
            shape.stream = 1.0 + ops.interp(self.width_knots, self.kv_width_ratio, width)
            shape.latency = 1.0 + ops.interp(self.width_knots, self.lat_width_ratio, width)
        if self.kv_ratio:
            shape.table = 1.0 + ops.interp2(self.kv_r_knots, self.width_knots, self.kv_ratio, reqs, width)
        return shape

    def decode_attn(self, reqs, verify_tokens, ctx, ops: Ops, max_ctx=None, shape: DecodeShape | None = None,
                    shared=0):
        """Decode (verify) attention seconds: the KV stream, floored by the longest request's
        (``max_ctx``; the mean S/R when not given), times the tile. ``shape``: the
        :meth:`decode_shape` of these requests, when known; ``shared``: the KV tokens read from
        prefix pages another running request reads too (the stream reads ``shared_ratio`` of
        them, at the query tile's width, from the L2)."""
        if not isinstance(reqs, np.ndarray):
            if reqs <= 0:
                return 0.0
            r = reqs
        else:
            r = np.maximum(reqs, 1)
        if shape is None:
            shape = self.decode_shape(r, verify_tokens, ops)
        longest = ctx / r if max_ctx is None or (np.isscalar(max_ctx) and not max_ctx) else max_ctx
        streamed = ctx
        if self.shared_ratio and (isinstance(shared, np.ndarray) or shared):
            streamed = ctx - ops.interp(self.shared_widths, self.shared_ratio, ops.pow2(verify_tokens / r)) * shared
        stream = self.kv_s_per_token * streamed
        latency = self.kv_req_s_per_token * longest / shape.splits
        if shape.stream is not None:
            stream = stream * shape.stream
            latency = latency * shape.latency
        out = smax(stream, latency, self.kv_sharpness, ops.power)
        if shape.table is not None:
            out = out * shape.table
        if self.spread_ratio:
            out = out + spread_tail(self.spread_ratio, self.spread_slots, r,
                                    self.kv_req_s_per_token * (longest - ctx / r), shape)
        return out * (reqs > 0)

    def hot(self, duty: float, prefill_tokens: int, tokens: int) -> float:
        """The factor on a step's linear seconds at prefill ``duty`` (:mod:`.hot`)."""
        return hot_scale(self.hot_ratio, self.hot_duty0, duty, prefill_tokens, tokens)

    def scaled(self, ratio: dict) -> TargetFit:
        """Terms scaled by ``ratio`` = {"memory": x, "compute": y} (missing bounds stay)."""
        return scaled_terms(self, TARGET_BOUNDS, ratio)


__all__ = ["DRAFT_KINDS", "STEP_KINDS", "TARGET_BOUNDS", "DRAFT_BOUNDS", "DecodeShape", "TargetFit", "DraftFit"]


def mixed_provenance(target: TargetFit, decoder: bool, timed: str, base: str) -> dict:
    """Where the decoder loop's own terms come from, for a run's provenance: ``mixed_steps``
    (``TargetFit.mixed_s_per_row_tile``: the decoder plans a step's attention for its longest
    query, so each decode row beside prompt chunks gets their query tiles; an engine's attention
    (FlashAttention-3's varlen scheduler, FlashInfer's plan) gives each request its own) and
    ``eager_launch`` (``TargetFit.launch_eager_s``: its overlapped loop plans the next step and
    reads the last one's tokens once it has launched an eager step). Another engine brings its
    own loop: both are left out there."""
    if not target.mixed_s_per_row_tile:
        mixed = {"kind": "missing", "detail": "no mixed-step probe, or its term no better than none held out: 0"}
    elif not decoder:
        mixed = {"kind": "left out", "detail": "the decoder's own (its attention plans every row for the longest "
                                               "chunk); the engine's attention tiles each request apart"}
    else:
        mixed = {"kind": timed, "detail": f"{target.mixed_s_per_row_tile * 1e9:.1f} ns per decode row and query tile "
                                          f"of the longest chunk, fitted on mixed steps timed on {base} "
                                          f"(profiles/{base}/raw/mixed_<model>.json)"}
    if not target.launch_eager_s:
        launch = {"kind": "missing", "detail": "no launch times in a mixed-step probe: plans at each step's start"}
    elif not decoder:
        launch = {"kind": "left out", "detail": "the decoder's overlapped loop; the engine's host terms take its place"}
    else:
        launch = {"kind": "measured", "detail": f"{target.launch_eager_s * 1e3:.1f} ms to launch an eager step, the "
                                                f"median of the mixed-step probe's on {base} (host time, kept under "
                                                "projection and TP)"}
    return {"mixed_steps": mixed, "eager_launch": launch}
