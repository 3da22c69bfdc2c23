"""Measured GPU profiles as cost models: evaluation, projection to other GPUs, lookup by name.

``get_cost_model(gpu, model, tp)`` is what the simulator and the tuner call:
the shipped profile ``profiles/<gpu>/<model>.json`` when there is one
(measured, or projected from a measured GPU), else the roofline with a warning.
"""
from __future__ import annotations

import warnings
from dataclasses import replace
from importlib import resources
from pathlib import Path

from dspark_sim.catalog import GpuSpec, get_gpu, get_model, served_format
from dspark_sim.cost.base import CostModel, DraftWork, StepWork
from dspark_sim.cost.profile_format import (DRAFT_KINDS, FORMAT_VERSION, DraftFit, GpuRef, HeldOut,
                                            Profile, Projection, TargetFit, check_grids,
                                            load_profile, profile_from_json_dict)
from dspark_sim.cost.moe import Routing
from dspark_sim.cost.parallel import Parallel, shard_factors
from dspark_sim.cost.roofline import RooflineCost, RooflineParams
from dspark_sim.cost.substitute import fill_host_terms
from dspark_sim.cost.shapes import SCALAR
from dspark_sim.cost.terms import STEP_KINDS
from dspark_sim.errors import InputError

PROFILES_PACKAGE = "dspark_sim.profiles"


class ProfileCost:
    """:class:`CostModel` evaluating a fitted :class:`Profile` (a few microseconds a step).

    tp > 1 divides every memory- and compute-bound term by ``tp`` (weights,
    KV and FLOPs are sharded), keeps the fixed terms, and adds a communication
    time ``comm_s[0] + comm_s[1] * tokens``. ``factors`` (see
    :func:`~.parallel.shard_factors`) replaces the plain ``1 / tp`` by what one GPU
    of the deployment holds and reads (expert parallel, DP attention, KV copies,
    served weight format); ``note`` says so in ``source``. Drafter kinds the profile
    lacks are costed by ``fallback`` (or raise ``ValueError`` without one). ``substitutes``:
    the host terms filled from sibling profiles and how (:mod:`.substitute`), for
    :meth:`provenance`.
    """

    def __init__(self, profile: Profile, *, tp: int = 1, comm_s: tuple[float, float] = (0.0, 0.0),
                 fallback: CostModel | None = None, warn: bool = True, factors: dict | None = None,
                 note: str = "", substitutes: dict[str, str] | None = None):
        if tp < 1:
            raise ValueError(f"tp must be >= 1, got {tp}")
        f = factors or {"memory": 1.0 / tp, "compute": 1.0 / tp, "weights": 1.0 / tp, "kv": 1.0 / tp}
        self.profile, self.tp, self.fallback = profile, tp, fallback
        self.name = f"profile:{profile.gpu}/{profile.model}/tp{tp}"
        self.source = profile.source + (f"; scaled from tp=1 to tp={tp}" if tp > 1 else "") + note
        self._target, self._drafts = profile.target, dict(profile.draft)
        if f != {"memory": 1.0, "compute": 1.0, "weights": 1.0, "kv": 1.0}:
            self._target = _sharded(profile.target, f, ("kv_s_per_token", "kv_req_s_per_token"))
            self._drafts = {k: _sharded(d, f, ("kv_s_per_token",)) for k, d in profile.draft.items()}
        self._comm0, self._comm1 = comm_s
        self._host = profile.host  # host time: fixed under tp and projection
        self._schedule = profile.schedule
        self._warn_fallback = warn
        self.substitutes = dict(substitutes or {})

    def provenance(self) -> dict:
        """Where each term of this cost model comes from (the ``cost_model`` block of a run's
        provenance, :mod:`dspark_sim.provenance`): measured, projected, substituted, roofline
        or missing, with the measurement it rests on."""
        p, proj = self.profile, self.profile.projection
        base = proj.measured_gpu.name if proj else p.gpu
        timed = "projected" if proj else "measured"
        how = (f"projected from {base} (measured {p.measured_date}) by spec-sheet ratios: memory x "
               f"{proj.memory_ratio:.3g}, compute x {proj.compute_ratio:.3g}" if proj
               else f"measured on {base}, {p.measured_date}")
        terms = {"target": {"kind": timed, "detail": how}}
        for kind in DRAFT_KINDS:
            terms[f"draft_{kind}"] = {"kind": timed, "detail": how} if kind in p.draft else {
                "kind": "roofline", "detail": f"no measured {kind} drafter: the roofline's, assumed efficiencies"}
        host_how = f"measured on {base}, {p.measured_date} (host time, kept under projection and TP)"
        for kind in STEP_KINDS:
            name = f"host_{kind}"
            terms[name] = self._host_term(name, kind in self._host, host_how)
        terms["sched"] = self._host_term("sched", self._schedule is not None, host_how)
        if self.tp > 1:
            terms["comm"] = {"kind": "modelled", "detail": "communication from link specs, not measured"}
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
            "tp": {"size": self.tp, "measured": self.tp == 1,
                   "detail": "measured at tp=1" if self.tp == 1 else
                   f"measured at tp=1; tp={self.tp} by sharding ratios, communication modelled"},
            "engine": getattr(p, "engine", None),
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
            over, linear, per_req, attn = self._target.parts(
                work.decode_reqs, work.verify_tokens, work.prefill_tokens, work.decode_context_tokens,
                work.prefill_attn_tokens2, work.prefill_reqs, SCALAR, work.decode_max_context)
            total = over + linear + per_req + attn
            if self._comm0 or self._comm1:
                total += self._comm0 + self._comm1 * tokens
        if work.draft is not None:
            total += self.draft_s(work.draft)
        return total + self.host_s(work) + self.sched_s(work)

    def host_s(self, work: StepWork) -> float:
        """The engine's host time of a step: 0 without decoding requests or a measured term."""
        if not work.decode_reqs:
            return 0.0
        fit = self._host.get(work.draft.kind if work.draft is not None and work.draft.block_size
                             else "none")
        return fit.seconds(work.decode_reqs) if fit is not None else 0.0

    def sched_s(self, work: StepWork) -> float:
        """The serving loop's host time before a step (retire, admit, schedule): 0 for an
        empty step or without a measured term."""
        if self._schedule is None or not (work.verify_tokens or work.prefill_tokens):
            return 0.0
        return self._schedule.seconds(work.running_reqs or work.decode_reqs + work.prefill_reqs)

    def breakdown(self, work: StepWork) -> dict[str, float]:
        """Step seconds split into overhead, linear, per-request, attention, comms, draft, host
        and scheduling."""
        tokens = work.verify_tokens + work.prefill_tokens
        parts = dict.fromkeys(("overhead_s", "linear_s", "per_req_s", "attn_s", "comm_s"), 0.0)
        if tokens:
            values = self._target.parts(work.decode_reqs, work.verify_tokens, work.prefill_tokens,
                                        work.decode_context_tokens, work.prefill_attn_tokens2,
                                        work.prefill_reqs, SCALAR, work.decode_max_context)
            parts.update(zip(("overhead_s", "linear_s", "per_req_s", "attn_s"), values))
            parts["comm_s"] = self._comm0 + self._comm1 * tokens if (self._comm0 or self._comm1) else 0.0
        parts["draft_s"] = self.draft_s(work.draft) if work.draft is not None else 0.0
        parts["host_s"] = self.host_s(work)
        parts["sched_s"] = self.sched_s(work)
        return parts

    def draft_s(self, draft: DraftWork) -> float:
        """Seconds the drafter spends in one step."""
        if draft.num_reqs == 0 or draft.block_size == 0:
            return 0.0
        fit = self._drafts.get(draft.kind)
        if fit is not None:
            return fit.seconds(draft.num_reqs, draft.block_size, draft.context_tokens, SCALAR)
        if draft.kind not in DRAFT_KINDS:
            raise ValueError(f"unknown draft kind {draft.kind!r}")
        if self.fallback is None:
            raise ValueError(f"{self.name} has no measured {draft.kind} drafter and no fallback")
        if self._warn_fallback:  # once, and only when a run actually uses the unmeasured drafter
            self._warn_fallback = False
            warnings.warn(f"profile {self.profile.gpu}/{self.profile.model} has no measured {draft.kind} "
                          f"drafter: its draft cost comes from the roofline", UserWarning, stacklevel=2)
        return self.fallback.breakdown(StepWork(draft=draft))["draft_s"]


def _sharded(fit, f: dict, kv_terms: tuple[str, ...]):
    """``fit`` with memory and compute terms scaled, then weights and KV by their own factors."""
    out = fit.scaled({"memory": f["memory"], "compute": f["compute"]})
    changes = {"weights_s": fit.weights_s * f["weights"]}
    changes.update({k: getattr(fit, k) * f["kv"] for k in kv_terms})
    return replace(out, **changes)


def project_profile(profile: Profile, to_gpu: GpuSpec) -> Profile:
    """``profile`` carried to ``to_gpu`` by spec-sheet ratios, keeping the measured efficiencies.

    Memory-bound terms scale by HBM bandwidth, compute-bound ones by dense
    bf16 FLOP/s, fixed (host/launch) terms and shapes stay; the result is
    marked ``projected from <gpu>, measured <date>`` and carries no grids.
    """
    base = profile.projection.measured_gpu if profile.projection else profile.gpu_spec
    cur = profile.gpu_spec
    ratio = {"memory": cur.hbm_bytes_per_s / to_gpu.hbm_bytes_per_s,
             "compute": cur.bf16_flops / to_gpu.bf16_flops}
    method = profile.held_out_method
    if profile.projection is None:
        method += f" (measured on {base.name}; the projection to other GPUs is not validated)"
    return replace(
        profile, gpu=to_gpu.name,
        source=f"projected from {base.name}, measured {profile.measured_date}",
        gpu_spec=GpuRef(to_gpu.name, to_gpu.hbm_bytes_per_s, to_gpu.bf16_flops, to_gpu.source),
        target=profile.target.scaled(ratio),
        draft={k: d.scaled(ratio) for k, d in profile.draft.items()},
        held_out_method=method, grids=None,
        projection=Projection(base, profile.measured_date,
                              memory_ratio=base.hbm_bytes_per_s / to_gpu.hbm_bytes_per_s,
                              compute_ratio=base.bf16_flops / to_gpu.bf16_flops))


def time_scaled(profile: Profile, scale: float) -> Profile:
    """``profile`` with every time term (memory, compute, fixed and host) multiplied by ``scale``."""
    r = {"memory": scale, "compute": scale, "fixed": scale}
    return replace(profile, target=profile.target.scaled(r), draft={k: d.scaled(r) for k, d in profile.draft.items()},
                   host={k: replace(h, bias_s=h.bias_s * scale, req_s=h.req_s * scale) for k, h in profile.host.items()},
                   schedule=None if profile.schedule is None else replace(
                       profile.schedule, bias_s=profile.schedule.bias_s * scale, req_s=profile.schedule.req_s * scale))


def scenario_cost(scenario, *, warn: bool = True) -> CostModel:
    """:func:`get_cost_model` for one replica of ``scenario``'s deployment; warns (``warn``) when a
    host term its method uses is a substitute (:mod:`.substitute`)."""
    dep = scenario.deployment
    cost = get_cost_model(scenario.gpu, scenario.model, file=scenario.file, warn=warn,
                          parallel=dep.parallel, kv_dtype_bytes=dep.kv_dtype_bytes,
                          routing=Routing(dep.routing_skew), time_scale=scenario.cost_scale)
    if warn and isinstance(cost, ProfileCost):
        spec = scenario.speculation
        kind = spec.draft_kind if spec.method != "none" else None
        for name in (f"host_{kind or 'none'}", "sched"):
            if name in cost.substitutes:
                warnings.warn(f"profile {cost.profile.gpu}/{cost.profile.model} has no measured {name} term: "
                              f"{cost.substitutes[name]}", UserWarning, stacklevel=2)
    return cost


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
                   kv_dtype_bytes: float = 2.0, routing: Routing = Routing(), time_scale: float = 1.0) -> CostModel:
    """The cost model for ``model`` on one replica of ``tp`` GPUs of kind ``gpu``.

    The shipped ``profiles/<gpu>/<model>.json`` (or the ``profile`` file named,
    whose gpu and model must match) when there is one, else
    :class:`RooflineCost` with a warning saying so. ``file`` is the user file
    that named gpu and model, blamed in errors (as in ``get_model``).
    ``parallel`` (expert parallel, DP attention; its ``tp`` wins) and
    ``kv_dtype_bytes`` (1 for an FP8 KV cache) describe the deployment, ``routing`` the
    spread of tokens over experts (the roofline's; a profile measured its own). ``time_scale``
    multiplies every term of a profile (a what-if, and the corners of an answer's interval,
    :mod:`dspark_sim.intervals`); the roofline ignores it.
    """
    par = parallel or Parallel(tp)
    spec, gpu_spec = get_model(model, file=file), get_gpu(gpu, file=file)
    params = RooflineParams(dtype_bytes=kv_dtype_bytes)
    roofline = RooflineCost(spec, gpu_spec, params=params, parallel=par, routing=routing)
    path = Path(profile) if profile is not None else shipped_profile_path(gpu, model)
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
    served = served_format(spec.weight_format, gpu_spec.fp4)
    factors = shard_factors(spec, par, served, kv_dtype_bytes)
    note = "" if served.name == "bf16" else f"; weights scaled from the measured bf16 to {served.name}"
    if par.tp > 1:
        note += f"; {roofline.source.split('; ', 1)[1]}"
    return ProfileCost(loaded, tp=par.tp, comm_s=roofline.comm_terms if par.tp > 1 else (0.0, 0.0),
                       fallback=roofline, warn=warn, factors=factors, note=note, substitutes=substitutes)


__all__ = ["ProfileCost", "Profile", "TargetFit", "DraftFit", "HeldOut", "GpuRef", "Projection",
           "FORMAT_VERSION", "load_profile", "profile_from_json_dict", "check_grids",
           "project_profile", "get_cost_model", "scenario_cost", "shipped_profile_path"]
