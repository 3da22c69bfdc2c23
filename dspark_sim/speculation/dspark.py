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

    survival: np.ndarray  # float64 [n], non-increasing
    forced_reqs: np.ndarray  # int64 [R]: drafts every request verifies regardless
    forced_tau: float  # expected tokens from forced drafts
    # float64 [R, W]: every request's survival past its forced drafts, where :func:`verify_lengths`
    # finds the first k pairs (None where only Theta is wanted)
    free: np.ndarray | None = None
    forced_total: int = 0  # forced_reqs summed


def candidates(survival: np.ndarray, limits: VerifyLimits) -> Candidates:
    """Sort admissible pairs; pairs below min_drafts are forced in, not sorted."""
    num_reqs, block_size = survival.shape
    max_drafts = min(limits.max_drafts, block_size)
    min_drafts = min(limits.min_drafts, max_drafts)
    free = survival[:, min_drafts:max_drafts]
    flat = free.ravel()
    # values only: which pair of equal survival comes first is verify_lengths' to say
    ordered = flat[flat >= limits.survival_eps]  # (a copy, sorted in place)
    ordered.sort()
    forced_tau = float(survival[:, :min_drafts].sum()) if min_drafts else 0.0
    return Candidates(ordered[::-1], forced_drafts(num_reqs, min_drafts), forced_tau, free, num_reqs * min_drafts)


def forced_drafts(num_reqs: int, min_drafts: int) -> np.ndarray:
    """``min_drafts`` for each of ``num_reqs`` requests, int64 [R], read-only: made once per pair
    (a batch's steps ask for the same few)."""
    key = (num_reqs, min_drafts)
    forced = _FORCED.get(key)
    if forced is None:
        if len(_FORCED) > 4096:
            _FORCED.clear()
        forced = _FORCED[key] = np.full(num_reqs, min_drafts, dtype=np.int64)
        forced.flags.writeable = False
    return forced


_FORCED: dict[tuple[int, int], np.ndarray] = {}


class SpsRows:
    """An :data:`SpsFn` that keeps, per request count and first batch-token count, the rates
    of consecutive batch-token counts, -inf past ``max_batch_tokens`` (what :func:`theta`
    multiplies: a schedule over the limit is never chosen). A batch's steps look them up
    instead of evaluating the table again."""

    def __init__(self, sps: SpsFn, max_batch_tokens: int):
        self.sps, self.max_batch_tokens = sps, max_batch_tokens
        self._rows: dict[tuple[int, int], np.ndarray] = {}

    def __call__(self, batch_tokens: np.ndarray, num_reqs: int) -> np.ndarray:
        return self.sps(batch_tokens, num_reqs)

    def row(self, num_reqs: int, first: int, length: int) -> np.ndarray:
        """Rates at ``first``, ``first + 1``, ... (``length`` of them, or more)."""
        row = self._rows.get((num_reqs, first))
        if row is None or row.size < length:
            if len(self._rows) > 4096:
                self._rows.clear()
            row = self._rows[(num_reqs, first)] = _rates(self.sps, num_reqs, first, max(length, 64),
                                                          self.max_batch_tokens)
        return row


def _rates(sps: SpsFn, num_reqs: int, first: int, length: int, max_batch_tokens: int) -> np.ndarray:
    batch_tokens = first + np.arange(length)
    rates = np.array(sps(batch_tokens, num_reqs), dtype=np.float64)
    rates[batch_tokens > max_batch_tokens] = -np.inf
    return rates


def rates_row(sps: SpsFn, num_reqs: int, first: int, length: int, limits: VerifyLimits) -> np.ndarray:
    """SPS at ``first`` .. ``first + length - 1`` batch tokens, -inf past the limit ([length] or more)."""
    if isinstance(sps, SpsRows) and sps.max_batch_tokens == limits.max_batch_tokens:
        return sps.row(num_reqs, first, length)
    return _rates(sps, num_reqs, first, length, limits.max_batch_tokens)


def theta(cands: Candidates, num_reqs: int, sps: SpsFn, limits: VerifyLimits) -> np.ndarray:
    """Predicted throughput ``tau * SPS(B)`` for admitting the first k candidates, k = 0..n
    (-inf where B passes ``limits.max_batch_tokens``)."""
    tau = np.empty(cands.survival.size + 1)
    tau[0] = 0.0
    cands.survival.cumsum(out=tau[1:])
    tau += num_reqs + cands.forced_tau
    tau *= rates_row(sps, num_reqs, num_reqs + cands.forced_total, tau.size, limits)[:tau.size]
    return tau


def verify_lengths(cands: Candidates, budget: int) -> np.ndarray:
    """1 (anchor) + forced drafts + each request's count among the first ``budget`` candidates.

    The first ``budget`` of a stable sort of the flattened pairs (request, then draft) by
    falling survival: every pair above the last one taken and, of the pairs equal to it, as
    many as fit, in request order (survival never rises along a row, so a request's count is
    a prefix of its drafts)."""
    if not budget:
        return 1 + cands.forced_reqs
    survival = cands.survival
    last = survival[budget - 1]
    ones = _ones(cands.free.shape[1])  # a row's count as a product: faster than sum(axis=1)
    if budget == survival.size or survival[budget] != last:  # every pair equal to the last is taken
        counts = (cands.free >= last) @ ones  # (mostly the last alone)
        counts += cands.forced_reqs
        counts += 1
        return counts
    above = (cands.free > last) @ ones
    tied = (cands.free == last) @ ones
    ties = budget - int(above.sum())  # taken among the pairs equal to the last
    before = np.cumsum(tied) - tied  # tied pairs of the requests before each
    return 1 + cands.forced_reqs + above + np.minimum(np.maximum(ties - before, 0), tied)


def _ones(width: int) -> np.ndarray:
    """int64 ones [width], read-only, made once per width."""
    ones = _ONES.get(width)
    if ones is None:
        ones = _ONES[width] = np.ones(width, dtype=np.int64)
        ones.flags.writeable = False
    return ones


_ONES: dict[int, np.ndarray] = {}


def _arange(size: int) -> np.ndarray:
    """int64 0 .. size - 1, read-only, made once per size."""
    values = _ARANGE.get(size)
    if values is None:
        if len(_ARANGE) > 4096:
            _ARANGE.clear()
        values = _ARANGE[size] = np.arange(size)
        values.flags.writeable = False
    return values


_ARANGE: dict[int, np.ndarray] = {}


def algorithm1(survival: np.ndarray, sps: SpsFn, limits: VerifyLimits) -> tuple[np.ndarray, int]:
    """Paper Algorithm 1: admit by survival, stop at the first admission that does not raise Theta."""
    cands = candidates(survival, limits)
    th = theta(cands, survival.shape[0], sps, limits)
    worse = np.flatnonzero(np.diff(th) <= 0)
    budget = int(worse[0]) if worse.size else cands.survival.size
    return verify_lengths(cands, budget), budget


def production_budget(lagged: Candidates, num_reqs: int, sps: SpsFn, limits: VerifyLimits) -> int:
    """Budget K: the unconstrained argmax of Theta over (lagged) candidates."""
    th = theta(lagged, num_reqs, sps, limits)
    return int(th.argmax())  # first maximum: the smallest budget among ties


def production(cands: Candidates, lagged: Candidates | None, sps: SpsFn,
               limits: VerifyLimits, tiers: tuple[int, ...] = ()) -> tuple[np.ndarray, int]:
    """Production scheduler: K from lagged candidates (None: the current ones), then top-K of
    the current candidates ``candidates(survival, limits)``."""
    num_reqs = cands.forced_reqs.size
    budget = min(production_budget(lagged or cands, num_reqs, sps, limits), cands.survival.size)
    if tiers:
        budget = pad_to_tier(budget, num_reqs + cands.forced_total, cands.survival.size, tiers,
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
    """Prefix survival probabilities from per-position confidences [..., R, block_size]."""
    return conf.cumprod(axis=-1)


# -- K steps of one batch at once (the simulator's stretches of steady decode steps) ----------
@dataclass(frozen=True, slots=True)
class Ranked:
    """:func:`candidates` of K steps of the same R requests, padded to one width W.

    Row k holds step k's candidate survivals in its first ``count[k]`` places, best first (the
    values :func:`candidates` of that step sorts).
    """

    pairs: np.ndarray | None  # float64 [K, R, W / R]: each request's candidate pairs (None: only Theta)
    survival: np.ndarray  # float64 [K, W]
    count: np.ndarray  # int64 [K]
    forced_reqs: np.ndarray  # int64 [R]
    forced_tau: np.ndarray | float  # float64 [K], or one number for every step
    forced_total: int = 0  # forced_reqs summed
    full: bool = False  # every step's count is W

    def at(self, k: int) -> Candidates:
        """Step ``k``'s :class:`Candidates`, for Theta."""
        n = int(self.count[k])
        tau = self.forced_tau if isinstance(self.forced_tau, float) else float(self.forced_tau[k])
        return Candidates(self.survival[k, :n].copy(), self.forced_reqs, tau, None, self.forced_total)


def ranked(survival: np.ndarray, limits: VerifyLimits) -> Ranked:
    """:func:`candidates` of every step of ``survival`` [K, R, block_size] in one sort."""
    steps, num_reqs, block_size = survival.shape
    max_drafts = min(limits.max_drafts, block_size)
    min_drafts = min(limits.min_drafts, max_drafts)
    pairs = survival[:, :, min_drafts:max_drafts]
    flat = pairs.reshape(steps, -1)
    ordered = flat.copy()
    ordered.sort(axis=1)
    ordered = ordered[:, ::-1]  # values only: verify_lengths_many says which of equal ones
    full = bool(flat.size) and ordered[:, -1].min() >= limits.survival_eps
    if full:
        count = np.full(steps, flat.shape[1])
    else:  # pairs below survival_eps are no candidates: they sort last
        count = (flat >= limits.survival_eps).sum(axis=1)
    # the forced pairs' sum as one step sums them (a 2-D slice of that step's survival)
    forced_tau = np.array([float(s[:, :min_drafts].sum()) for s in survival]) if min_drafts else 0.0
    return Ranked(pairs, ordered, count, forced_drafts(num_reqs, min_drafts), forced_tau,
                  num_reqs * min_drafts, full)


def theta_many(ranks: Ranked, num_reqs: int, sps: SpsFn, limits: VerifyLimits) -> np.ndarray:
    """:func:`theta` of every step, float64 [K, W + 1]; places past a step's ``count`` + 1 are -inf."""
    steps, width = ranks.survival.shape
    cum = np.empty((steps, width + 1))
    cum[:, 0] = 0.0
    ranks.survival.cumsum(axis=1, out=cum[:, 1:])
    tau = num_reqs + ranks.forced_tau
    cum += tau if isinstance(tau, float) else tau[:, None]
    first = num_reqs + ranks.forced_total
    cum *= rates_row(sps, num_reqs, first, width + 1, limits)[:width + 1]
    if not ranks.full and ranks.count.min() < width:
        cum[_arange(width + 1) > ranks.count[:, None]] = -np.inf
    return cum


def verify_lengths_many(ranks: Ranked, budget: np.ndarray) -> np.ndarray:
    """:func:`verify_lengths` of every step, int64 [K, R]: each request's pairs above the step's
    ``budget``-th survival, and of the pairs equal to it as many as fit, in request order."""
    steps, num_reqs, width = ranks.pairs.shape
    last = ranks.survival[_arange(steps), budget - 1]  # (a budget of 0 reads the last place: none taken)
    if not budget.all():
        last[budget == 0] = np.inf
    last = last[:, None, None]
    ones = _ones(width)  # a row's count as a product: faster than sum(axis=-1)
    counts = (ranks.pairs >= last) @ ones
    if (counts.sum(axis=1) != budget).any():  # more pairs equal to the last than fit (mostly: the last alone)
        counts = (ranks.pairs > last) @ ones
        tied = ranks.pairs == last
        ties = budget - counts.sum(axis=1)  # taken among the pairs equal to the last, per step
        order = tied.reshape(steps, -1).cumsum(axis=1).reshape(tied.shape)  # in request order
        counts += (tied & (order <= ties[:, None, None])) @ ones
    if ranks.forced_total:
        counts += ranks.forced_reqs
    counts += 1
    return counts


def algorithm1_many(survival: np.ndarray, sps: SpsFn, limits: VerifyLimits) -> tuple[np.ndarray, np.ndarray]:
    """:func:`algorithm1` of every step of ``survival`` [K, R, block_size]: ([K, R], [K])."""
    ranks = ranked(survival, limits)
    th = theta_many(ranks, survival.shape[1], sps, limits)
    steps, width = ranks.survival.shape
    worse = np.ones((steps, width + 1), dtype=bool)  # a step with no worse admission takes all
    with np.errstate(invalid="ignore"):  # -inf - -inf past a step's count, masked below
        rises = np.diff(th, axis=1) > 0
    worse[:, :width] = ~rises | (np.arange(width) >= ranks.count[:, None])
    budget = worse.argmax(axis=1)
    return verify_lengths_many(ranks, budget), budget


def production_many(ranks: Ranked, held: list[Candidates], lag: int, sps: SpsFn, limits: VerifyLimits,
                    tiers: tuple[int, ...] = (), held_best: list[tuple[int, int] | None] | None = None
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`production` of every step, each budget from the candidates ``lag`` steps before
    (``held``: those of the steps before these, oldest first, at most ``lag``; fewer while
    warming up, when the oldest there is serves, or the step's own when there is none):
    (verify lengths [K, R], budgets [K], :func:`production_budget` of each step's own candidates
    [K], in one evaluation). ``held_best``: beside each of ``held``, (requests, budget) where its
    budget for that many requests is known, else None; those not known are evaluated one by one."""
    num_reqs, steps, kept = ranks.forced_reqs.size, ranks.count.size, len(held)
    best = theta_many(ranks, num_reqs, sps, limits).argmax(axis=1)  # the steps' own budgets
    budget = np.empty(steps, dtype=np.int64)
    if steps > lag:
        budget[lag:] = best[:steps - lag]  # from these steps' own candidates
    found: dict[int, int] = {}
    for k in range(min(lag, steps)):  # from the steps before these (or, warming up, the first)
        i = max(0, kept + k - lag)  # in held + these steps
        if i >= kept:
            budget[k] = best[i - kept]
            continue
        known = held_best[i] if held_best is not None else None
        if known is not None and known[0] == num_reqs:
            budget[k] = known[1]
            continue
        if i not in found:  # (warming up, several steps read the oldest)
            found[i] = production_budget(held[i], num_reqs, sps, limits)
        budget[k] = found[i]
    budget = np.minimum(budget, ranks.count)
    if tiers:
        base = num_reqs + ranks.forced_total
        tokens = base + budget
        tier = np.searchsorted(tiers, tokens)
        above = tier == len(tiers)
        target = np.minimum(np.asarray(tiers + (0,))[tier], limits.max_batch_tokens)
        grown = budget + np.maximum(0, np.minimum(target - tokens, ranks.count - budget))
        budget = np.where(above, budget, grown)
    return verify_lengths_many(ranks, budget), budget, best
