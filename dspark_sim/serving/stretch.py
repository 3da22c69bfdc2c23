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
blocks; the random stream is set back to where the steps taken leave it. With nobody
waiting a finish changes nothing but the batch size, and the stretch runs on past it:
without drafts (nothing random) in the same arrays, with drafts in a new segment drawn for
the requests left, from where the stream stands after the finish, as the next step draws
(an overlapping engine's next step, with its ghost rows, :mod:`.inflight`, is the first of that
segment, drawn for more rows, :mod:`.draw`). The numbers are those of step-by-step mode, bit for bit.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from dspark_sim.cost.base import StepWorks
from dspark_sim.cost.hot import stretch_times
from dspark_sim.serving.draw import PERIOD, Ahead, Draw
from dspark_sim.serving.inflight import Ghosts

MAX_STEPS = 512  # steps drawn at once, at most
MAX_DRAWS = 1 << 17  # request-positions drawn at once, at most (K * R * max(block_size, 1))


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
    accepted: np.ndarray | None = None  # int64 [R]: drafts accepted and emitted in the stretch (None: no drafts)
    verified: np.ndarray | None = None  # int64 [R]: drafts verified in the stretch
    next_step: Ahead | None = None  # the step after it, drawn with it (None: not drawn)
    left_last: np.ndarray | None = None  # int64 [R]: output tokens left when its last step was planned
    ghost_rows: np.ndarray | None = None  # int64 [K]: ghost rows decoded beside the requests (None: none)

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


def plan_stretch(rep, stop_s: float, tokens_per_step: float) -> Stretch | None:
    """The steady decode steps replica ``rep`` runs from now, or None where there are fewer
    than two (the step-by-step path takes them).

    Every running request decodes and none can be admitted (the caller checks). ``stop_s``:
    the next arrival (a step starting at or after it is not taken); ``tokens_per_step``: the
    tokens a request emitted per step so far, to guess how far to draw.
    """
    c, n = rep.running.cols, rep.running.n
    generated = c.generated[:n]
    left = c.output_tokens[:n] - generated
    kv0 = c.prefilled[:n] + generated - c.kv_base[:n]
    block_size = rep.policy.block_size_for(n)
    if block_size:
        return _drafting(rep, n, block_size, left, kv0, generated, stop_s, tokens_per_step)
    if rep.inflight.ghosts is not None:  # ghost rows without drafts: the step-by-step path takes them
        return None
    # Without drafts nothing is random: a request emits a token a step. Without speculation at
    # all, a finish only shrinks the batch, unless it frees room for a waiting request.
    # A finishing request that references prefix-cache blocks changes the KV they hold: stop there.
    past_finishes = rep.ctx.acceptance is None and not rep.waiting and not rep.prefix.chains
    last = int(left.max() if past_finishes else left.min())
    steps = steps_to_draw(last, stop_s - rep.clock_s, rep.decode_step_s, 1.0, n, 0)
    if steps < 2:
        return None
    k = np.arange(steps)[:, None]
    if past_finishes:  # a request decodes from step 0 to step left - 1
        live = k < left
        decode = live.sum(axis=1)
        kv = (kv0 + k) * live
    else:
        decode = np.full(steps, n)
        kv = kv0 + k
    taken = min(steps, last)
    st = _finish(rep, steps, taken, decode, kv, decode, np.zeros(steps, dtype=np.int64), 0, stop_s,
                 left if past_finishes else None)
    if st is None:
        return None
    times, taken, step_s, parts, kv_tokens, context, max_context = st
    run = np.minimum(left, taken) if past_finishes else taken
    return Stretch(times, step_s, parts["draft_s"], parts["sched_s"], decode[:taken], decode[:taken],
                   np.zeros(taken, dtype=np.int64), decode[:taken], context, max_context, kv_tokens,
                   generated + run, run)


def _drafting(rep, n: int, block_size: int, left, kv0, generated, stop_s: float,
              tokens_per_step: float) -> Stretch | None:
    """A stretch of steps with drafts. Each segment of it is drawn for the requests still
    running and ends at the first finish; with nobody waiting (and no prefix-cache references
    to release) a finish only shrinks the batch, and the next segment is drawn for the rest
    from where the random stream stands after it, as the next step would draw it. An engine
    that overlaps its steps decodes the unsure finishes once more in the step after them
    (serving/inflight.py): that step is the next segment's first, with the ghost rows beside the
    requests left (the first segment's, where the step in flight left ghosts). Otherwise, or
    where the drafter's block size would change, the stretch ends at the first finish."""
    through = not rep.waiting and not rep.prefix.chains
    ghosts = rep.inflight.ghosts
    steps = steps_to_draw(int(left.min()), stop_s - rep.clock_s, rep.decode_step_s, tokens_per_step, n,
                           block_size)
    if steps < 2 or ghosts is not None and rep.policy.block_size_for(n + len(ghosts)) != block_size:
        return None  # (the ghost rows' step drafts as many as its rows get: step by step takes it)
    c = rep.running.cols
    difficulty, domain = c.difficulty[:n], c.domain[:n]
    segments = Segments(rep, n)
    live = np.arange(n)
    left_live = left.copy()
    while True:
        draw = Draw(rep, steps, live.size, block_size, difficulty[live], domain[live], ghosts)
        new = draw.accepted + 1
        cum = new.cumsum(axis=0)  # tokens each request emitted after step k
        done = (cum >= left_live).any(axis=1)
        first = int(done.argmax())
        taken = first + 1 if done[first] else draw.steps
        segments.add(draw, taken, live, new, cum, left_live, ghosts)
        if not done[first] or not through:
            break  # drawn to its end, or a finish a waiting request may follow
        finished = cum[taken - 1] >= left_live
        ghosts = _unsure(rep, live, finished, left_live - (cum[taken - 2] if taken > 1 else 0), kv0 + left,
                         difficulty, domain)
        left_live = left_live - cum[taken - 1]
        live, left_live = live[~finished], left_live[~finished]
        total = segments.steps
        if not live.size or total >= MAX_STEPS or rep.policy.block_size_for(live.size) != block_size or (
                ghosts is not None and rep.policy.block_size_for(live.size + len(ghosts)) != block_size):
            break
        steps = steps_to_draw(int(left_live.min()), stop_s - rep.clock_s - total * rep.decode_step_s,
                               rep.decode_step_s, tokens_per_step, live.size, block_size)
        steps = min(steps, MAX_STEPS - total)
        if steps < 1:
            break
    total, several = segments.steps, len(segments.draws) > 1
    new, _, verify_len = segments.matrices()
    cum = new.cumsum(axis=0)
    kv = kv0 + (cum - new)
    if several:  # a request holds no KV of the step once it has left (every running one verifies)
        kv *= verify_len > 0
    decode, load = segments.decode, segments.ghost_load()
    verify = verify_len.sum(axis=1)
    if load is not None:
        verify += load.verify
    st = _finish(rep, total, total, decode, kv, verify, segments.budget, block_size, stop_s,
                 segments.runs if several else None, load)
    if st is None:
        segments.keep(0)
        return None
    times, taken, step_s, parts, kv_tokens, context, max_context = st
    segments.keep(taken)
    rep.inflight.take_ghosts()  # the step in flight's ghost rows, where it left any: its first step's
    ahead = segments.ahead(taken, rep.running.cols.rid[:n])
    capped = np.minimum(cum[:taken], left)  # a finishing request emits up to its output
    emitted = capped.sum(axis=1)
    emitted[1:] -= emitted[:-1]  # each step's own (np.diff, without its overhead; numpy buffers the overlap)
    run = np.minimum(segments.runs, taken) if several else taken
    left_last = left - capped[-2] if taken > 1 else left
    decode = decode[:taken] if several else np.full(taken, decode)
    return Stretch(times, step_s, parts["draft_s"], parts["sched_s"], decode, verify[:taken],
                   segments.budget[:taken], emitted, context, max_context, kv_tokens, generated + capped[-1], run,
                   capped[-1] - run, verify_len[:taken].sum(axis=0) - run, ahead, left_last,  # drafts accepted and emitted
                   None if load is None else load.rows[:taken])


def _unsure(rep, live, finished, left_before, kv_end, difficulty, domain) -> Ghosts | None:
    """The ghost rows of the step after one that ``finished`` requests ``live[finished]`` (an
    overlapping engine's: those that had two or more tokens left when it was planned), or None."""
    if not rep.inflight.overlapped:
        return None
    rows = live[finished & (left_before >= 2)]
    return Ghosts(kv_end[rows], difficulty[rows], domain[rows]) if rows.size else None


@dataclass(frozen=True, slots=True)
class GhostLoad:
    """The ghost rows beside a stretch's requests, by step, int64 [K] each: how many, their
    verify tokens, their KV tokens and the most KV tokens one holds (0 where a step has none)."""

    rows: np.ndarray
    verify: np.ndarray
    kv: np.ndarray
    kv_max: np.ndarray


class Segments:
    """The segments of a drafting stretch: each drawn for the requests running in it (``live``,
    indices among the R running when the stretch starts), back to back, and what each kept."""

    def __init__(self, rep, n: int):
        self.rep, self.n = rep, n
        self.draws, self.starts, self.lives = [], [], []
        self.steps = 0  # steps the segments take, all together
        self.runs = np.full(n, MAX_STEPS + 1)  # the steps after which each request finishes
        self.parts: list[tuple] = []
        self.ghosts: list[tuple[int, Ghosts, int]] = []  # (step, its ghost rows, their verify tokens)

    def add(self, draw, taken: int, live, new, cum, left, ghosts: Ghosts | None = None) -> None:
        """Keep the first ``taken`` steps of ``draw`` (with its first step's ``ghosts``, if any)."""
        if ghosts:
            self.ghosts.append((self.steps, ghosts, int(draw.ghost_verify[0])))
        draw.keep(taken)
        self.draws.append((draw, taken))
        self.starts.append(self.steps)
        self.lives.append(live)
        finished = cum[taken - 1] >= left
        self.runs[live[finished]] = self.steps + taken
        self.parts.append((new[:taken], draw.accepted[:taken], draw.verify_len[:taken], draw.budget[:taken]))
        self.steps += taken

    @property
    def decode(self) -> np.ndarray | int:
        """Requests decoding in each step: one number where one segment holds every step."""
        if len(self.parts) == 1:
            return self.lives[0].size
        return np.concatenate([np.full(p[0].shape[0], live.size) for p, live in zip(self.parts, self.lives)])

    @property
    def budget(self) -> np.ndarray:
        return self.parts[0][3] if len(self.parts) == 1 else np.concatenate([p[3] for p in self.parts])

    def ghost_load(self) -> GhostLoad | None:
        """What the ghost rows add to each step (None: no step has any)."""
        if not self.ghosts:
            return None
        load = GhostLoad(*(np.zeros(self.steps, dtype=np.int64) for _ in range(4)))
        for k, ghosts, verify in self.ghosts:
            load.rows[k], load.verify[k] = len(ghosts), verify
            load.kv[k], load.kv_max[k] = ghosts.kv_tokens.sum(), ghosts.kv_tokens.max()
        return load

    def matrices(self):
        """(tokens emitted, drafts accepted, verify lengths), int64 [steps, R] each, 0 where a
        request no longer runs."""
        if len(self.parts) == 1:
            return self.parts[0][:3]
        out = [np.zeros((self.steps, self.n), dtype=np.int64) for _ in range(3)]
        for start, live, part in zip(self.starts, self.lives, self.parts):
            rows = slice(start, start + part[0].shape[0])
            for m, values in zip(out, part[:3]):
                m[rows, live] = values
        return out

    def ahead(self, taken: int, rids: np.ndarray) -> Ahead | None:
        """The step after the first ``taken`` where the last segment drew it (``rids``: the ids of
        the R requests running when the stretch starts)."""
        draw, row = self.draws[-1][0], taken - self.starts[-1]
        if row <= 0 or row >= draw.steps:
            return None
        return Ahead(rids[self.lives[-1]], draw, row)

    def keep(self, taken: int) -> None:
        """Only the first ``taken`` steps run: the policy's state and the random stream go back to
        where those steps leave them (the segments kept everything they drew so far)."""
        i = int(np.searchsorted(self.starts, taken, side="right")) - 1 if taken else 0
        start = self.starts[i]
        draw, kept = self.draws[i]
        if start + kept == taken and i == len(self.draws) - 1:
            return  # all the steps kept run
        draw.rewind(taken - start)
        # the stream stands where the last segment left it: back to where step ``taken`` leaves it
        later = sum(d.words(k) for d, k in self.draws[i + 1:]) + draw.words(kept) - draw.words(taken - start)
        if later:
            self.rep.rng.bit_generator.advance(PERIOD - later)


def _finish(rep, steps: int, taken: int, decode: np.ndarray | int, kv, verify, budget, block_size: int,
            stop_s: float, finishes: np.ndarray | None = None, ghosts: GhostLoad | None = None):
    """Cut ``taken`` steps short where the KV cache runs out (or, with a prefix cache, where a
    step would evict cached blocks: step by step takes that one), price them, and cut them again
    at the next arrival: (times, taken, step_s, parts, kv_tokens, context, max_context), or None
    where not one step is left. ``finishes``: the step after which each request finishes, where
    requests finish inside the stretch (they leave when it starts); ``ghosts``: the ghost rows
    decoded beside them (``verify`` counts their tokens)."""
    context, max_context, rows = kv.sum(axis=1), kv.max(axis=1), decode
    if ghosts is not None:
        context, rows = context + ghosts.kv, decode + ghosts.rows
        np.maximum(max_context, ghosts.kv_max, out=max_context)
    kv_needed = rep.kv_needed(context, verify, decode)  # as a step plans it
    # a step the cache cannot hold preempts (or, for a lone request, is an internal error), and
    # one that evicts cached blocks makes room first: the step-by-step path takes both (replica._plan)
    crowded = kv_needed[:taken] + rep.prefix.idle_tokens > rep.kv_capacity
    if crowded.any():
        taken = int(crowded.argmax())
        if not taken:
            return None
    k = slice(0, taken)
    dec = decode if isinstance(decode, int) else decode[k]  # one number: every step decodes as many
    rows = dec if rows is decode else rows[k]
    works = StepWorks(rows, dec if verify is decode else verify[k], context[k], draft_kind=rep.policy.draft_kind,
                      draft_reqs=rows if block_size else 0, block_size=block_size,
                      draft_context_tokens=context[k], decode_max_context=max_context[k], running_reqs=dec,
                      shared_kv_tokens=rep.prefix.repeat_tokens)  # no finish inside a stretch changes it
    parts = rep.ctx.cost.breakdown_array(works)
    times, step_s = stretch_times(rep.clock_s, sum(parts.values()), parts, works, rep.decode_hot, rep.duty)
    # a step that would start at or after the next arrival is not taken, unless (engine
    # overlap) its plan was made when the step before it started, before the arrival: the
    # newcomer joins the step after it. Not where a request would leave the batch at or after
    # the arrival while the stretch is applied before it (a router reads the batch then).
    cut = int(times[1:taken].searchsorted(stop_s)) + 1
    if rep.overlap and cut < taken and (finishes is None or not (finishes == cut).any()):
        cut += 1
    taken = cut
    k = slice(0, taken)
    zero = np.zeros(taken)
    parts = {"draft_s": parts.get("draft_s", zero)[k], "sched_s": parts.get("sched_s", zero)[k]}
    return (times[:taken + 1], taken, step_s[k], parts, kv_needed[k], context[k], works.decode_max_context[k])


def steps_to_draw(left: int, to_arrival_s: float, step_s: float, tokens_per_step: float, n: int,
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


