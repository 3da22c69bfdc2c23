"""A production engine's step: the GPU's work (profile or roofline) plus the engine's host time.

The GPU part is whatever cost model the GPU and model give (kernels and graphs, scaled to
the GPU); the engine part is :class:`~dspark_sim.engines.EngineTerms`, host time that
stays the same on every GPU: the per-step scheduling the engine does not hide behind the
GPU (``engine_s``: a bias and a time per request the step works on, decoding or prefilling,
the output it handles for each: sampling, stop checks, streaming) and, for a decode step wider than the engine's CUDA graphs, the launch
floor of an eager step (``eager_s``).

An engine that runs several decode steps a schedule (vLLM 0.6's multi-step scheduling,
``multi_step``) schedules and prepares its requests once for them and processes their output
while the GPU runs the next: a decode step carries its bias and 1 / multi_step of the time per
request (a step with prompt work is scheduled alone and carries all of it).

An engine that overlaps host and GPU (``overlap``: SGLang's overlap scheduler, vLLM's
asynchronous scheduling, TensorRT-LLM's overlap scheduler) plans step n+1 and processes step
n-1's output while step n runs, so a step lasts as long as the longer of the two: its host
time shows only where it exceeds the GPU's (``engine_s`` = max(0, host - GPU)). Without
overlap the host time adds to the GPU's.

Under DP attention (``dp_ranks`` > 1) every rank runs its own scheduler over the requests dealt
to it, in parallel with the others: a step's host time per request is the busiest rank's
(``ceil(R / ranks)`` requests), its bias each rank's own.

SGLang under DP attention runs a step with prompt tokens in which some rank is idle without CUDA
graphs, on every rank (``eager_prefill``, :class:`EagerPrefill`, ``eager_s`` in the breakdown):
its prompt steps replay breakable CUDA graphs by default, but the ranks' graph vote is a minimum
over them and the prefill graph runner refuses a batch with an inactive rank, so the step's
forward is launched kernel by kernel, the host's ``forward_s`` at least. With an all-to-all MoE
backend (DeepEP, ``ep`` > 1) such a step dispatches in DeepEP's normal mode, whose dispatch hands
the tokens each expert receives back to the host: the host waits for the GPU at every MoE layer,
so the launches add to the GPU's time instead of running beside it (``serial``). With
speculative decoding the MTP module's draft pass over the prompt tokens follows the target's
forward in the same step (its layers count in ``layers``). Sources: docs/engine_defaults.md, "DP
attention: a step with prompt tokens and an idle rank runs eager".
"""
from __future__ import annotations

from dataclasses import dataclass

from dspark_sim.cost.base import CostModel, StepWork
from dspark_sim.cost.parallel import busiest_rank
from dspark_sim.engines.model import EngineTerms


@dataclass(frozen=True, slots=True)
class EagerPrefill:
    """SGLang's eager steps under DP attention (see the module docstring): ``forward_s``, the host's
    seconds to run one forward of ``layers`` layers (the target's and the MTP module's draft pass)
    eagerly at ``layer_s`` a layer; ``serial``: the host waits for the GPU at every MoE layer
    (DeepEP's normal-mode dispatch), so its time adds to the GPU's."""

    layer_s: float
    layers: int
    serial: bool

    @property
    def forward_s(self) -> float:
        return self.layer_s * self.layers

    def seconds(self, gpu_s: float) -> float:
        """What the eager launches add to a step whose GPU work takes ``gpu_s``."""
        return self.forward_s if self.serial else max(0.0, self.forward_s - gpu_s)


def eager_prefill(engine, model, parallel, speculation, layer_s: float | None) -> EagerPrefill | None:
    """:class:`EagerPrefill` of ``engine`` serving ``model`` over ``parallel`` (None: its steps keep
    their CUDA graphs, or no eager layer time is fitted for the model's kind: ``layer_s``)."""
    if engine.name != "sglang" or parallel.dp_ranks <= 1 or not layer_s:
        return None
    draft = model.mtp_layers if speculation.method != "none" and speculation.drafter == "mtp" else 0
    return EagerPrefill(layer_s, model.num_layers + draft, parallel.ep > 1)


class EngineCost:
    """:class:`CostModel` of ``gpu`` plus an engine's host terms (see the module docstring)."""

    decode_hot = None  # the decoder's decode steps after prompt steps (cost.hot): not under an engine's terms

    def __init__(self, gpu: CostModel, terms: EngineTerms, *, label: str, graph_max_tokens: int | None = None,
                 overlap: bool = False, multi_step: int = 1, dp_ranks: int = 1,
                 eager_prefill: EagerPrefill | None = None):
        self.gpu, self.terms, self.graph_max_tokens, self.label = gpu, terms, graph_max_tokens, label
        self.overlap, self.multi_step, self.dp_ranks = overlap, multi_step, dp_ranks
        self.eager_prefill = eager_prefill
        self.name = f"{gpu.name}+{label.replace(' ', '-')}"
        self.source = f"{gpu.source}; engine {label}: {terms.source}"

    def __getattr__(self, name: str):  # draft_s, the profile, the fallback: the GPU model's
        if name == "gpu":
            raise AttributeError(name)
        return getattr(self.gpu, name)

    def provenance(self) -> dict:
        """The GPU model's provenance (:mod:`dspark_sim.provenance`) with this engine named and
        its host terms in place of the decoder's."""
        block = self.gpu.provenance()
        block["engine"] = self.label
        host = {"kind": "engine", "detail": f"{self.label}'s host terms: {self.terms.source}"}
        for name in block["terms"]:
            if name.startswith("host_") or name == "sched":
                block["terms"][name] = dict(host)
        return block

    def breakdown(self, work: StepWork) -> dict[str, float]:
        """The GPU's parts plus ``engine_s`` (host scheduling) and ``eager_s`` (an eager step's floor)."""
        parts = self.gpu.breakdown(work)
        t = self.terms
        engine = eager = 0.0
        if work.verify_tokens or work.prefill_tokens:
            per_req = t.step_host_s_per_req * busiest_rank(work.decode_reqs + work.prefill_reqs, self.dp_ranks)
            if not work.prefill_reqs:  # a decode step's share of its schedule's work per request
                per_req /= self.multi_step
            engine = t.step_host_s + per_req
            limit = self.graph_max_tokens
            if limit is not None and not work.prefill_reqs and work.verify_tokens > limit and t.eager_step_s:
                eager = max(0.0, t.eager_step_s - sum(parts.values()))
            if self.eager_prefill is not None and work.prefill_tokens and work.idle_ranks:
                eager = max(eager, self.eager_prefill.seconds(sum(parts.values())))
            if self.overlap:  # hidden behind the GPU's work up to its length
                engine = max(0.0, engine - sum(parts.values()) - eager)
        parts["engine_s"] = engine
        parts["eager_s"] = eager
        return parts

    def breakdown_array(self, works) -> dict:
        """:meth:`breakdown` of N steps (the skip-ahead path, decode steps only: no eager prompt
        step): the GPU's arrays plus the engine's."""
        import numpy as np

        parts = self.gpu.breakdown_array(works)
        t = self.terms
        batch = np.asarray(works.decode_reqs) + np.asarray(works.prefill_reqs)
        batch = np.asarray(busiest_rank(batch, self.dp_ranks), dtype=float)
        size = len(works)
        has = np.broadcast_to(np.asarray(works.batch_tokens) > 0, (size,))
        per_req = t.step_host_s_per_req * np.broadcast_to(batch, (size,))
        per_req = np.where(np.broadcast_to(np.asarray(works.prefill_reqs), (size,)) == 0, per_req / self.multi_step,
                           per_req)
        engine = np.where(has, t.step_host_s + per_req, 0.0)
        eager = np.zeros(size)
        limit = self.graph_max_tokens
        if limit is not None and t.eager_step_s:
            wide = has & (np.broadcast_to(np.asarray(works.prefill_reqs), (size,)) == 0) \
                & (np.broadcast_to(np.asarray(works.verify_tokens), (size,)) > limit)
            eager = np.where(wide, np.maximum(0.0, t.eager_step_s - sum(parts.values())), 0.0)
        if self.overlap:
            engine = np.maximum(0.0, engine - sum(parts.values()) - eager)
        parts["engine_s"] = engine
        parts["eager_s"] = eager
        return parts

    def step_s(self, work: StepWork) -> float:
        """Seconds of one step: the GPU's plus the engine's."""
        return sum(self.breakdown(work).values())


__all__ = ["EagerPrefill", "EngineCost", "eager_prefill"]
