"""Skip-ahead: a stretch of steady decode steps of one replica, advanced in one go.

Between the events that change a replica's batch (an arrival it may admit, a request
finishing, a prefill chunk, a preemption, the KV cache running out), every step decodes
the same requests. :func:`plan_stretch` advances up to K such steps at once: one draw of
the random words K steps would take one after another (so the streams stay those of
step-by-step mode), the acceptance and confidences of all K steps in one call, the
policy's verify lengths for all K (the production scheduler's lagged budget included: the
confidences never depend on acceptance), the accepted drafts, and the K steps priced by
one vectorised cost call. It stops at the first step that finishes a request, that starts
at or after the next arrival, that the KV cache cannot hold or that would evict prefix-cache
blocks; the random stream is set
back to where the steps taken leave it. Without drafts (nothing random) and with nobody
waiting, a finish changes nothing but the batch size, and the stretch runs on past it.
A stretch may also start with the step that prefills requests just admitted
(:class:`FirstPrefill`), where their whole prompts fit in it: after it they decode like the
rest. The numbers are those of step-by-step mode, bit for bit.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from dspark_sim.cost.base import DraftWork, StepWork, StepWorks

MAX_STEPS = 512  # steps drawn at once, at most
MAX_DRAWS = 1 << 17  # request-positions drawn at once, at most (K * R * max(block_size, 1))
_PERIOD = 1 << 128  # of PCG64, numpy's default bit generator (a replica's)


@dataclass(frozen=True)
class FirstPrefill:
    """The prompt work of a stretch's first step: requests admitted into it whose whole prefill
    fits in it (they emit their first token at its end and decode from the next step)."""

    rows: np.ndarray  # bool [R]: the prefilling requests
    tokens: int  # prompt tokens the step prefills
    attn_tokens2: float  # their attention pairs (steps.csv's prefill_attn_tokens2)
    work: StepWork  # the step's work
    parts: dict  # its cost breakdown (the scalar path's)
    kv_tokens: int  # KV tokens it needs
    draw: _FirstDraw | None = None  # its decoding requests' drafts (None: no drafts)

    @property
    def reqs(self) -> int:
        return int(self.rows.sum())


@dataclass(frozen=True)
class Stretch:
    """K decode steps that run back to back: arrays by step, then by request (the R requests
    running when it starts, in the batch's order)."""

    times_s: np.ndarray  # float64 [K + 1]: step k starts at times_s[k] and ends at times_s[k + 1]
    step_s: np.ndarray  # float64 [K]
    draft_s: np.ndarray  # float64 [K]
    sched_s: np.ndarray  # float64 [K]
    decode_reqs: np.ndarray  # int64 [K]: requests decoding in the step (all running)
    verify_tokens: np.ndarray  # int64 [K]
    budget: np.ndarray  # int64 [K]
    emitted: np.ndarray  # int64 [K]: tokens the step emitted (capped at the requests' outputs)
    context_tokens: np.ndarray  # int64 [K]: KV tokens of the decoding requests when the step starts
    max_context: np.ndarray  # int64 [K]
    kv_tokens: np.ndarray  # int64 [K]: KV tokens each step needs (steps.csv's kv_tokens)
    generated: np.ndarray  # int64 [R]: tokens generated after the stretch
    steps_run: np.ndarray | int  # steps each request decoded ([R], or K for all)
    accepted: np.ndarray | None = None  # int64 [R]: drafts accepted in the stretch (None: no drafts)
    verified: np.ndarray | None = None  # int64 [R]: drafts verified in the stretch
    prefill: FirstPrefill | None = None  # the first step's prompt work, where it has some

    @property
    def steps(self) -> int:
        return self.step_s.size

    @property
    def end_s(self) -> float:
        return float(self.times_s[-1])

    @property
    def kv_peak(self) -> int:
        """The most KV tokens a step needs."""
        return int(self.kv_tokens.max())


def plan_stretch(rep, stop_s: float, tokens_per_step: float, prefill: FirstPrefill | None = None) -> Stretch | None:
    """The steady decode steps replica ``rep`` runs from now, or None where there are fewer
    than two (the step-by-step path takes them).

    Every running request decodes, or (``prefill``) prefills its whole prompt in the first step
    and decodes after it, and none can be admitted (the caller checks). ``stop_s``: the next
    arrival (a step starting at or after it is not taken); ``tokens_per_step``: the tokens a
    request emitted per step so far, to guess how far to draw.
    """
    c, n = rep.running.cols, rep.running.n
    generated = c["generated"][:n]
    left = c["output_tokens"][:n] - generated
    kv0 = c["prefilled"][:n] + generated - c["kv_base"][:n]
    block_size = rep.policy.block_size_for(n)
    if prefill is not None and prefill.draw is not None:
        return _after_prefill(rep, n, block_size, left, kv0, generated, stop_s, tokens_per_step, prefill)
    if block_size:
        return _drafting(rep, n, block_size, left, kv0, generated, stop_s, tokens_per_step)
    if prefill is not None:  # from the first step's end its requests hold their prompts
        kv0 = kv0 + (c["prefill_len"][:n] - c["prefilled"][:n])
    # Without drafts nothing is random: a request emits a token a step. Without speculation at
    # all, a finish only shrinks the batch, unless it frees room for a waiting request.
    # A finishing request that references prefix-cache blocks changes the KV they hold: stop there.
    past_finishes = (rep.ctx.acceptance is None and not rep.waiting
                     and (rep.prefix is None or not rep.prefix.chains))
    last = int(left.max() if past_finishes else left.min())
    steps = _steps_to_draw(last, stop_s - rep.clock_s, rep.decode_step_s, 1.0, n, 0)
    if steps < 2:
        return None
    k = np.arange(steps)[:, None]
    if past_finishes:  # a request emits a token in each step from step 0 to step left - 1
        live = k < left
        decode = live.sum(axis=1)
        kv = (kv0 + k) * live
    else:
        decode = np.full(steps, n)
        kv = kv0 + k
    running = decode
    if prefill is not None:  # the first step: its prefilling requests' KV is their prompts'
        running = decode.copy()
        decode[0] -= prefill.reqs
        kv[0] = np.where(prefill.rows, 0, kv[0])
    taken = min(steps, last)
    st = _finish(rep, steps, taken, decode, kv, decode, np.zeros(steps, dtype=np.int64), 0, stop_s,
                 left if past_finishes else None, running, prefill)
    if st is None:
        return None
    times, taken, step_s, parts, kv_tokens, context, max_context = st
    run = np.minimum(left, taken) if past_finishes else taken
    return Stretch(times, step_s, parts["draft_s"], parts["sched_s"], decode[:taken], decode[:taken],
                   np.zeros(taken, dtype=np.int64), decode[:taken], context, max_context, kv_tokens,
                   generated + run, run, prefill=prefill)


def first_prefill(rep, pending: np.ndarray) -> FirstPrefill | None:
    """The next step's prompt work as a stretch's first step (``pending``: bool [R], the requests
    still prefilling), or None where it cannot be one: an engine that tracks steps one by one
    (prefill first, multi-step schedules, a shrinking KV reservation, prefix-cache
    references), a prefill resumed after a preemption, prompts that do not all end in this
    step, or (with drafts) a drafter whose block differs from the next steps' or a step the KV
    cache cannot hold. Drawn, planned and priced as :meth:`Replica._schedule` does it; with
    drafts the step is then taken whatever follows (its random words and plan are spent)."""
    if (rep.prefill_first or rep.multi_step > 1 or rep.reserve is not None
            or (rep.prefix is not None and rep.prefix.chains)):
        return None
    c, n = rep.running.cols, rep.running.n
    pre = np.flatnonzero(pending)
    generated = c["generated"][:n]
    if generated[pre].any():
        return None
    dec = np.flatnonzero(~pending)
    drafts = rep.policy.block_size_for(dec.size) if dec.size else 0
    if rep.ctx.acceptance is not None and not (drafts and drafts == rep.policy.block_size_for(n)):
        return None
    draw = _FirstDraw(rep, dec, drafts) if drafts else None
    verify_tokens = draw.verify_tokens if draw is not None else dec.size
    rem = c["prefill_len"][:n][pre] - c["prefilled"][:n][pre]
    room = max(0, min(rep.max_tokens - verify_tokens, rep.prefill_cap))
    chunk = np.minimum(np.maximum(room - (np.cumsum(rem) - rem), 0), rem)  # as replica._schedule
    prefill_tokens = int(chunk.sum())
    kv = c["prefilled"][:n] + generated - c["kv_base"][:n]
    kv_needed = int(kv.sum()) + n * rep.kv_per_request + verify_tokens + prefill_tokens + rep._kv_adjust()
    if (chunk < rem).any() or (draw is not None and (kv_needed > rep.kv_capacity or (
            rep.prefix is not None and kv_needed + rep.prefix.idle_tokens > rep.kv_capacity))):
        if draw is not None:
            draw.undo()
        return None
    attn2 = float((chunk * (c["prefilled"][:n][pre] + chunk / 2.0)).sum())
    dec_kv = kv[dec]
    dec_ctx = int(dec_kv.sum())
    work = StepWork(dec.size, verify_tokens, dec_ctx, prefill_tokens, int(np.count_nonzero(chunk)), attn2,
                    DraftWork(rep.policy.draft_kind, dec.size, drafts, dec_ctx) if drafts else None,
                    int(dec_kv.max()) if dec.size else 0, n)
    return FirstPrefill(pending, prefill_tokens, attn2, work, rep.ctx.cost.breakdown(work), kv_needed, draw)


def _after_prefill(rep, n: int, block_size: int, left, kv0, generated, stop_s: float, tokens_per_step: float,
                   prefill: FirstPrefill) -> Stretch:
    """A stretch with drafts whose first step prefills (drawn and priced already, so taken even
    alone): that step, then steady steps up to the first finish."""
    draw = prefill.draw
    rep.policy.commit(1)
    rows = prefill.rows
    dec = np.flatnonzero(~rows)
    accepted, verified = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
    accepted[dec] = draw.accepted
    verified[dec] = draw.verify_len - 1
    emitted = np.minimum(accepted + 1, left)  # a prefilled request emits its first token
    c = rep.running.cols
    s0 = sum(prefill.parts.values())
    t1 = rep.clock_s + s0
    left1 = left - emitted
    rest = None
    if left1.min() > 0 and t1 < stop_s:  # nothing finished, nothing arrived: steady steps follow
        kv1 = kv0 + (c["prefill_len"][:n] - c["prefilled"][:n]) + emitted
        rest = _drafting(rep, n, block_size, left1, kv1, generated + emitted, stop_s, tokens_per_step, t1)
    if rest is None:  # the first step alone
        none, zeros = np.zeros(0, dtype=np.int64), np.zeros(n, dtype=np.int64)
        rest = Stretch(np.array([t1]), np.zeros(0), np.zeros(0), np.zeros(0), none, none, none, none, none, none,
                       none, generated + emitted, 0, zeros, zeros)
    parts = prefill.parts
    work = prefill.work
    return Stretch(np.concatenate(([rep.clock_s], rest.times_s)), np.concatenate(([s0], rest.step_s)),
                   np.concatenate(([parts["draft_s"]], rest.draft_s)),
                   np.concatenate(([parts["sched_s"]], rest.sched_s)),
                   np.concatenate(([dec.size], rest.decode_reqs)),
                   np.concatenate(([draw.verify_tokens], rest.verify_tokens)),
                   np.concatenate(([draw.budget], rest.budget)),
                   np.concatenate(([int(emitted[dec].sum())], rest.emitted)),
                   np.concatenate(([work.decode_context_tokens], rest.context_tokens)),
                   np.concatenate(([work.decode_max_context], rest.max_context)),
                   np.concatenate(([prefill.kv_tokens], rest.kv_tokens)), rest.generated, 1 + rest.steps_run,
                   accepted + rest.accepted, verified + rest.verified, prefill)


class _FirstDraw:
    """The random part of a stretch's first step, which prefills: its decoding requests' verify
    lengths, budget and accepted drafts, drawn and planned as one step draws and plans them
    (the policy's state waits for :meth:`Policy.commit`)."""

    def __init__(self, rep, dec: np.ndarray, block_size: int):
        self.rep = rep
        c, n, acc = rep.running.cols, rep.running.n, rep.ctx.acceptance
        noise = acc.step_words(dec.size, block_size)
        self.words = noise + dec.size * block_size
        words = rep.rng.bit_generator.random_raw(self.words).reshape(1, self.words)
        p_true, conf = acc.steps(c["difficulty"][:n][dec], c["domain"][:n][dec], block_size, words[:, :noise])
        verify_len, budget = rep.policy.plan_many(conf, 1, dec.size)
        self.verify_len, self.budget = verify_len[0], int(budget[0])
        self.verify_tokens = int(self.verify_len.sum())
        self.accepted = acc.accept_words(p_true, verify_len - 1, words[:, noise:])[0]

    def undo(self) -> None:
        """The step is not taken: the policy forgets it, the random stream goes back."""
        self.rep.policy.commit(0)
        self.rep.rng.bit_generator.advance(_PERIOD - self.words)


def _drafting(rep, n: int, block_size: int, left, kv0, generated, stop_s: float,
              tokens_per_step: float, start_s: float | None = None) -> Stretch | None:
    """A stretch of steps with drafts: it ends at the first finish. ``start_s``: where it starts
    after a first step that prefills (then one step is enough), default now."""
    after = start_s is not None
    start_s = rep.clock_s if start_s is None else start_s
    steps = _steps_to_draw(int(left.min()), stop_s - start_s, rep.decode_step_s, tokens_per_step, n,
                           block_size)
    if steps < 2 - after:
        return None
    draw = _Draw(rep, steps, n, block_size)
    new = draw.accepted + 1
    cum = np.cumsum(new, axis=0)  # tokens each request emitted after step k
    done = (cum >= left).any(axis=1)
    first = int(done.argmax())
    taken = first + 1 if done[first] else steps
    verify = draw.verify_len.sum(axis=1)
    st = _finish(rep, steps, taken, np.full(steps, n), kv0 + (cum - new), verify, draw.budget, block_size,
                 stop_s, start_s=start_s)
    if st is None:
        draw.keep(0)
        return None
    times, taken, step_s, parts, kv_tokens, context, max_context = st
    draw.keep(taken)
    emitted = new[:taken].sum(axis=1)
    final = cum[taken - 1]
    capped = np.minimum(final, left)
    emitted[-1] -= int((final - capped).sum())  # a finishing request emits up to its output
    return Stretch(times, step_s, parts["draft_s"], parts["sched_s"], np.full(taken, n), verify[:taken],
                   draw.budget[:taken], emitted, context, max_context, kv_tokens, generated + capped, taken,
                   draw.accepted[:taken].sum(axis=0), draw.verify_len[:taken].sum(axis=0) - taken)


def _finish(rep, steps: int, taken: int, decode, kv, verify, budget, block_size: int, stop_s: float,
            finishes: np.ndarray | None = None, running=None, prefill: FirstPrefill | None = None,
            start_s: float | None = None):
    """Cut ``taken`` steps short where the KV cache runs out (or, with a prefix cache, where a
    step would evict cached blocks: step by step takes that one), price them, and cut them again
    at the next arrival: (times, taken, step_s, parts, kv_tokens, context, max_context), or None
    where not one step is left. ``finishes``: the step after which each request finishes, where
    requests finish inside the stretch (they leave when it starts). ``running``: the requests
    each step holds (default: ``decode``); ``prefill``: the first step's prompt work;
    ``start_s``: when the first step starts (default now)."""
    context = kv.sum(axis=1)
    running = decode if running is None else running
    kv_needed = context + verify + running * rep.kv_per_request + rep._kv_adjust()  # as a step plans it (replica.py)
    if prefill is not None:  # with the prefilling requests' prompts
        kv_needed[0] = prefill.kv_tokens
    # a step the cache cannot hold preempts (or, for a lone request, is an internal error):
    # the step-by-step path takes it (replica._plan)
    crowded = kv_needed[:taken] > rep.kv_capacity
    if rep.prefix is not None:
        crowded |= kv_needed[:taken] + rep.prefix.idle_tokens > rep.kv_capacity
    if crowded.any():
        taken = int(crowded.argmax())
        if not taken:
            return None
    max_context = kv[:taken].max(axis=1)
    first = 0 if prefill is None else 1  # the first step is priced as a step is
    k = slice(first, taken)
    dec = decode[k]
    parts = {}
    if taken > first:
        works = StepWorks(dec, dec if verify is decode else verify[k], context[k], draft_kind=rep.policy.draft_kind,
                          draft_reqs=dec if block_size else 0, draft_block_size=block_size,
                          draft_context_tokens=context[k], decode_max_context=max_context[k],
                          running_reqs=dec)  # after the first step every request running decodes
        parts = rep.ctx.cost.breakdown_array(works)
    step_s = sum(parts.values()) if parts else np.zeros(0)
    if prefill is not None:
        step_s = np.concatenate(([sum(prefill.parts.values())], step_s))
        parts = {name: np.concatenate(([prefill.parts.get(name, 0.0)], parts.get(name, np.zeros(taken - 1))))
                 for name in ("draft_s", "sched_s")}
    times = np.cumsum(np.concatenate(([rep.clock_s if start_s is None else start_s], step_s)))  # as step by step
    # a step that would start at or after the next arrival is not taken, unless (engine
    # overlap) its plan was made when the step before it started, before the arrival: the
    # newcomer joins the step after it. Not where a request would leave the batch at or after
    # the arrival while the stretch is applied before it (a router reads the batch then).
    cut = int(np.searchsorted(times[1:taken], stop_s)) + 1
    if rep.overlap and cut < taken and (finishes is None or not (finishes == cut).any()):
        cut += 1
    taken = cut
    k = slice(0, taken)
    zero = np.zeros(taken)
    parts = {"draft_s": parts.get("draft_s", zero)[k], "sched_s": parts.get("sched_s", zero)[k]}
    return (times[:taken + 1], taken, step_s[k], parts, kv_needed[k], context[k], max_context[k])


class _Draw:
    """The random part of K steps: verify lengths, budgets and accepted drafts."""

    def __init__(self, rep, steps: int, n: int, block_size: int):
        self.rep, self.steps = rep, steps
        c, acc = rep.running.cols, rep.ctx.acceptance
        noise = acc.step_words(n, block_size)
        self.per_step = noise + n * block_size
        words = rep.rng.bit_generator.random_raw(steps * self.per_step).reshape(steps, self.per_step)
        p_true, conf = acc.steps(c["difficulty"][:n], c["domain"][:n], block_size, words[:, :noise])
        self.verify_len, self.budget = rep.policy.plan_many(conf, steps, n)
        self.accepted = acc.accept_words(p_true, self.verify_len - 1, words[:, noise:])

    def keep(self, taken: int) -> None:
        """Only the first ``taken`` steps run: the policy keeps their state, the random stream
        goes back to where they leave it."""
        self.rep.policy.commit(taken)
        if taken < self.steps:  # PCG64 runs in a cycle of 2**128 words: this goes back
            self.rep.rng.bit_generator.advance(_PERIOD - (self.steps - taken) * self.per_step)


def _steps_to_draw(left: int, to_arrival_s: float, step_s: float, tokens_per_step: float, n: int,
                   block_size: int) -> int:
    """How many steps to draw: enough to reach the end (``left`` tokens at ``tokens_per_step``)
    or the next arrival, whichever comes first, by the recent step time, and never more than
    ``left`` (a request emits at least a token a step)."""
    guess = math.ceil(1.25 * left / max(tokens_per_step, 1.0)) + 1
    if step_s > 0 and math.isfinite(to_arrival_s):
        guess = min(guess, math.ceil(1.25 * to_arrival_s / step_s) + 1)
    cap = max(1, MAX_DRAWS // (n * max(block_size, 1)))
    return max(0, min(left, guess, MAX_STEPS, cap))


def delay_to(now_s: float, end_s: float) -> float:
    """The delay that takes simpy's clock from ``now_s`` to ``end_s``, exactly where a float can
    (``now_s + delay`` rounds, and round-half-even may step over ``end_s``: then the nearest)."""
    delay = end_s - now_s
    while now_s + delay < end_s:
        delay = math.nextafter(delay, math.inf)
    while now_s + delay > end_s:
        delay = math.nextafter(delay, -math.inf)
    return delay


