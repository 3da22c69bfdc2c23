"""The cost model of one replica of a scenario: the GPU's work (profile or roofline) under its engine."""
from __future__ import annotations

import warnings

from dspark_sim.catalog import get_gpu, get_model
from dspark_sim.cost.roofline import attention_kind
from dspark_sim.cost.base import CostModel
from dspark_sim.engines.step_cost import EngineCost, eager_prefill
from dspark_sim.cost.moe import Routing
from dspark_sim.cost.profile import ProfileCost, get_cost_model


def scenario_cost(scenario, *, warn: bool = True) -> CostModel:
    """:func:`~dspark_sim.cost.profile.get_cost_model` for one replica of ``scenario``'s deployment,
    under its engine: the decoder's own host time comes with its profile (warned about, ``warn``,
    when a host term its method uses is a substitute, :mod:`.substitute`); another engine's host
    terms replace it (:class:`~dspark_sim.engines.step_cost.EngineCost`)."""
    dep, engine = scenario.deployment, scenario.engine
    model = get_model(scenario.model)
    gpu = get_cost_model(scenario.gpu, scenario.model, file=scenario.file, warn=warn,
                         parallel=dep.parallel, kv_dtype_bytes=dep.kv_dtype_bytes,
                         routing=Routing(dep.routing_skew), time_scale=scenario.cost_scale,
                         decoder_host=engine.is_decoder, comm_curves=dep.comm_curves,
                         gpu_work=engine.gpu_work)
    if engine.is_decoder:
        if warn and isinstance(gpu, ProfileCost):
            spec = scenario.speculation
            kind = spec.draft_kind if spec.method != "none" else None
            for name in (f"host_{kind or 'none'}", "sched"):
                if name in gpu.substitutes:
                    warnings.warn(f"profile {gpu.profile.gpu}/{gpu.profile.model} has no measured {name} term: "
                                  f"{gpu.substitutes[name]}", UserWarning, stacklevel=2)
        return gpu
    par = dep.parallel
    limit = engine.graph_max_batch(get_gpu(scenario.gpu), dep.tp, dep.max_running_requests, par.dp_ranks)
    return EngineCost(gpu, engine.terms, label=engine.label, graph_max_tokens=limit, overlap=engine.overlapped,
                      multi_step=engine.multi_step, dp_ranks=par.dp_ranks,
                      eager_prefill=eager_prefill(engine, model, par, scenario.speculation, eager_layer_s(engine, model)))


def eager_layer_s(engine, model) -> float | None:
    """The engines' fitted host time of one eager layer for ``model``'s attention kind (None: none)."""
    if engine.gpu_work is None:
        return None
    return dict(engine.gpu_work.eager_layer_s).get(attention_kind(model))


__all__ = ["scenario_cost"]
