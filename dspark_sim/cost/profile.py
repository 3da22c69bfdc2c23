"""Measured GPU profiles as cost models: evaluation, projection to other GPUs, lookup by name.

``get_cost_model(gpu, model, tp)`` is what the simulator and the tuner call: the shipped profile
``profiles/<gpu>/<model>.json`` when there is one (measured, or projected from a measured GPU), else the
roofline with a warning.
"""
from __future__ import annotations

import math
import warnings
from dataclasses import replace
from importlib import resources
from itertools import repeat
from pathlib import Path

import numpy as np

from dspark_sim.catalog import GpuSpec, get_gpu, get_model, served_format
from dspark_sim.cost.base import CostModel, DraftWork, StepWork, StepWorks, per_step, pick
from dspark_sim.cost.comm import CommParams, provenance_term as comm_provenance
from dspark_sim.cost.comm_curves import measured_comm
from dspark_sim.cost.hot import DecodeHot, provenance_term
from dspark_sim.cost.moe import Routing
from dspark_sim.cost.parallel import Parallel, busiest_rank, rank_share, shard_factors, tp_block, tp_note
from dspark_sim.cost.projection import curves_for, project_profile, time_scaled
from dspark_sim.cost.profile_format import (DRAFT_KINDS, FORMAT_VERSION, DraftFit, GpuRef, HeldOut, Profile,
                                            Projection, TargetFit, check_grids, load_profile, profile_from_json_dict)
from dspark_sim.cost.roofline import RooflineCost, RooflineParams, engine_cost_model
from dspark_sim.cost.substitute import fill_host_terms
from dspark_sim.cost.shapes import EXACT, SCALAR
from dspark_sim.cost.terms import STEP_KINDS, DecodeShape, mixed_provenance
from dspark_sim.engines.model import Engine
from dspark_sim.errors import InputError

PROFILES_PACKAGE = "dspark_sim.profiles"
MEMO_ROWS = 1 << 16  # batch shapes whose context-free terms a cost model keeps
FIXED_KEYS = ("decode_reqs", "verify_tokens", "prefill_tokens", "prefill_reqs", "draft_reqs", "block_size",
              "running_reqs")  # what the terms without context depend on


class ProfileCost:
    """:class:`CostModel` evaluating a fitted :class:`Profile` (a few microseconds a step).

    ``tp`` (default: ``profile.tp``, the tp it was measured at: 1 for the whole model, N for one
    rank of an N-way replica) scales every memory- and compute-bound term by ``profile.tp / tp``
    and keeps the fixed terms; at tp > 1 a communication time ``comm_s[0] + comm_s[1] * tokens`` is
    added (a rank's profile has no collectives). ``factors`` (:func:`~.parallel.shard_factors`,
    relative to the measured split) replaces the plain ratio by what one GPU of the deployment holds
    and reads (expert parallel, DP attention, KV copies, served format); ``note`` says so in ``source``.
    Drafter kinds the profile lacks are costed by ``fallback`` (or raise ``ValueError`` without one).
    ``substitutes``: the host terms filled from sibling profiles and how (:mod:`.substitute`), for
    :meth:`provenance`. ``comm``, when given, prices the communication instead of ``comm_s`` (an
    object with ``seconds(tokens)``: :class:`~.comm_curves.MeasuredComm`, measured collectives).
    """

    def __init__(self, profile: Profile, *, tp: int | None = None, comm_s: tuple[float, float] = (0.0, 0.0),
                 fallback: CostModel | None = None, warn: bool = True, factors: dict | None = None,
                 note: str = "", substitutes: dict[str, str] | None = None, decoder_host: bool = True,
                 comm=None, dp_ranks: int = 1):
        tp = profile.tp if tp is None else tp
        if tp < 1:
            raise ValueError(f"tp must be >= 1, got {tp}")
        f = factors or dict.fromkeys(("memory", "compute", "weights", "kv"), profile.tp / tp)
        self.profile, self.tp, self.fallback = profile, tp, fallback
        self.name = f"profile:{profile.gpu}/{profile.model}/tp{tp}"
        self.source = profile.source + tp_note(profile.tp, tp) + note
        self._target, self._drafts = profile.target, dict(profile.draft)
        if f != {"memory": 1.0, "compute": 1.0, "weights": 1.0, "kv": 1.0}:
            self._target = _sharded(profile.target, f, ("kv_s_per_token", "kv_req_s_per_token"))
            self._drafts = {k: _sharded(d, f, ("kv_s_per_token",)) for k, d in profile.draft.items()}
        self._comm0, self._comm1, self._comm = *comm_s, comm
        self.dp_ranks = dp_ranks  # attention-DP ranks: a step waits for the busiest one's attention and host
        self.hot_window_s = profile.target.hot_window_s if profile.target.hot_ratio else 0.0  # prefill duty (.hot)
        self.decode_hot = DecodeHot.of(profile.target)  # decode steps after prompt steps (.hot)
        # the decoder's host time (fixed under tp and projection); another engine brings its own, and plans
        # its attention's query tiles per request: none of the decoder's mixed-step term (.terms)
        self._host, self._schedule = (profile.host, profile.schedule) if decoder_host else ({}, None)
        self._target = self._target if decoder_host else replace(self._target, mixed_s_per_row_tile=0.0,
                                                                         launch_eager_s=0.0)
        self._warn_fallback, self.decoder_host = warn, decoder_host
        self.substitutes = dict(substitutes or {}) if decoder_host else {}
        self._memo: dict[tuple, tuple] = {}  # per batch shape: the terms without context (breakdown_array)

    def provenance(self) -> dict:
        """Where each term of this cost model comes from (the ``cost_model`` block of a run's provenance,
        :mod:`dspark_sim.provenance`): measured, projected, substituted, roofline or missing, and why."""
        p, proj = self.profile, self.profile.projection
        base = proj.measured_gpu.name if proj else p.gpu
        timed = "projected" if proj else "measured"
        how = (f"projected from {base} (measured {p.measured_date}) by spec-sheet ratios: memory x "
               f"{proj.memory_ratio:.3g}, compute x {proj.compute_ratio:.3g}" if proj
               else f"measured on {base}, {p.measured_date}")
        terms = {"target": {"kind": timed, "detail": how}}
        for kind in DRAFT_KINDS:
            terms[f"draft_{kind}"] = {"kind": timed, "detail": p.draft[kind].detail(how)} if kind in p.draft else {
                "kind": "roofline", "detail": f"no measured {kind} drafter: the roofline's, assumed efficiencies"}
        host_how = f"measured on {base}, {p.measured_date} (host time, kept under projection and TP)"
        for kind in STEP_KINDS:
            name = f"host_{kind}"
            terms[name] = self._host_term(name, kind in self._host, host_how)
        terms["sched"] = self._host_term("sched", self._schedule is not None, host_how)
        terms.update(provenance_term(self._target, base if proj else None, base))
        terms.update(mixed_provenance(p.target, self.decoder_host, timed, base))
        if self.tp > 1:
            # the link model's assumptions are the fallback roofline's, whose comm terms these are
            terms["comm"] = comm_provenance(getattr(self.fallback, "comm_params", CommParams()), self._comm)
        prov = p.provenance
        return {
            "kind": "profile", "name": self.name, "gpu": p.gpu, "model": p.model, "source": self.source,
            "measured": {"gpu": base, "date": p.measured_date,
                         "decoder_commit": prov.get("decoder_commit") or "not recorded",
                         "decoder_sources_sha256": prov.get("decoder_sources_sha256") or "not recorded",
                         "weights": prov.get("weights", "not recorded")},
            "projected": None if proj is None else {
                "from": base, "method": "spec-sheet ratios", "memory_ratio": proj.memory_ratio,
                "compute_ratio": proj.compute_ratio},
            "tp": tp_block(p.tp, self.tp),
            "engine": Engine().label if self.decoder_host else None,
            "held_out": {k: {"median": v.median_rel_err, "p90": v.p90_rel_err, "max": v.max_rel_err}
                         for k, v in p.held_out.items()},
            "terms": terms}

    def _host_term(self, name: str, present: bool, how: str) -> dict:
        if name in self.substitutes:
            return {"kind": "substituted", "detail": self.substitutes[name]}
        if present:
            return {"kind": "measured", "detail": how}
        return {"kind": "missing", "detail": "not measured and no sibling profile to substitute: priced 0"}

    def step_s(self, work: StepWork) -> float:
        """Seconds of one engine step (see :class:`StepWork`)."""
        total = 0.0
        tokens = work.verify_tokens + work.prefill_tokens
        if tokens:
            ctx, longest, shared = self._rank_context(work)
            over, linear, per_req, attn = self._target.parts(
                work.decode_reqs, work.verify_tokens, work.prefill_tokens, ctx,
                work.prefill_attn_tokens2, work.prefill_reqs, SCALAR, longest, shared, work.prefill_longest)
            hot = self._target.hot(work.prefill_duty, work.prefill_tokens, tokens)
            total = over + linear * hot + per_req + attn + self._comm_s(tokens)  # x 1.0 is exact
        if work.draft is not None:
            total += self.draft_s(work.draft)
        return total + self.host_s(work) + self.sched_s(work)

    def _comm_s(self, tokens: float) -> float:
        """Communication seconds of a step over ``tokens`` tokens: measured curves, else the link model."""
        if self._comm is not None:
            return self._comm.seconds(tokens)
        return self._comm0 + self._comm1 * tokens if (self._comm0 or self._comm1) else 0.0

    def host_s(self, work: StepWork) -> float:
        """The engine's host time of a step: 0 without decoding requests or a measured term."""
        if not work.decode_reqs:
            return 0.0
        fit = self._host.get(work.draft.kind if work.draft is not None and work.draft.block_size
                             else "none")
        return fit.seconds(busiest_rank(work.decode_reqs, self.dp_ranks)) if fit is not None else 0.0

    def launch_s(self, work: StepWork) -> float:
        return self._target.launch_s(work.verify_tokens, work.prefill_tokens)  # the decoder's loop; 0 under another engine

    def sched_s(self, work: StepWork) -> float:
        """The serving loop's host time before a step (retire, admit, schedule): 0 for an
        empty step or without a measured term."""
        if self._schedule is None or not (work.verify_tokens or work.prefill_tokens):
            return 0.0
        return self._schedule.seconds(busiest_rank(work.running_reqs or work.decode_reqs + work.prefill_reqs,
                                                   self.dp_ranks))

    def breakdown(self, work: StepWork) -> dict[str, float]:
        """Step seconds split into overhead, linear, per-request, attention, comms, draft, host
        and scheduling."""
        tokens = work.verify_tokens + work.prefill_tokens
        parts = dict.fromkeys(("overhead_s", "linear_s", "per_req_s", "attn_s", "comm_s"), 0.0)
        if tokens:
            ctx, longest, shared = self._rank_context(work)
            over, linear, per_req, attn = self._target.parts(work.decode_reqs, work.verify_tokens, work.prefill_tokens, ctx,
                work.prefill_attn_tokens2, work.prefill_reqs, SCALAR, longest, shared, work.prefill_longest)
            hot = self._target.hot(work.prefill_duty, work.prefill_tokens, tokens)
            parts.update(overhead_s=over, linear_s=linear * hot, per_req_s=per_req, attn_s=attn,
                         comm_s=self._comm_s(tokens))
        parts["draft_s"] = self.draft_s(work.draft) if work.draft is not None else 0.0
        parts["host_s"], parts["sched_s"] = self.host_s(work), self.sched_s(work)
        if (after := self.decode_hot) is not None and work.prefill_duty > after.duty0 and not work.prefill_tokens:
            parts["hot_s"] = after.seconds(parts, work)  # last: a stretch adds it to the sum of the others
        return parts

    def _rank_context(self, work: StepWork) -> tuple:
        """The decode context, longest context and shared prefix reads the attention prices: the
        step's own, or under DP attention scaled to the busiest rank's share
        (:func:`~.parallel.rank_share`; the profile's KV terms are already split evenly over the ranks)."""
        if self.dp_ranks == 1:
            return work.decode_context_tokens, work.decode_max_context, work.shared_kv_tokens
        g = rank_share(work.decode_reqs, self.dp_ranks)
        return work.decode_context_tokens * g, work.decode_max_context * g, work.shared_kv_tokens * g

    def draft_s(self, draft: DraftWork) -> float:
        """Seconds the drafter spends in one step."""
        if draft.num_reqs == 0 or draft.block_size == 0:
            return 0.0
        fit = self._draft_fit(draft.kind)
        if fit is not None:
            return fit.seconds(draft.num_reqs, draft.block_size, draft.context_tokens, SCALAR)
        return self.fallback.breakdown(StepWork(draft=draft))["draft_s"]

    def _draft_fit(self, kind: str):
        """The measured drafter of ``kind``, or None when the roofline fallback prices it."""
        fit = self._drafts.get(kind)
        if fit is not None:
            return fit
        if kind not in DRAFT_KINDS:
            raise ValueError(f"unknown draft kind {kind!r}")
        if self.fallback is None:
            raise ValueError(f"{self.name} has no measured {kind} drafter and no fallback")
        if self._warn_fallback:  # once, and only when a run actually uses the unmeasured drafter
            self._warn_fallback = False
            warnings.warn(f"profile {self.profile.gpu}/{self.profile.model} has no measured {kind} "
                          f"drafter: its draft cost comes from the roofline", UserWarning, stacklevel=3)
        return None

    def breakdown_array(self, works: StepWorks) -> dict[str, np.ndarray]:
        """:meth:`breakdown` of N steps, float64 [N] per part, every number the scalar path's.

        What does not depend on the context (linear, per-request, host and scheduling terms,
        the attention's tile factors, the drafter's fixed part) is the scalar path's own
        number, kept per batch shape (a stretch's steps repeat a few); the context terms are
        evaluated on the arrays with the scalar path's operations in its order. Eager
        (prefill) steps, whose wait for the host depends on everything, are priced one by one.
        """
        size, tokens = len(works), works.batch_tokens
        has = tokens > 0
        if isinstance(has, np.ndarray) and has.all():
            has = True  # every step has work
        dec, ctx, longest = works.decode_reqs, works.decode_context_tokens, works.decode_max_context
        shared = works.shared_kv_tokens
        if self.dp_ranks > 1:  # the busiest rank's share, as the scalar path takes it (_rank_context)
            g = rank_share(dec, self.dp_ranks) if isinstance(dec, np.ndarray) else rank_share(int(dec), self.dp_ranks)
            ctx, longest, shared = ctx * g, longest * g, shared * g
        given = longest > 0
        if not (given.all() if isinstance(given, np.ndarray) else given):
            # the scalar path takes the mean context where the longest is not given (0)
            longest = np.where(given, longest, ctx / np.maximum(dec, 1))
        over, linear, per_req, comm, host, sched, draft_fixed, *shape = self._fixed_terms(works)
        attn = self._target.decode_attn(dec, works.verify_tokens, ctx, EXACT, longest, DecodeShape(*shape), shared)
        pairs = works.prefill_attn_tokens2
        if isinstance(pairs, np.ndarray) or pairs:
            attn = self._target.prefill_attn(works.prefill_tokens, pairs, works.prefill_reqs, EXACT) + attn
        parts = {"overhead_s": over, "linear_s": linear, "per_req_s": per_req, "attn_s": attn, "comm_s": comm}
        if has is not True:
            parts = {name: pick(has, v) for name, v in parts.items()}
        parts["draft_s"] = self._draft_array(works, draft_fixed)
        parts["host_s"], parts["sched_s"] = host, sched
        parts = {name: per_step(v, size) for name, v in parts.items()}
        eager = works.prefill_reqs > 0
        if isinstance(eager, np.ndarray) or eager:
            for i in np.flatnonzero(np.broadcast_to(eager, (size,))).tolist():
                for name, value in self.breakdown(works.at(i)).items():
                    parts[name][i] = value
        return parts

    def _fixed_terms(self, works: StepWorks) -> list:
        """Per step: bias, linear, per-request, comms, host and scheduling seconds, the drafter's
        fixed part and the decode attention's factors (splits, stream, latency, table; None
        where the profile has none); each the scalar path's number for that step (an array
        of N, or one number where the N steps share their batch shape)."""
        values = [getattr(works, name) for name in FIXED_KEYS]
        arrays = [i for i, v in enumerate(values) if isinstance(v, np.ndarray)]
        kind = works.draft_kind
        if not arrays:
            out = list(self._fixed(kind, tuple(values)))
        else:  # a stretch's steps repeat a few batch shapes: each distinct one looked up once
            size = len(works)
            columns = [v.tolist() if isinstance(v, np.ndarray) else repeat(v, size) for v in values]
            shapes: dict[tuple, int] = {}
            where = [shapes.setdefault(key, len(shapes)) for key in zip(*columns)]
            if len(shapes) == 1 and all(values[i] is values[arrays[0]] for i in arrays):
                out = list(self._fixed(kind, next(iter(shapes))))  # one column of one value: one number
            else:
                rows = np.array([self._fixed(kind, key) for key in shapes], dtype=np.float64)
                out = list(rows[where].T)
        for i in range(8, len(out)):  # a factor the profile lacks is None
            if math.isnan(out[i] if isinstance(out[i], float) else out[i][0]):
                out[i] = None
        return out

    def _fixed(self, kind, key: tuple) -> tuple:
        row = self._memo.get((kind, key))
        if row is None:
            if len(self._memo) > MEMO_ROWS:
                self._memo.clear()
            row = self._memo[(kind, key)] = self._fixed_row(kind, *key)
        return row

    def _fixed_row(self, kind, dec, verify, prefill, prefill_reqs, draft_reqs, block_size, running) -> tuple:
        """:meth:`_fixed_terms` of one step, by the scalar path."""
        tokens = verify + prefill
        work = StepWork(dec, verify, 0, prefill, prefill_reqs, 0.0,
                        DraftWork(kind, draft_reqs, block_size, 0) if kind and block_size else None, 0, running)
        over, linear, per_req = self._target.fixed_parts(dec, verify, prefill, prefill_reqs > 0, SCALAR)
        comm = self._comm_s(tokens) if tokens else 0.0
        fit = self._drafts.get(kind) if kind and draft_reqs and block_size else None
        draft_fixed = fit.fixed_s(draft_reqs, block_size, SCALAR) if fit is not None else 0.0
        shape = self._target.decode_shape(dec, verify, SCALAR) if dec > 0 else DecodeShape(1.0, 1.0, 1.0, 1.0)
        factors = [math.nan if f is None else f for f in (shape.stream, shape.latency, shape.table)]
        return (over, linear, per_req, comm, self.host_s(work), self.sched_s(work), draft_fixed, shape.splits,
                *factors)

    def _draft_array(self, works: StepWorks, fixed: np.ndarray):
        if works.draft_kind is None:
            return 0.0
        drafting = (works.draft_reqs > 0) & (works.block_size > 0)
        if not (drafting.any() if isinstance(drafting, np.ndarray) else drafting):
            return 0.0
        fit = self._draft_fit(works.draft_kind)
        if fit is None:
            return self.fallback.breakdown_array(works)["draft_s"]
        return pick(drafting, fit.seconds(works.draft_reqs, works.block_size,
                                          works.draft_context_tokens, EXACT, fixed))


def _sharded(fit, f: dict, kv_terms: tuple[str, ...]):
    """``fit`` with memory and compute terms scaled, then weights and KV by their own factors."""
    out = fit.scaled({"memory": f["memory"], "compute": f["compute"]})
    changes = {"weights_s": fit.weights_s * f["weights"]}
    changes.update({k: getattr(fit, k) * f["kv"] for k in kv_terms})
    return replace(out, **changes)


def _canonical(name: str, lookup) -> str:
    try:
        return lookup(name).name
    except InputError:
        return name.strip().lower()


def shipped_profile_path(gpu: str, model: str) -> Path | None:
    """Path of the shipped ``profiles/<gpu>/<model>.json``, or None when there is none."""
    gpu, model = _canonical(gpu, get_gpu), _canonical(model, get_model)
    path = resources.files(PROFILES_PACKAGE).joinpath(gpu, f"{model}.json")
    return Path(str(path)) if path.is_file() else None


def get_cost_model(gpu: str, model: str, tp: int = 1, *, file=None, warn: bool = True,
                   profile: str | Path | None = None, parallel: Parallel | None = None,
                   kv_dtype_bytes: float = 2.0, routing: Routing = Routing(), time_scale: float = 1.0,
                   decoder_host: bool = True, comm_curves: str | Path | None = None,
                   gpu_work=None) -> CostModel:
    """The cost model for ``model`` on one replica of ``tp`` GPUs of kind ``gpu``.

    The shipped ``profiles/<gpu>/<model>.json`` (or the ``profile`` file named, whose gpu and model
    must match) when there is one, else :class:`RooflineCost` with a warning saying so. ``file`` is
    the user file that named gpu and model, blamed in errors (as in ``get_model``).
    ``parallel`` (expert parallel, DP attention; its ``tp`` wins) and
    ``kv_dtype_bytes`` (1 for an FP8 KV cache) describe the deployment, ``routing`` the
    spread of tokens over experts (the roofline's; a profile measured its own). ``time_scale``
    multiplies every term of a profile (a what-if, and the corners of an answer's interval,
    :mod:`dspark_sim.intervals`); the roofline ignores it. ``decoder_host=False`` (another engine,
    whose host terms take its place) leaves out the decoder's host time and mixed-step term.
    ``comm_curves`` (a ``dspark-profile comm`` file) prices the communication from measured
    collectives, over the profile's own curves and in place of the link model.
    ``gpu_work`` (an :class:`~dspark_sim.engines.GpuWork`): the step runs a serving engine's
    kernels: an MoE model without a profile measured whole (none, or one scaled from layer slices
    of the decoder's kernels) is priced by this engines' MoE roofline
    (:func:`~.roofline.engine_cost_model`).
    """
    par = parallel or Parallel(tp)
    spec, gpu_spec = get_model(model, file=file), get_gpu(gpu, file=file)
    params = RooflineParams(dtype_bytes=kv_dtype_bytes)
    extra = curves_for(comm_curves, gpu_spec)
    roofline = RooflineCost(spec, gpu_spec, params=params, parallel=par, routing=routing,
                            measured=measured_comm(spec, par, extra))
    path = Path(profile) if profile is not None else shipped_profile_path(gpu, model)
    if gpu_work is not None:
        engines = engine_cost_model(spec, gpu_spec, par, path, gpu_work, routing=routing,
                                    kv_dtype_bytes=kv_dtype_bytes, measured=measured_comm(spec, par, extra))
        if engines is not None:
            return engines
    if path is None:
        if warn:
            warnings.warn(f"no measured profile for {gpu}/{model}: using the roofline with assumed "
                          f"efficiencies (profile it with dspark-profile and fit it with dspark-profile fit to replace it)",
                          UserWarning, stacklevel=2)
        return roofline
    loaded, substitutes = fill_host_terms(load_profile(path))
    if time_scale != 1.0:
        loaded = time_scaled(loaded, time_scale)
    for key, want, lookup in (("gpu", gpu, get_gpu), ("model", model, get_model)):
        if getattr(loaded, key) != _canonical(want, lookup):
            raise InputError(path, key, getattr(loaded, key), f"the profile is not for {key} {want!r}")
    if extra:
        loaded = replace(loaded, comm={**loaded.comm, **extra})
    return profile_cost(loaded, spec, gpu_spec, par, roofline, warn=warn, kv_dtype_bytes=kv_dtype_bytes,
                        decoder_host=decoder_host, substitutes=substitutes)


def profile_cost(profile: Profile, spec, gpu_spec: GpuSpec, par: Parallel, roofline: RooflineCost | None = None,
                 *, warn: bool = True, kv_dtype_bytes: float = 2.0, decoder_host: bool = True,
                 substitutes: dict[str, str] | None = None) -> ProfileCost:
    """``profile`` as the cost model of one replica split as ``par``: sharded, its measured
    communication curves in place of the roofline's link model where they cover the split;
    ``decoder_host=False`` leaves out the decoder's host time and mixed-step term; ``substitutes``:
    the host terms filled from sibling profiles (:mod:`.substitute`)."""
    roofline = roofline or RooflineCost(spec, gpu_spec, params=RooflineParams(dtype_bytes=kv_dtype_bytes),
                                        parallel=par)
    served = served_format(spec.weight_format, gpu_spec.fp4)
    factors = shard_factors(spec, par, served, kv_dtype_bytes, measured_tp=profile.tp)
    note = "" if served.name == "bf16" else f"; weights scaled from the measured bf16 to {served.name}"
    comm = measured_comm(spec, par, profile.comm)
    if comm is not None:
        note += f"; {comm.source} (in place of the roofline's link model)"
    elif par.tp > 1:
        note += f"; {roofline.source.split('; ', 1)[1]}"
    return ProfileCost(profile, tp=par.tp, comm_s=roofline.comm_terms if par.tp > 1 else (0.0, 0.0),
                       fallback=roofline, warn=warn, factors=factors, note=note, substitutes=substitutes,
                       decoder_host=decoder_host, comm=comm, dp_ranks=par.dp_ranks)


__all__ = ["ProfileCost", "Profile", "TargetFit", "DraftFit", "HeldOut", "GpuRef", "Projection",
           "FORMAT_VERSION", "load_profile", "profile_from_json_dict", "check_grids",
           "project_profile", "get_cost_model", "profile_cost", "shipped_profile_path"]
