"""One engine step of a replica, planned: who decodes and prefills, what it costs.

:func:`plan_step` reads a replica as :func:`~dspark_sim.serving.stretch.plan_stretch` does (its
running table, policy, step in flight, :meth:`~dspark_sim.serving.replica.Replica.kv_needed`
and cost model); the replica applies what either planned.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dspark_sim.cost.base import DraftWork, StepWork
from dspark_sim.serving.inflight import Ghosts, planned_rows
from dspark_sim.serving.ranks import busiest_rank_tokens, idle_ranks, rank_decoders, rank_of, rank_prefill


@dataclass(frozen=True, slots=True)
class PlannedStep:
    """One engine step as the replica plans it: who decodes and prefills, what it costs.

    ``dec``: the decoding requests (a slice or indices into the running table); ``pre``: the
    prefilling ones (indices; None: none) and their ``chunk`` of tokens; ``verify_len [R]`` and
    ``p_true [R, drafts]`` of the decoding requests (None without drafts); ``ahead``: the step
    drawn with the stretch before, where the step took it (:class:`~.draw.Ahead`);
    ``kv_needed``: the KV tokens the step holds; ``work``: its
    :class:`~dspark_sim.cost.base.StepWork`, priced ``step_s`` (of which ``draft_s`` and
    ``sched_s``); ``evicted_blocks``: prefix-cache blocks evicted to make room for it.
    """

    dec: slice | np.ndarray
    pre: np.ndarray | None
    num_dec: int
    chunk: np.ndarray | None
    verify_len: np.ndarray | None
    p_true: np.ndarray | None
    ahead: object | None
    budget: int
    tokens: int
    prefill_tokens: int
    kv_needed: int
    step_s: float
    draft_s: float
    sched_s: float
    start_s: float
    work: StepWork
    evicted_blocks: int = 0

    @property
    def verify_tokens(self) -> int:
        """Target tokens of the decode rows (their anchors included)."""
        return self.tokens - self.prefill_tokens


def plan_step(rep, ghosts: Ghosts | None, ahead) -> PlannedStep:
    """Replica ``rep``'s next step: decode requests first (their verify tokens; in a decoding step,
    beside them the ``ghosts`` the step in flight finished, :mod:`.inflight`, or the step
    ``ahead`` drawn with the stretch before), then prefill chunks in admission order, within the
    batch's token budget less every decoding request's whole window."""
    c, n = rep.running.cols, rep.running.n
    kv = rep.kv_tokens()
    left = c.prefill_len[:n] - c.prefilled[:n]
    pre = (left > 0).nonzero()[0]
    # slices where they serve (cheaper than index arrays)
    if not pre.size:
        dec, pre, num_dec = slice(0, n), None, n
    else:
        num_dec = n - pre.size
        # prompts prefill in admission order, so the requests still prefilling mostly come last
        dec = slice(0, num_dec) if pre[0] == num_dec else (left <= 0).nonzero()[0]
        if rep.prefill_first:
            dec, num_dec = slice(0, 0), 0  # decoding requests wait while prompts are prefilled
    ranked = rank = None
    if pre is not None and rep.ranks > 1:  # DP attention: each rank its own prompts (:mod:`.ranks`)
        rank = rank_of(c.rid[:n], rep.ranks)
        ranked = rank_prefill(rank[pre], left[pre], rep.ranks, rep.rank_cap)
        if rep.prefill_first:  # a rank that prefills does not decode; the other ranks do, unless kept apart
            dec = rank_decoders(left <= 0, rank, ranked[1], rep.ranks_prefill_apart)
            num_dec = dec.size
    d, ahead = planned_rows(rep, c, dec, num_dec, kv[dec], ghosts, ahead)  # (dec indexes the first n rows)
    prefill_tokens, chunk, attn2, prefill_reqs, longest = 0, None, 0.0, 0, 0
    if ranked is not None:
        chunk = ranked[0]
        prefill_tokens, prefill_reqs = int(chunk.sum()), int(np.count_nonzero(chunk))
        longest = int(chunk.max()) if prefill_tokens else 0
    elif pre is not None:
        # a decoding row takes its whole window from the budget: its drafts are scheduled
        # before their verify lengths are known (the decoder, vLLM's spec tokens)
        room = max(0, min(rep.max_tokens - d.count * (d.drafts + 1), rep.prefill_cap))
        chunk, prefill_tokens, prefill_reqs, longest = _chunks(left[pre].tolist(), room)
    if pre is not None:
        attn2 = float((chunk * (c.prefilled[pre] + chunk / 2.0)).sum())
    dec_ctx = int(d.kv_tokens.sum())
    draft = DraftWork(rep.policy.draft_kind, d.count, d.drafts, dec_ctx) if d.drafts else None
    busiest = busiest_rank_tokens(ranked[1], rank[dec], d.verify_tokens / max(d.count, 1)) if ranked else 0
    work = StepWork(d.count, d.verify_tokens, dec_ctx, prefill_tokens, prefill_reqs, attn2, draft,
                    int(d.kv_tokens.max()) if num_dec else 0, n, busiest,
                    rep.prefix.repeat_tokens if num_dec else 0, idle_ranks(ranked[1], rank[dec]) if ranked else 0,
                    prefill_duty=rep.duty.at(rep.clock_s) if prefill_tokens or rep.decode_hot else 0.0,
                    prefill_longest=longest)
    parts = rep.ctx.cost.breakdown(work)
    held = int(kv.sum()) + (int(ghosts.kv_tokens.sum()) if ghosts and num_dec else 0)
    return PlannedStep(dec, pre, num_dec, chunk, d.verify_len, d.p_true, ahead, d.budget,
                       d.verify_tokens + prefill_tokens, prefill_tokens,
                       rep.kv_needed(held, d.verify_tokens + prefill_tokens, n), sum(parts.values()),
                       parts.get("draft_s", 0.0), parts.get("sched_s", 0.0), rep.clock_s, work)


def _chunks(remaining: list[int], room: int) -> tuple[np.ndarray, int, int, int]:
    """Prompt chunks in admission order within ``room`` tokens, each at most what its request has
    ``remaining`` (every number > 0): ``(chunks int64 [P], their tokens, the requests with a
    chunk, the longest)``. In Python numbers: a step prefills a few requests of the many waiting
    to, once the room is spent the rest get none, and numpy's calls would cost more."""
    chunks, free = [], room
    for rem in remaining:
        if free <= 0:
            break
        chunks.append(min(free, rem))
        free -= rem
    tokens, count, longest = sum(chunks), len(chunks), max(chunks, default=0)
    chunks += [0] * (len(remaining) - count)
    return np.array(chunks, dtype=np.int64), tokens, count, longest
