"""Data-parallel attention ranks inside one replica: whose requests a step prefills and decodes.

Under DP attention (SGLang ``--enable-dp-attention``) the replica's ``tp`` GPUs each run a
scheduler of their own over the requests dealt to them, round robin in arrival order
(``load_balance_method`` round_robin), and the ranks step together: the MoE layers exchange
every rank's tokens, so a step lasts as long as its busiest rank. Each rank plans its own batch:

* its prefill takes at most ``chunked_prefill_size / ranks`` tokens a step (SGLang divides the
  chunk among the attention ranks), from its own requests in admission order;
* without mixed chunks (SGLang's default) a rank that prefills does not decode in that step,
  while the other ranks decode beside it;
* with speculative decoding SGLang keeps prefill and decode out of one step across the ranks
  (``apart``): when any rank prefills, the others run idle batches, and no rank decodes until
  every rank's prompts are in (engines DEFAULT_SOURCES' "DP attention with speculative decoding").

The replica keeps one table of requests; a request's rank is its arrival index modulo the ranks
(:func:`rank_of`), and :func:`rank_prefill` plans the ranks' prefill chunks of one step. The
busiest rank's tokens go to the cost model (``StepWork.rank_tokens``): the attention side of a
step (its projections and attention, whose weights every rank holds whole) waits for them, and
:func:`idle_ranks` counts the ranks with nothing to do in a step with prompt tokens (SGLang runs
such a step eagerly on every rank: :class:`~dspark_sim.engines.step_cost.EngineCost`).
"""
from __future__ import annotations

import numpy as np


def rank_of(rids: np.ndarray, ranks: int) -> np.ndarray:
    """The attention rank each request was dealt to (round robin in arrival order)."""
    return rids % ranks


def rank_prefill(rank: np.ndarray, rem: np.ndarray, ranks: int, cap: int) -> tuple[np.ndarray, np.ndarray]:
    """``(chunk, per_rank)``: the prompt tokens each prefilling request gets this step (``rem`` its
    tokens left, ``rank`` its rank, both in admission order) when every rank takes at most ``cap``
    tokens of its own requests in order, and the prompt tokens each rank prefills."""
    chunk = np.zeros_like(rem)
    per_rank = np.zeros(ranks, dtype=np.int64)
    for r in np.unique(rank).tolist():
        mine = rank == r
        left = rem[mine]
        take = np.minimum(np.maximum(cap - (np.cumsum(left) - left), 0), left)
        chunk[mine] = take
        per_rank[r] = int(take.sum())
    return chunk, per_rank


def rank_decoders(decoding: np.ndarray, rank: np.ndarray, per_rank_prefill: np.ndarray, apart: bool) -> np.ndarray:
    """Indices of the requests that decode beside the step's prefill chunks (``decoding`` the
    running requests done prefilling, ``rank`` their ranks, ``per_rank_prefill`` each rank's prompt
    tokens this step): those of the ranks that do not prefill, or none when the ranks keep prefill
    and decode ``apart``."""
    if apart and per_rank_prefill.any():
        return np.zeros(0, dtype=np.intp)
    return (decoding & (per_rank_prefill == 0)[rank]).nonzero()[0]


def busiest_rank_tokens(per_rank_prefill: np.ndarray, dec_rank: np.ndarray, verify_per_row: float) -> int:
    """Tokens of the step's busiest rank: its prompt tokens and its decoding rows' verify tokens
    (``verify_per_row`` each, the step's mean)."""
    decode = np.bincount(dec_rank, minlength=per_rank_prefill.size) * verify_per_row
    return int(np.ceil((per_rank_prefill + decode).max())) if per_rank_prefill.size else 0


def idle_ranks(per_rank_prefill: np.ndarray, dec_rank: np.ndarray) -> int:
    """Ranks with no tokens in the step: no prompt tokens (``per_rank_prefill``) and no decoding
    row (``dec_rank``, the decoding rows' ranks)."""
    busy = per_rank_prefill > 0
    busy[dec_rank] = True
    return int(busy.size - np.count_nonzero(busy))


__all__ = ["busiest_rank_tokens", "idle_ranks", "rank_decoders", "rank_of", "rank_prefill"]
