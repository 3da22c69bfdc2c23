"""A production engine's step: the GPU's work (profile or roofline) plus the engine's host time.

The GPU part is whatever cost model the GPU and model give (kernels and graphs, scaled to
the GPU); the engine part is :class:`~dspark_sim.engines.EngineTerms`, host time that
stays the same on every GPU: the per-step scheduling the engine does not hide behind the
GPU (``engine_s``) and, for a decode step wider than the engine's CUDA graphs, the launch
floor of an eager step (``eager_s``).
"""
from __future__ import annotations

from dspark_sim.cost.base import CostModel, StepWork
from dspark_sim.engines import EngineTerms


class EngineCost:
    """:class:`CostModel` of ``gpu`` plus an engine's host terms (see the module docstring)."""

    def __init__(self, gpu: CostModel, terms: EngineTerms, *, label: str, graph_max_tokens: int | None = None):
        self.gpu, self.terms, self.graph_max_tokens = gpu, terms, graph_max_tokens
        self.name = f"{gpu.name}+{label.replace(' ', '-')}"
        self.source = f"{gpu.source}; engine {label}: {terms.source}"

    def __getattr__(self, name: str):  # draft_s, the profile, the fallback: the GPU model's
        if name == "gpu":
            raise AttributeError(name)
        return getattr(self.gpu, name)

    def breakdown(self, work: StepWork) -> dict[str, float]:
        """The GPU's parts plus ``engine_s`` (host scheduling) and ``eager_s`` (an eager step's floor)."""
        parts = self.gpu.breakdown(work)
        t = self.terms
        engine = eager = 0.0
        if work.verify_tokens or work.prefill_tokens:
            running = work.running_reqs or work.decode_reqs + work.prefill_reqs
            engine = t.step_host_s + t.step_host_s_per_req * running
            limit = self.graph_max_tokens
            if limit is not None and not work.prefill_reqs and work.verify_tokens > limit and t.eager_step_s:
                eager = max(0.0, t.eager_step_s - sum(parts.values()))
        parts["engine_s"] = engine
        parts["eager_s"] = eager
        return parts

    def breakdown_array(self, works) -> dict:
        """:meth:`breakdown` of N steps (the skip-ahead path): the GPU's arrays plus the engine's."""
        import numpy as np

        parts = self.gpu.breakdown_array(works)
        t = self.terms
        dec = np.asarray(works.decode_reqs, dtype=float)
        running = np.asarray(works.running_reqs, dtype=float) if np.any(works.running_reqs) \
            else dec + np.asarray(works.prefill_reqs, dtype=float)
        size = len(works)
        has = np.broadcast_to(np.asarray(works.batch_tokens) > 0, (size,))
        engine = np.where(has, t.step_host_s + t.step_host_s_per_req * np.broadcast_to(running, (size,)), 0.0)
        eager = np.zeros(size)
        limit = self.graph_max_tokens
        if limit is not None and t.eager_step_s:
            wide = has & (np.broadcast_to(np.asarray(works.prefill_reqs), (size,)) == 0) \
                & (np.broadcast_to(np.asarray(works.verify_tokens), (size,)) > limit)
            eager = np.where(wide, np.maximum(0.0, t.eager_step_s - sum(parts.values())), 0.0)
        parts["engine_s"] = engine
        parts["eager_s"] = eager
        return parts

    def step_s(self, work: StepWork) -> float:
        """Seconds of one step: the GPU's plus the engine's."""
        return sum(self.breakdown(work).values())


__all__ = ["EngineCost"]
