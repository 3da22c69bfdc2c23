"""Mixture-of-experts work of one step: experts touched, their bytes, grouped-GEMM FLOPs.

A step's ``T`` tokens each pick ``k`` of ``E`` experts. Expert ``e`` is chosen by one
token with probability ``q_e = min(1, k p_e)``, where the popularity ``p_e`` is
uniform by default and Zipf-like with a ``skew`` s > 0 (``p_e`` proportional to
``rank^-s``); it is read from memory when at least one token picks it, so a step
reads ``sum_e 1 - (1 - q_e)^T`` experts' weights. The grouped GEMM runs ``T k``
token rows through routed experts (plus ``T`` through each shared expert).

Under expert parallelism the experts are spread over ``ep`` GPUs round-robin by
popularity (what a load balancer such as DeepSeek's EPLB approaches); the step
waits for the most loaded GPU, ``imbalance`` times the mean load (1 when uniform).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np


@dataclass(frozen=True, slots=True)
class Routing:
    """How tokens spread over experts: ``skew`` 0 is uniform (the default)."""

    skew: float = 0.0

    def __post_init__(self) -> None:
        if not (isinstance(self.skew, (int, float)) and 0.0 <= self.skew <= 4.0):
            raise ValueError(f"routing skew must lie in [0, 4], got {self.skew!r}")


@lru_cache(maxsize=64)
def _pick_probs(experts: int, k: int, skew: float) -> np.ndarray:
    """``q_e``: the chance one token picks expert e, by popularity rank, float64 [E]."""
    pop = np.arange(1, experts + 1, dtype=np.float64) ** -skew
    return np.minimum(1.0, k * pop / pop.sum())


def expected_experts(experts: int, k: int, tokens: float, routing: Routing = Routing()) -> float:
    """Expected distinct experts ``tokens`` tokens pick, each choosing ``k`` of ``experts``."""
    if tokens <= 0:
        return 0.0
    if routing.skew == 0.0:  # closed form, the common case on the engine's hot path
        return experts * (1.0 - (1.0 - k / experts) ** tokens)
    q = _pick_probs(experts, k, float(routing.skew))
    return float(np.sum(1.0 - (1.0 - q) ** tokens))


def imbalance(experts: int, k: int, ep: int, routing: Routing = Routing()) -> float:
    """Load of the busiest of ``ep`` GPUs over the mean load (>= 1; 1 when uniform)."""
    if ep <= 1 or routing.skew == 0.0:
        return 1.0
    q = _pick_probs(experts, k, float(routing.skew))
    loads = np.array([q[g::ep].sum() for g in range(ep)])
    return float(loads.max() / loads.mean())


def expert_flops(model, tokens: float) -> float:
    """FLOPs of the MoE layers' expert GEMMs over ``tokens`` tokens (gate, up, down;
    routed ``k`` per token plus the shared experts)."""
    rows = model.experts_per_token + model.num_shared_experts
    return 2.0 * 3 * model.hidden_size * model.moe_intermediate_size * rows * tokens * model.num_moe_layers


__all__ = ["Routing", "expected_experts", "imbalance", "expert_flops"]
