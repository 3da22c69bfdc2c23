"""One serving replica: a waiting queue, a running batch, one simpy event per step.

Each step follows vLLM/Sarathi continuous batching: admit waiting requests while the concurrency
cap and the KV cache allow, give decoding requests their verify tokens first, fill the rest of the
token budget with prefill chunks (``batching: prefill_first``, SGLang without
``--enable-mixed-chunk``: a step with prompt work pending prefills only, and decoding requests
wait; under DP attention per rank, :mod:`.ranks`), preempt the newest requests (recompute) when the
KV cache would overflow, cost the step, advance time, then draw acceptance and emit tokens. A
request no engine would serve (longer than the context, or than the cache holds for it alone) is
rejected on arrival (:mod:`dspark_sim.serving.admission`), so every admitted request fits alone
and the KV cache in use never exceeds its capacity. With a prefix cache (:mod:`.prefix`) a request
prefills only what its prompt does not share with cached blocks, and cached blocks no request
reads fill free KV until a step needs it.

With ``overlap`` (the engine plans and launches step n+1 while step n runs: SGLang's overlap
scheduler, vLLM's asynchronous scheduling, the decoder's ``serve``), the plan of a step is made
when the step before it starts: a request that reaches the replica while a step is in flight joins
the step after the next, and its ``first_scheduled_s`` is when that step's plan was made; what the
step in flight finishes holds its place and KV through that plan, its unsure finishes are decoded
once more (:mod:`.inflight`). When the step in flight leaves nothing to run after it, the engine
plans anew once it lands. Token times stay the ends of their steps; an engine's front end
(:mod:`dspark_sim.serving.frontend`) delivers them to the client later, and the record gives the
client's times.

An engine that reserves KV at admission for output still to come (TensorRT-LLM's whole output,
SGLang's falling new-token ratio: :class:`~dspark_sim.engines.KvReserve`) admits a request only
when that fits too. With multi-step scheduling (vLLM 0.6) a schedule runs several decode steps,
and a request waits for the last of them.
"""
from __future__ import annotations

import math
from collections import deque
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np
import simpy

from dspark_sim.cost.hot import PrefillDuty
from dspark_sim.serving.batch import Rows, Table
from dspark_sim.serving.inflight import in_flight
from dspark_sim.serving.launch import Launches
from dspark_sim.serving.request import Request
from dspark_sim.serving.step import PlannedStep, plan_step
from dspark_sim.serving.stretch import Stretch, delay_to, plan_stretch
from dspark_sim.errors import InternalError, raise_if_stopped

if TYPE_CHECKING:
    from dspark_sim.serving.context import SimContext


class Replica:
    """A model replica (``tp`` GPUs) serving requests one engine step at a time."""

    def __init__(self, env: simpy.Environment, index: int, ctx: SimContext, rng: np.random.Generator):
        self.env, self.index, self.ctx, self.rng = env, index, ctx, rng
        dep = ctx.scenario.deployment
        self.max_running = ctx.max_running or dep.max_running_requests
        self.max_tokens = dep.max_batched_tokens
        self.prefill_cap = dep.chunked_prefill_tokens or dep.max_batched_tokens
        self.prefill_first = dep.batching == "prefill_first"
        # DP attention: each rank its own requests and a share of the prefill chunk (serving/ranks.py)
        self.ranks = dep.parallel.dp_ranks
        self.rank_cap = max(1, min(self.max_tokens, self.prefill_cap // self.ranks))
        self.ranks_prefill_apart = ctx.ranks_prefill_apart  # no rank decodes while any prefills
        self.kv_capacity = ctx.kv_capacity_tokens
        self.kv_per_request = ctx.kv_request_tokens  # window and compressor state (DeepSeek-V4)
        self.admission, self.policy, self.prefix = ctx.admission, ctx.make_policy(), ctx.make_prefix_cache()
        self.waiting: deque[Request] = deque()
        self.running, self.kv_peak, self.overlap = Table(), 0, ctx.overlap
        # the front end streaming this replica's output to the client (None: the engine has none)
        self.frontend = ctx.frontend
        # KV reserved at admission for output to come (engines.KvReserve), and the running ratio now
        self.reserve = ctx.kv_reserve
        self.reserve_ratio = self.reserve.running_init if self.reserve is not None else 0.0
        # multi-step scheduling: decode steps run per schedule, and how far into one the next step is
        # (0: the next step is scheduled, and may admit)
        self.multi_step, self.group_pos = ctx.multi_step, 0
        # with overlap, when the next step's plan is made (the start of the step in flight), what
        # that step holds then, and whether the plan left requests waiting while it held places
        self.plan_s, self.inflight, self.held_back = 0.0, in_flight(self.overlap), False
        self.launches = Launches(ctx.cost, self.overlap)  # plans after eager launches, token reads (.launch)
        # The replica's own clock: every step's start and end, summed step after step (simpy's
        # clock lands on a stretch's end within a rounding; the record keeps this one).
        self.clock_s = 0.0
        self.decode_step_s = 0.0  # the last step without prefill work (how far a stretch may reach)
        self.duty = PrefillDuty(getattr(ctx.cost, "hot_window_s", 0.0))  # prompt steps' recent share (cost.hot)
        self.decode_hot = getattr(ctx.cost, "decode_hot", None)  # decode steps after prompt steps (cost.hot)
        self._decoded = [0, 0]  # tokens decoding requests emitted, request-steps they took
        self._ahead = None  # the step after the last stretch, drawn with it (draw.Ahead)
        self._wake = env.event()
        self.busy_until_s = -math.inf  # the end of the step or stretch the loop waits for (-inf: it waits for work)
        self.process = env.process(self._loop())

    # -- queueing -------------------------------------------------------------
    @property
    def outstanding(self) -> int:
        return len(self.waiting) + len(self.running)

    def submit(self, request: Request) -> None:
        """Queue a new request (a row for :class:`Table`) and wake the loop if idle; a request
        the engine would refuse (:class:`~dspark_sim.serving.admission.Admission`) is rejected.
        The request's prefix ``hash_ids`` go to the prefix cache (one that caches nothing when
        it is off), not into the row."""
        reason = self.admission.refusal(request.prompt_tokens, request.output_tokens)
        if reason is not None:
            self.ctx.collector.on_reject(request, reason, self.index)
            return
        if request.hash_ids:
            self.prefix.register(request.rid, request.hash_ids, request.prompt_tokens)
            request.hash_ids = None
        self.waiting.append(request)
        if not self._wake.triggered:
            self._wake.succeed()

    def _admit_planned(self) -> None:
        """Admit what the next step's plan takes: everything that fits, or with overlap what had
        reached the replica when the plan was made (``plan_s``) and fits beside what the step in
        flight holds (:mod:`.inflight`); if then nothing runs, the engine plans again once that
        step lands (it left nothing to run beside it), when it holds nothing."""
        held, self.held_back = self.inflight, False
        if self.waiting:
            kv_used = int(self.kv_tokens().sum()) + len(self.running) * self.kv_per_request + self.prefix.kv_adjust
            self._admit(kv_used, self.plan_s if self.overlap else None)
            if self.overlap and self.waiting and not len(self.running):
                self.plan_s = self.clock_s
                held.planned()
                self._admit(kv_used)
            self.held_back = bool(self.waiting) and bool(held.slots or held.kv_tokens)
        held.planned()

    def _admit(self, kv_used: int, plan_s: float | None = None) -> None:
        """Admit waiting requests in order while they fit, joining the batch together. ``plan_s``:
        when the plan was made (overlap): a request that came later waits, and an admitted one
        was scheduled then."""
        run, waiting, prefix, reserve = self.running, self.waiting, self.prefix, self.reserve
        c, n = run.cols, run.n
        pending = int((c.prefill_len[:n] - c.prefilled[:n]).sum()) if n else 0
        if reserve is not None:  # the output the running requests may still write
            pending += int(self.reserve_ratio * reserve.output_left(c.output_tokens[:n] - c.generated[:n]).sum())
        ready_by_s = math.inf if plan_s is None else plan_s
        scheduled_s = self.clock_s if plan_s is None else plan_s
        room = self.kv_capacity - kv_used - self.inflight.kv_tokens - pending
        slots = self.max_running - n - self.inflight.slots
        admitted = []
        while waiting and len(admitted) < slots:
            req = waiting[0]
            if req.ready_s > ready_by_s:  # a preempted request has waited since before
                break
            hit = prefix.lookup(req.rid, req.prefill_len)
            # cached blocks no request reads yet are free KV until this request pins them
            need = req.prefill_len - hit.tokens + self.kv_per_request + hit.idle_tokens
            if reserve is not None:
                need += int(reserve.new_ratio * reserve.output_left(req.output_tokens - req.generated))
            if need > room:
                break
            waiting.popleft()
            first = req.first_scheduled_s < 0
            prefix.acquire(req.rid, hit, self.clock_s, first=first)
            req.prefilled = hit.tokens
            if first:
                req.first_scheduled_s = scheduled_s
                req.cached_tokens = hit.tokens
            admitted.append(req)
            room -= need
        if admitted:
            run.append(admitted)

    def _decay_reserve(self, steps: int) -> None:
        """The running requests' reservation ratio after ``steps`` more decode steps."""
        if self.reserve is not None and steps:
            self.reserve_ratio = max(self.reserve.running_min, self.reserve_ratio - self.reserve.decay_per_step * steps)

    # -- the step loop --------------------------------------------------------
    def _loop(self):
        while True:
            raise_if_stopped()
            if not self.waiting and not len(self.running):
                self.inflight = in_flight(self.overlap)  # the last step landed: it holds nothing
                self._wake = self.env.event()
                self.ctx.collector.advance(self.index, None)
                self.busy_until_s = -math.inf
                self.launches.idle()
                yield self._wake
                self.clock_s = self.plan_s = self.env.now
            if not len(self.running):  # a schedule whose requests all finished has ended
                self.group_pos = 0
            if not self.group_pos:
                self._admit_planned()
            stretch = self._stretch() if self.ctx.skip_ahead else None
            if stretch is not None:
                self._ahead = stretch.next_step
                self.launches.read(self.running, self.clock_s)  # (its steps launch from graphs)
                self.plan_s = float(stretch.times_s[-2])  # its last step's start
                if self.frontend is not None:
                    self.frontend.streamed(stretch.times_s[1:], stretch.decode_reqs, self.index)
                self._apply_stretch(stretch)
                self.ctx.collector.advance(self.index, stretch.end_s)
                self.busy_until_s = stretch.end_s
                yield self.env.timeout(delay_to(self.env.now, stretch.end_s))
                self.clock_s = stretch.end_s
                self._retire(self.clock_s)
                continue
            step = self._plan()
            if step is None:  # nothing schedulable: admission lets every request run alone
                raise InternalError(f"replica {self.index} stalled with {len(self.waiting)} requests waiting")
            end_s = self.clock_s + step.step_s
            if step.prefill_tokens:
                self.duty.add(self.clock_s, end_s)
            self.plan_s = self.launches.plan(self.plan_s, self.clock_s, end_s, step.work)
            self.launches.read(self.running, self.plan_s)  # the step before this one
            self._stream(end_s, step)
            self.ctx.collector.advance(self.index, end_s)
            self.busy_until_s = end_s
            yield self.env.timeout(delay_to(self.env.now, end_s))
            self.clock_s = end_s
            self._finish(step)

    def _stream(self, end_s: float, step: PlannedStep) -> None:
        """Tell the front end the messages the step streams when it ends: one per decoding request
        and per request whose prefill it completes (a step that streams none is left out)."""
        if self.frontend is None:
            return
        messages = step.num_dec
        if step.pre is not None:
            c, pre = self.running.cols, step.pre
            messages += int(np.count_nonzero(c.prefilled[pre] + step.chunk >= c.prefill_len[pre]))
        if messages:
            self.frontend.streamed(end_s, messages, self.index)

    def _stretch(self) -> Stretch | None:
        """Steady decode steps from now (every request decoding; the caller admitted what fits,
        and the rest stays out until a request finishes)."""
        # a request came after this step's plan, or waits while the step in flight holds places:
        # the next plan may take it (the step in flight's unsure finishes: the stretch's first step)
        if self.held_back or self.overlap and self.waiting and self.waiting[0].ready_s > self.plan_s:
            return None
        c, n = self.running.cols, self.running.n
        # (the request admitted last mostly prefills while any does: a look at it first)
        if not n or c.prefilled[n - 1] < c.prefill_len[n - 1] or (c.prefilled[:n] < c.prefill_len[:n]).any():
            return None
        # a waiting request joins at the end of this schedule's steps, or may fit after any step while
        # the reservation shrinks step by step
        if self.waiting and (self.multi_step > 1 or self.reserve is not None and self.reserve.decay_per_step
                             and self.reserve_ratio > self.reserve.running_min):
            return None
        tokens, steps = self._decoded
        return plan_stretch(self, self.ctx.arrivals.next_s, tokens / steps if steps else 1.0)

    def kv_tokens(self) -> np.ndarray:
        """KV tokens each running request holds (prefilled plus decoded since)."""
        c, n = self.running.cols, self.running.n
        return c.prefilled[:n] + c.generated[:n] - c.kv_base[:n]

    def _plan(self) -> PlannedStep | None:
        ghosts, ahead, self._ahead = self.inflight.take_ghosts(), self._ahead, None
        while True:
            step = plan_step(self, ghosts, ahead)
            ahead = None  # (taken by the first plan, or not to be taken)
            if step.kv_needed <= self.kv_capacity:
                break
            if len(self.running) <= 1:  # admission keeps every request within the cache alone
                raise InternalError(f"replica {self.index}: a lone request needs {step.kv_needed} KV tokens, "
                                    f"more than the {self.kv_capacity} the cache holds")
            self._preempt_newest()
        if not step.tokens:
            return None
        self.kv_peak = max(self.kv_peak, step.kv_needed)
        # make room for the step's tokens among the cached blocks
        over = step.kv_needed + self.prefix.idle_tokens - self.kv_capacity
        return replace(step, evicted_blocks=self.prefix.evict(over)) if over > 0 else step

    def kv_needed(self, context_tokens, verify_tokens, rows):
        """KV tokens a step needs (numbers, or arrays of steps): the running requests' ``context_tokens``
        plus their ``verify_tokens`` and what each of ``rows`` holds besides its length, as the
        cache holds them (shared prefix blocks once)."""
        return context_tokens + verify_tokens + rows * self.kv_per_request + self.prefix.kv_adjust

    def _preempt_newest(self) -> None:
        """Recompute preemption: the last admitted request goes back to the queue head."""
        run = self.running
        i = len(run) - 1
        req = run.row(i)
        mask = np.zeros(len(run), dtype=bool)
        mask[i] = True
        run.remove(mask)
        self.prefix.release(req.rid, finished=False)
        req.num_preemptions += 1
        if self.reserve is not None:  # a retraction: the engine reserves as at start again
            self.reserve_ratio = self.reserve.running_init
        req.prefill_len = req.prompt_tokens + req.generated
        req.prefilled = 0
        req.kv_base = req.generated
        self.waiting.appendleft(req)

    def _finish(self, step: PlannedStep) -> None:
        c, n, now = self.running.cols, self.running.n, self.clock_s
        dec, pre = step.dec, step.pre
        emitted = 0
        steps = c.num_steps[:n]
        if step.num_dec:
            generated = c.generated[:n]
            left = c.output_tokens[dec] - generated[dec]
            if step.p_true is not None:
                drafts = step.verify_len - 1
                accepted = step.ahead.accept(self) if step.ahead is not None else \
                    self.ctx.acceptance.accept(step.p_true, drafts, self.rng)
                new = accepted + 1
                c.verified_drafts[dec] += drafts  # (dec indexes the first n rows)
                np.minimum(new, left, out=new)
                c.accepted_tokens[dec] += new - 1  # accepted drafts that were emitted (a last step may accept more)
                if self.inflight.overlapped and (done := new == left).any():  # the next plan could not know
                    rows = done.nonzero()[0] if isinstance(dec, slice) else dec[done]  # (a slice starts at row 0)
                    left_done = left[done]
                    kv = c.prefilled[rows] + c.generated[rows] - c.kv_base[rows]  # (kv_tokens of these rows)
                    self.inflight.finished(c, rows, left_done, kv + left_done)
            else:
                new = np.minimum(left, 1)  # a token each
            emitted = int(new.sum())
            self._decoded[0] += emitted
            self._decoded[1] += step.num_dec
            self._decay_reserve(1)
            last = c.last_token_s[:n]
            self.ctx.collector.on_gaps(last[dec], self.index, now)
            generated[dec] += new
            last[dec] = now
            steps[dec] += 1
        first_tokens = self._advance_prefill(pre, step.chunk, now) if pre is not None else 0
        # a step with prompt work is scheduled alone; a decode step starts or continues a schedule
        self.group_pos = 0 if step.prefill_tokens else (self.group_pos + 1) % self.multi_step
        self.ctx.collector.on_step(self.index, step, n, emitted, first_tokens, now)
        if not step.prefill_tokens:
            self.decode_step_s = step.step_s
        self._retire(now)

    def _apply_stretch(self, st: Stretch) -> None:
        """Apply a stretch's steps as :meth:`_finish` would after each of them, now, when it starts.

        Nothing outside the replica can tell: no request arrives before its last step starts,
        and requests that finish before then leave now, with their finish times (those that
        finish in the last step leave when it ends, :meth:`_retire`).
        """
        c, n = self.running.cols, self.running.n
        times, collector = st.times_s, self.ctx.collector
        last = c.last_token_s[:n]
        collector.on_stretch(self.index, st, last)
        c.generated[:n] = st.generated
        if st.left_last is not None:  # finished in its last step: decoded once more where unsure (overlap)
            done = (st.generated >= c.output_tokens[:n]).nonzero()[0]
            self.inflight.finished(c, done, st.left_last[done], self.kv_tokens()[done])
        if st.accepted is not None:
            c.accepted_tokens[:n] += st.accepted
            c.verified_drafts[:n] += st.verified
        last[:] = times[st.steps_run]
        c.num_steps[:n] += st.steps_run
        self.kv_peak = max(self.kv_peak, st.kv_peak)
        self._decoded[0] += int(st.emitted.sum())
        self._decoded[1] += int(st.decode_reqs.sum())
        self.decode_step_s = float(st.step_s[-1])
        self._decay_reserve(st.steps)
        self.group_pos = (self.group_pos + st.steps) % self.multi_step
        if isinstance(st.steps_run, np.ndarray):
            early = st.steps_run < st.steps
            if early.any():  # requests that finish before the last step, in the order they finish
                when = st.steps_run[early]
                order = np.argsort(when, kind="stable")
                rows = self.running.take(early.nonzero()[0][order])
                self._release_finished(rows)
                collector.on_finish(rows, times[when[order]], self.index)
                self.running.remove(early)

    def _release_finished(self, rows: Rows) -> None:
        """Finished requests drop their prefix-cache references (their blocks stay cached)."""
        if self.prefix.chains:
            for rid in rows.rid.tolist():
                self.prefix.release(rid, finished=True)

    def _retire(self, now: float) -> None:
        """Finished requests leave the batch (and go to the record)."""
        c, n = self.running.cols, self.running.n
        finished = c.generated[:n] >= c.output_tokens[:n]
        done = finished.nonzero()[0]
        if done.size:
            rows = self.running.take(done)
            kv = rows.prefilled + rows.generated - rows.kv_base
            self.inflight.retired(len(rows), int(kv.sum()))
            self._release_finished(rows)
            self.ctx.collector.on_finish(rows, now, self.index)
            self.running.remove(finished)

    def _advance_prefill(self, pre: np.ndarray, chunk: np.ndarray, now: float) -> int:
        """Apply prefill chunks; a request whose prefill completes emits one token. (``pre`` indexes
        the running table's first rows: its columns are indexed whole.)"""
        c = self.running.cols
        prefilled = c.prefilled[pre] + chunk
        c.prefilled[pre] = prefilled
        c.num_steps[pre[chunk > 0]] += 1
        if self.prefix.chains:
            self.prefix.advance(c.rid[pre], prefilled, now)
        done = pre[prefilled >= c.prefill_len[pre]]
        if not done.size:
            return 0
        generated, last = c.generated, c.last_token_s
        resumed = generated[done] > 0  # re-prefill after a preemption: an inter-token gap
        first = done
        if resumed.any():
            self.ctx.collector.on_gaps(last[done[resumed]], self.index, now)
            first = done[~resumed]
        c.first_token_s[first] = now
        self.launches.first_tokens(c.rid[first])
        generated[done] += 1
        last[done] = now
        return int(done.size)
