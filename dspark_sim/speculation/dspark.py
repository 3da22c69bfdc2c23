"""DSpark's verify schedulers over a batch, in numpy (DSPARK.md section 3).

Survival ``a[r, j] = c[r, 1] * ... * c[r, j+1]`` (j counts drafts from 0) never
increases along a row, so admitting (r, j) pairs in descending survival order
respects prefix order. Verify lengths count the anchor, as SGLang does.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

# steps per second of the target at each batch-token count, for a batch of num_reqs
SpsFn = Callable[[np.ndarray, int], np.ndarray]


@dataclass(frozen=True, slots=True)
class VerifyLimits:
    """Per-request clamps: drafts verified lie in [min_drafts, max_drafts]."""

    min_drafts: int = 0
    max_drafts: int = 7
    survival_eps: float = 1e-6
    max_batch_tokens: int = 1 << 30


@dataclass(frozen=True, slots=True)
class Candidates:
    """The admissible (request, draft) pairs of a batch, best survival first."""

    rows: np.ndarray  # int64 [n]
    survival: np.ndarray  # float64 [n], non-increasing
    forced_reqs: np.ndarray  # int64 [R]: drafts every request verifies regardless
    forced_tau: float  # expected tokens from forced drafts


def candidates(survival: np.ndarray, limits: VerifyLimits) -> Candidates:
    """Sort admissible pairs; pairs below min_drafts are forced in, not sorted."""
    num_reqs, block_size = survival.shape
    max_drafts = min(limits.max_drafts, block_size)
    min_drafts = min(limits.min_drafts, max_drafts)
    forced = survival[:, :min_drafts]
    free = survival[:, min_drafts:max_drafts]
    flat = free.ravel()
    keep = np.flatnonzero(flat >= limits.survival_eps)
    # stable sort on -a: ties keep flattened order (r, then j), so prefixes hold
    order = keep[np.argsort(-flat[keep], kind="stable")]
    width = max_drafts - min_drafts
    rows = order // width if width else order
    return Candidates(rows.astype(np.int64), flat[order],
                      np.full(num_reqs, min_drafts, dtype=np.int64), float(forced.sum()))


def theta(cands: Candidates, num_reqs: int, sps: SpsFn, limits: VerifyLimits) -> np.ndarray:
    """Predicted throughput ``tau * SPS(B)`` for admitting the first k candidates, k = 0..n."""
    tau = num_reqs + cands.forced_tau + np.concatenate(([0.0], np.cumsum(cands.survival)))
    batch_tokens = num_reqs + int(cands.forced_reqs.sum()) + np.arange(tau.size)
    out = tau * sps(batch_tokens, num_reqs)
    out[batch_tokens > limits.max_batch_tokens] = -np.inf
    return out


def verify_lengths(cands: Candidates, budget: int) -> np.ndarray:
    """1 (anchor) + forced drafts + each request's count among the first ``budget`` candidates."""
    counts = np.bincount(cands.rows[:budget], minlength=cands.forced_reqs.size)
    return 1 + cands.forced_reqs + counts


def algorithm1(survival: np.ndarray, sps: SpsFn, limits: VerifyLimits) -> tuple[np.ndarray, int]:
    """Paper Algorithm 1: admit by survival, stop at the first admission that does not raise Theta."""
    cands = candidates(survival, limits)
    th = theta(cands, survival.shape[0], sps, limits)
    worse = np.flatnonzero(np.diff(th) <= 0)
    budget = int(worse[0]) if worse.size else cands.rows.size
    return verify_lengths(cands, budget), budget


def production_budget(lagged: Candidates, num_reqs: int, sps: SpsFn, limits: VerifyLimits) -> int:
    """Budget K: the unconstrained argmax of Theta over (lagged) candidates."""
    th = theta(lagged, num_reqs, sps, limits)
    return int(np.argmax(th))  # first maximum: the smallest budget among ties


def production(cands: Candidates, lagged: Candidates | None, sps: SpsFn,
               limits: VerifyLimits, tiers: tuple[int, ...] = ()) -> tuple[np.ndarray, int]:
    """Production scheduler: K from lagged candidates (None: the current ones), then top-K of
    the current candidates ``candidates(survival, limits)``."""
    num_reqs = cands.forced_reqs.size
    budget = min(production_budget(lagged or cands, num_reqs, sps, limits), cands.rows.size)
    if tiers:
        budget = pad_to_tier(budget, num_reqs + int(cands.forced_reqs.sum()), cands.rows.size, tiers,
                             limits.max_batch_tokens)
    return verify_lengths(cands, budget), budget


def pad_to_tier(budget: int, base_tokens: int, available: int, tiers: tuple[int, ...],
                max_batch_tokens: int) -> int:
    """Grow the budget up to the next captured CUDA-graph token tier (free tokens)."""
    tokens = base_tokens + budget
    i = int(np.searchsorted(tiers, tokens))
    if i == len(tiers):
        return budget
    target = min(tiers[i], max_batch_tokens)
    return budget + max(0, min(target - tokens, available - budget))


def survival_of(conf: np.ndarray) -> np.ndarray:
    """Prefix survival probabilities from per-position confidences [R, block_size]."""
    return np.cumprod(conf, axis=1)
