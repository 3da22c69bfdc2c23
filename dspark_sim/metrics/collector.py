"""Collects what the replicas report: per-request rows, per-step rows, token gaps.

Per-request and per-step rows stream to the run record (:mod:`dspark_sim.metrics.record`)
as they happen (so a million-request run never holds a million row objects); the few
columns the summary needs stay in compact numpy arrays.
"""
from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from pathlib import Path

import numpy as np

from dspark_sim.metrics.columns import STEP_TYPECODES, Columns, Growing, StepLog, TokenGaps
from dspark_sim.metrics.record import COMPLETED, RecordWriter, RequestColumns
from dspark_sim.names import DOMAINS
from dspark_sim.serving.batch import Rows
from dspark_sim.serving.request import Request
from dspark_sim.serving.step import PlannedStep


FINISHED_BLOCK = 1024  # finished requests recorded at once (numpy's cost per call, paid per block)


class InOrder:
    """Record calls of several replicas, held back and made in the order of their times.

    Each replica reports its frontier (:meth:`advance`): the time before which it records
    nothing more (the end of the step or stretch it waits for; None while it waits for
    work, when the simulation clock bounds it). A replica that advances through a stretch
    records its steps when the stretch starts, ahead of the others; calls wait here until
    every replica has passed their time, so the record is the one step-by-step mode makes
    (equal times: by replica, then call order).
    """

    def __init__(self, replicas: int, clock: Callable[[], float]):
        self.heap: list[tuple] = []
        self.frontier: list[float | None] = [None] * replicas
        self.clock, self.seq = clock, 0

    def put(self, time_s: float, replica: int, call: Callable, *args) -> None:
        heapq.heappush(self.heap, (time_s, replica, self.seq, call, args))
        self.seq += 1

    def advance(self, replica: int, frontier_s: float | None) -> None:
        self.frontier[replica] = frontier_s
        now = self.clock()
        self.release(min(now if f is None else f for f in self.frontier))

    def release(self, before_s: float = math.inf) -> None:
        """Make the held calls timed before ``before_s`` (all by default), in order."""
        heap = self.heap
        while heap and heap[0][0] < before_s:
            _, _, _, call, args = heapq.heappop(heap)
            call(*args)


class Collector:
    """Receives engine events; writes the run record (``requests.csv``, ``steps.csv``) into ``out_dir``.

    Every event names its replica and its time; with several replicas the events go through
    :class:`InOrder` (``clock``: the simulation's), so the record keeps time order however
    far a replica runs ahead. Behind an engine's front end (:meth:`through_front_end`) token
    times are the client's: when the front end delivers the step that emitted them.
    """

    def __init__(self, out_dir: Path | None, replicas: int = 1, clock: Callable[[], float] | None = None):
        self._requests = Growing({"arrival_s": np.float64, "finish_s": np.float64, "ttft_ms": np.float64,
                                 "tpot_ms": np.float64, "e2el_ms": np.float64, "queue_delay_ms": np.float64,
                                 "prompt_tokens": np.int64, "output_tokens": np.int64, "domain": np.int8,
                                 "accepted_tokens": np.int64, "verified_drafts": np.int64,
                                 "num_preemptions": np.int64, "num_steps": np.int64, "cached_tokens": np.int64})
        # finished requests not yet recorded, (rows, first token, finish) each: recorded in blocks
        self._finished: list[tuple] = []
        self._finished_reqs = 0
        self._steps = Columns(STEP_TYPECODES)
        self._token_gaps = Growing({"gap_s": np.float64, "count": np.int64})
        self.rejected = 0
        self.rejected_by: dict[str, int] = {}  # reason (serving/admission.py) -> requests
        self.record = RecordWriter(out_dir) if out_dir is not None else None
        self.order = InOrder(replicas, clock) if replicas > 1 else None
        self.replicas, self.clock = replicas, clock
        self.front_end = None  # the engine's front end, delivering tokens to the client (None: at step end)
        self.on_done: Callable[[int], None] | None = None  # told how many requests finished or were rejected

    @property
    def requests(self) -> RequestColumns:
        """The finished requests' columns (the summary's; rejected requests have none): views of
        the collected arrays, with no ``request_id``, ``first_scheduled_s`` or ``first_token_s``."""
        self._record_finished()
        return RequestColumns(**{name: self._requests[name] for name in self._requests.cols})

    @property
    def gaps(self) -> TokenGaps:
        """The inter-token gaps so far, as distinct values and how often each came."""
        return TokenGaps(self._token_gaps["gap_s"], self._token_gaps["count"])

    @property
    def steps(self) -> StepLog:
        """The steps so far as columns (views of the collected ones)."""
        return StepLog(**{name: self._steps[name] for name in STEP_TYPECODES})

    def through_front_end(self, front_end) -> None:
        """Give token times as the client sees them, delivered by ``front_end``
        (:class:`~dspark_sim.serving.frontend.FrontEnd`): the record waits, in :class:`InOrder`,
        until the front end has worked out the deliveries up to its time
        (:meth:`front_end_settled`, and at :meth:`close`). Call before any event."""
        self.front_end = front_end
        self.order = InOrder(self.replicas + 1, self.clock)
        self.order.frontier[self.replicas] = -math.inf

    def front_end_settled(self, time_s: float) -> None:
        """The front end has worked out every delivery of a step ending by ``time_s``."""
        self.order.advance(self.replicas, time_s)

    def _client(self, replica: int, time_s):
        """When the tokens of ``replica``'s step ending at ``time_s`` reach the client."""
        return time_s if self.front_end is None else self.front_end.delivered(replica, time_s)

    def advance(self, replica: int, frontier_s: float | None) -> None:
        """``replica`` records nothing before ``frontier_s`` any more (None: it waits for work)."""
        if self.order is not None:
            self.order.advance(replica, frontier_s)

    def _at(self, time_s: float, replica: int, call: Callable, *args) -> None:
        if self.order is None:
            call(*args)
        else:
            self.order.put(time_s, replica, call, *args)

    # -- events ---------------------------------------------------------------
    def on_reject(self, request: Request, reason: str, replica: int = 0) -> None:
        """A request ``replica`` refused on arrival: counted by reason, and a row with nan times in
        the record (in time order with the other replicas' rows)."""
        self.rejected += 1
        self.rejected_by[reason] = self.rejected_by.get(reason, 0) + 1
        if self.on_done is not None:
            self.on_done(1)
        if self.record is not None:
            self._at(request.arrival_s, replica, self._reject, request, reason)

    def _reject(self, request: Request, reason: str) -> None:
        nan = float("nan")
        self._record_finished()  # the rows before it first
        self.record.request(request_id=request.rid, arrival_s=request.arrival_s,
                            prompt_tokens=request.prompt_tokens, output_tokens=request.output_tokens,
                            domain=DOMAINS[request.domain], first_scheduled_s=nan, first_token_s=nan, finish_s=nan,
                            queue_delay_ms=nan, ttft_ms=nan, tpot_ms=nan, e2el_ms=nan, num_steps=0,
                            num_preemptions=0, accepted_tokens=0, verified_drafts=0, cached_tokens=0,
                            status="rejected", reject_reason=reason)

    def on_gaps(self, last_s: np.ndarray, replica: int, time_s: float) -> None:
        """Inter-token gaps of the requests that emitted at ``time_s``: ``last_s`` the ends of the
        steps that emitted their tokens before (read now: the caller may change it after)."""
        if not last_s.size:
            return
        if self.front_end is None:  # the tokens reach the client when their steps end
            self._at(time_s, replica, self._gaps, time_s - last_s)
        else:
            self._at(time_s, replica, self._gaps_since, replica, last_s.copy(), time_s)

    def _gaps_since(self, replica: int, last_s: np.ndarray, time_s: float) -> None:
        self._gaps(self._client(replica, time_s) - self._client(replica, last_s))

    def _gaps(self, gaps: np.ndarray) -> None:
        lo, hi = gaps.min(), gaps.max()
        if lo == hi:
            self._token_gaps.append(gap_s=lo, count=gaps.size)
        else:  # np.unique's values and counts, without its overhead on a batch's few gaps
            ordered = gaps.copy()
            ordered.sort()
            bounds = np.concatenate(([True], ordered[1:] != ordered[:-1], [True])).nonzero()[0]  # and the end
            self._token_gaps.extend(gap_s=ordered[bounds[:-1]], count=bounds[1:] - bounds[:-1])

    def on_stretch(self, replica: int, st, last_s: np.ndarray) -> None:
        """The K decode steps of a :class:`~dspark_sim.serving.stretch.Stretch`, as K steps would
        record them: ``last_s`` the ends of the steps that emitted the requests' tokens before
        it (read now); after its first step, every decoding request's gap is a step."""
        # the first step's gaps: now, or (behind a front end) once its deliveries are worked out
        first = st.times_s[1] - last_s if self.front_end is None else last_s.copy()
        if self.order is None:
            return self._stretch(replica, st, 0, st.steps, first)
        if self.replicas == 1:  # (behind a front end) no other replica's record to interleave: one call
            return self.order.put(float(st.times_s[-1]), replica, self._stretch, replica, st, 0, st.steps, first)
        for k, end_s in enumerate(st.times_s[1:].tolist()):
            self.order.put(end_s, replica, self._stretch, replica, st, k, k + 1, first)

    def _stretch(self, replica: int, st, lo: int, hi: int, first: np.ndarray) -> None:
        """Steps ``lo`` to ``hi`` of stretch ``st`` (``first``: :meth:`on_stretch`'s)."""
        if lo == 0:
            if self.front_end is None:
                self._gaps(first)
            else:
                self._gaps_since(replica, first, st.times_s[1])
        later = slice(max(lo, 1), hi)
        if later.start < hi:
            ends = self._client(replica, st.times_s[later.start:hi + 1])
            self._token_gaps.extend(gap_s=ends[1:] - ends[:-1], count=st.decode_reqs[later])
        k = slice(lo, hi)
        first, runs = self._steps.n, st.decode_reqs[k]
        rows = runs if st.ghost_rows is None else runs + st.ghost_rows[k]  # an overlapping engine's ghosts too
        self._steps.extend(start_s=st.times_s[k], step_s=st.step_s[k], running=runs, decode_reqs=rows,
                          verify_tokens=st.verify_tokens[k], prefill_tokens=np.zeros(hi - lo, np.int64),
                          budget_k=st.budget[k], emitted=st.emitted[k], draft_s=st.draft_s[k], sched_s=st.sched_s[k],
                          kv_tokens=st.kv_tokens[k])
        if self.record is not None:  # a stretch prefills nothing and evicts nothing (stretch.py stops before)
            runs = runs.tolist()
            self.record.steps(step=range(first, first + hi - lo), start_s=st.times_s[k].tolist(),
                              step_s=st.step_s[k].tolist(), running_reqs=runs,
                              decode_reqs=runs if st.ghost_rows is None else rows.tolist(), prefill_tokens=0,
                              verify_tokens=st.verify_tokens[k].tolist(),
                              budget_k=one_value(st.budget[k], st.budget[k].tolist()),
                              accepted_tokens=st.emitted[k].tolist(),
                              draft_s=one_value(st.draft_s[k], st.draft_s[k].tolist()), sched_s=st.sched_s[k].tolist(),
                              decode_context_tokens=st.context_tokens[k].tolist(),
                              decode_max_context=st.max_context[k].tolist(), prefill_reqs=0, prefill_attn_tokens2=0.0,
                              prefill_longest=0, replica=replica, evicted_blocks=0, kv_tokens=st.kv_tokens[k].tolist(),
                              read_s=(st.times_s[k] + st.step_s[k]).tolist())

    def on_step(self, replica: int, step: PlannedStep, running: int, decoded: int, first_tokens: int,
                time_s: float) -> None:
        """One engine step, ending at ``time_s``: ``decoded`` tokens emitted by decoding requests
        (accepted drafts plus bonus), ``first_tokens`` by requests whose prefill completed."""
        self._at(time_s, replica, self._step, replica, step, running, decoded, first_tokens)

    def _step(self, replica: int, step: PlannedStep, running: int, decoded: int, first_tokens: int) -> None:
        work = step.work
        num_dec = work.decode_reqs  # the rows it decoded (an overlapping engine's ghosts too)
        verify = step.verify_tokens
        self._steps.append(start_s=step.start_s, step_s=step.step_s, running=running, decode_reqs=num_dec,
                          verify_tokens=verify, prefill_tokens=step.prefill_tokens, budget_k=step.budget,
                          emitted=decoded + first_tokens, draft_s=step.draft_s, sched_s=step.sched_s,
                          kv_tokens=step.kv_needed)
        if self.record is not None:
            self.record.step(step=self._steps.n - 1, start_s=step.start_s, step_s=step.step_s,
                             running_reqs=running, decode_reqs=num_dec, prefill_tokens=step.prefill_tokens,
                             verify_tokens=verify, budget_k=step.budget, accepted_tokens=decoded,
                             draft_s=step.draft_s, sched_s=step.sched_s,
                             decode_context_tokens=work.decode_context_tokens,
                             decode_max_context=work.decode_max_context, prefill_reqs=work.prefill_reqs,
                             prefill_attn_tokens2=work.prefill_attn_tokens2, prefill_longest=work.prefill_longest,
                             replica=replica,
                             evicted_blocks=step.evicted_blocks, kv_tokens=step.kv_needed,
                             read_s=step.start_s + step.step_s)

    def on_finish(self, rows: Rows, now: float | np.ndarray, replica: int = 0) -> None:
        """Requests (columns of :class:`~dspark_sim.serving.batch.Table`) that finished at ``now``
        (one time, or each request's, in the order of their times)."""
        if self.on_done is not None:
            self.on_done(len(rows))
        if self.order is None or not isinstance(now, np.ndarray):
            self._at(now if self.order is None else float(now), replica, self._finish, rows, now, replica)
            return
        starts = np.flatnonzero(np.concatenate(([True], now[1:] != now[:-1])))
        for lo, hi in zip(starts.tolist(), starts[1:].tolist() + [now.size]):  # by time, for the order
            self._at(float(now[lo]), replica, self._finish, rows.part(lo, hi), float(now[lo]),
                     replica)

    def _finish(self, rows: Rows, now: float | np.ndarray, replica: int) -> None:
        first = rows.first_token_s
        if self.front_end is not None:  # the client's times, as the front end gives them now
            first, now = self._client(replica, first), self._client(replica, now)
        self._finished.append((rows, first, now))
        self._finished_reqs += first.size
        if self._finished_reqs >= FINISHED_BLOCK:
            self._record_finished()

    def _record_finished(self) -> None:
        """Record the requests :meth:`_finish` collected, in their order, in one block: the
        same numbers each would give alone (every operation is element by element)."""
        if not self._finished:
            return
        done, self._finished, self._finished_reqs = self._finished, [], 0
        rows = Rows.joined([d[0] for d in done])
        first = np.concatenate([d[1] for d in done])
        ends = [d[2] for d in done]  # a finish time per call, or one per request where the front end gave them
        finish = np.concatenate([np.broadcast_to(e, d[1].shape) for e, d in zip(ends, done)]) \
            if any(isinstance(e, np.ndarray) for e in ends) else np.repeat(ends, [d[1].size for d in done])
        arrival = rows.arrival_s
        out = rows.output_tokens
        ttft_ms = (first - arrival) * 1e3
        e2el_ms = (finish - arrival) * 1e3
        tpot_ms = np.where(out > 1, (e2el_ms - ttft_ms) / np.maximum(out - 1, 1), np.nan)
        queue_ms = (rows.first_scheduled_s - arrival) * 1e3
        self._requests.extend(arrival_s=arrival, finish_s=finish, ttft_ms=ttft_ms, tpot_ms=tpot_ms,
                              e2el_ms=e2el_ms, queue_delay_ms=queue_ms, prompt_tokens=rows.prompt_tokens,
                              output_tokens=out, domain=rows.domain, accepted_tokens=rows.accepted_tokens,
                              verified_drafts=rows.verified_drafts, num_preemptions=rows.num_preemptions,
                              num_steps=rows.num_steps, cached_tokens=rows.cached_tokens)
        if self.record is not None:
            self.record.requests(
                request_id=rows.rid.tolist(), arrival_s=arrival.tolist(),
                prompt_tokens=rows.prompt_tokens.tolist(), output_tokens=out.tolist(),
                domain=[DOMAINS[d] for d in rows.domain.tolist()],
                first_scheduled_s=rows.first_scheduled_s.tolist(), first_token_s=first.tolist(),
                finish_s=finish.tolist(), queue_delay_ms=queue_ms.tolist(), ttft_ms=ttft_ms.tolist(),
                tpot_ms=tpot_ms.tolist(), e2el_ms=e2el_ms.tolist(), num_steps=rows.num_steps.tolist(),
                num_preemptions=rows.num_preemptions.tolist(), accepted_tokens=rows.accepted_tokens.tolist(),
                verified_drafts=rows.verified_drafts.tolist(), cached_tokens=rows.cached_tokens.tolist(),
                status=COMPLETED, reject_reason="")

    def close(self) -> None:
        """Make the held events, then finish the record's files."""
        if self.front_end is not None:  # every request is in: the deliveries of the last steps
            self.front_end.settle()
        if self.order is not None:
            self.order.release()
        self._record_finished()
        if self.record is not None:
            self.record.close()


def one_value(column: np.ndarray, values: list):
    """``values`` (``column`` as a list): its one value where all are equal and write alike (so
    a record writes it once; 0.0 and -0.0 are equal but do not), else ``values``."""
    if not values:
        return values
    first = values[0]
    if values.count(first) != len(values):
        return values
    if isinstance(first, float) and first == 0.0:
        negative = np.signbit(column)
        if negative.any() and not negative.all():
            return values
    return first
