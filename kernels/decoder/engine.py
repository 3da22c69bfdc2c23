"""The serving loop: replay requests through the decoder, write the simulator's CSVs.

Arrivals are honoured in real time (``realtime=True``: idle gaps are slept) or as
fast as possible (idle gaps are skipped on a virtual clock, so busy periods keep
their real durations). Times are seconds from the first arrival.

Steps overlap (as SGLang's overlap scheduler): step n+1 is planned and launched
while step n runs, then step n's tokens are read and committed. A step's row covers
the engine's whole cycle on the GPU: from the end of the previous step to the end of
this one; ``sched_s`` is the GPU's idle time before the step (the host time the
overlap did not hide: retiring, admitting, scheduling, launching). The rows are written
through :mod:`dspark_sim.metrics.record`, the simulator's run record. While serving, the
objects alive before it are frozen out of the garbage collector (``gc.freeze``, as vLLM
does after start-up): the model, kernels and graphs are never garbage, and collections
then scan only what serving allocates. The serving clock starts after the freeze.
"""
from __future__ import annotations

import gc
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from dspark_sim.kernels.decoder.faults import device_faults, serving, step_shape
from dspark_sim.kernels.decoder.scheduler import DRAIN, Scheduler
from dspark_sim.metrics.record import write_record
from dspark_sim.names import DOMAINS


class Clock:
    """Seconds since start; ``skip`` moves it forward without waiting."""

    def __init__(self, realtime: bool):
        self.realtime = realtime
        self.t0 = time.perf_counter()
        self.skew = 0.0

    def now(self) -> float:
        return time.perf_counter() - self.t0 + self.skew

    def wait_until(self, t: float) -> None:
        gap = t - self.now()
        if gap <= 0:
            return
        if self.realtime:
            time.sleep(gap)
        else:
            self.skew += gap


@dataclass
class Run:
    """Rows of one served trace."""

    requests: list[dict] = field(default_factory=list)
    steps: list[dict] = field(default_factory=list)
    sequences: list = field(default_factory=list)
    refused: list[str] = field(default_factory=list)  # one line per request refused on arrival


def serve(decoder, seqs: list, realtime: bool = False, max_steps: int | None = None,
          on_step=None, overlap: bool = True, clock: Clock | None = None) -> Run:
    """Serve ``seqs`` (sorted by ``arrival_s``) to completion; returns their rows.
    ``on_step(row)``, if given, sees each step's row as soon as the step ends.
    ``overlap``: launch step n+1 before reading step n's tokens (the default, as
    SGLang's overlap scheduler and vLLM's asynchronous scheduling); False waits for
    each step before planning the next. ``clock``: the serving clock (default a
    :class:`Clock` of ``realtime``; a virtual one times steps by a cost model, see
    :mod:`dspark_sim.validation.lockstep`)."""
    gc.collect()
    gc.freeze()
    # the clock starts once the collector is set (a collection of a model's heap takes ~0.1 s,
    # which the first request's TTFT would otherwise carry)
    loop = _Loop(decoder, Scheduler(decoder), clock or Clock(realtime), Run(sequences=seqs), on_step)
    arrivals = list(reversed(seqs))
    sched, clock, flight = loop.sched, loop.clock, None  # flight: the launched, unfinished step
    try:
        loop.restart()
        while arrivals or not sched.idle() or flight is not None:
            while arrivals and arrivals[-1].arrival_s <= clock.now():
                loop.arrive(arrivals.pop())
            plan = sched.next_step()
            if flight is not None and (plan is None or plan == DRAIN):
                loop.land(flight)
                flight = None
                continue
            if plan is None:
                clock.wait_until(arrivals[-1].arrival_s)
                loop.restart()
                continue
            launched = clock.now()
            for seq in plan.seqs():
                if seq.first_scheduled_s is None:
                    seq.first_scheduled_s = launched
            work = _work_columns(plan)  # before the launch moves the chunks' cached counts on
            words = step_shape(plan, decoder.conf.window)
            with device_faults(serving(words, flight.words if flight is not None else None)):
                step = _Flight(decoder.launch(plan.decode, plan.prefill), work, len(sched.running), launched, words)
            if flight is not None:
                loop.land(flight)
            flight = step
            if not overlap:
                loop.land(flight)
                flight = None
            if max_steps is not None and len(loop.run.steps) + (flight is not None) >= max_steps:
                break
        if flight is not None:
            loop.land(flight)
    finally:
        gc.unfreeze()
    return loop.run


@dataclass(slots=True)
class _Flight:
    """A launched step: the decoder's handle, its work columns, the running count, launch time."""

    pending: object
    shape: dict
    running: int
    launched_s: float
    words: str  # the step's shape in words (:func:`step_shape`), for a device fault's line


@dataclass
class _Loop:
    """The serving loop's state between steps.

    Step rows follow the GPU: a step ends when the GPU ends it (its ``end`` event, on the
    serving clock through an event recorded at a known time after each idle wait), not
    when the host reads it, which under overlap is after launching the next step; a
    long launch (an eager prefill) would otherwise move GPU time into the previous row.
    Requests' times are when the host reads their tokens, as a client sees them.
    """

    decoder: object
    sched: Scheduler
    clock: Clock
    run: Run
    on_step: object
    mark: float = 0.0  # where the next row starts: the last step's end, or the last idle wait's
    last: object = None  # the last landed step's handle (None after an idle wait)
    anchor: tuple | None = None  # (event, serving-clock seconds) on the GPU

    def restart(self) -> None:
        """After an idle wait (or at the start): rows restart at the clock, the GPU's timeline
        is anchored anew."""
        self.mark, self.last = self.clock.now(), None
        if self.decoder.device.type == "cuda":
            torch.cuda.synchronize(self.decoder.device)
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            event.synchronize()
            self.anchor = (event, self.clock.now())

    def arrive(self, seq) -> None:
        """Queue an arrived request, or refuse it (a row with its reason, and a line) when it
        can never be served (:meth:`~.scheduler.Scheduler.refusal`)."""
        refused = self.sched.refusal(seq)
        if refused is None:
            self.sched.add(seq)
            return
        self.run.requests.append(rejected_row(seq, refused[0]))
        self.run.refused.append(refused[1])

    def land(self, flight: _Flight) -> None:
        """Finish ``flight``: its row, first tokens, retirements. ``sched_s``: the GPU's idle
        time before the step (host time the overlap did not hide), or, after an idle wait,
        the host time before its launch."""
        with device_faults(serving(None, flight.words)):
            stats = self.decoder.finish(flight.pending)
        seen = self.clock.now()
        timer = flight.pending.timer
        end = seen
        if self.anchor is not None and timer.cuda:
            end = min(seen, self.anchor[1] + self.anchor[0].elapsed_time(timer.marks["end"]) / 1e3)
        end = max(end, self.mark)
        gap = flight.launched_s - self.mark if self.last is None else self.last.timer.gap_to(timer)
        self.run.steps.append(_step_row(len(self.run.steps), self.mark, end, min(max(gap, 0.0), end - self.mark),
                                        flight.running, stats, flight.shape) | {"read_s": seen})
        if self.on_step is not None:
            self.on_step(self.run.steps[-1])
        for seq in list(self.sched.running):
            if seq.first_token_s is None and seq.num_outputs:
                seq.first_token_s = seen
            if seq.done:  # a launched step may still hold it: it writes nothing the stream has not ordered
                seq.finish_s = seen
                self.sched.finish(seq)
                self.run.requests.append(request_row(seq))
        self.mark, self.last = end, flight.pending


def _work_columns(plan) -> dict:
    """What the step does, in the cost model's terms (``StepWork``): KV tokens of the
    decoding requests (sum and longest), prefill requests, their attention pairs and the
    longest chunk (the attention plans every row for it)."""
    lengths = [len(s.tokens) + s.pending for s in plan.decode]
    return {"decode_context_tokens": sum(lengths), "decode_max_context": max(lengths, default=0),
            "prefill_reqs": len(plan.prefill),
            "prefill_attn_tokens2": sum(n * (s.num_cached + n / 2) for s, n in plan.prefill),
            "prefill_longest": max((int(n) for _, n in plan.prefill), default=0)}


def _step_row(i: int, start: float, end: float, sched_s: float, running: int, st, shape: dict) -> dict:
    return {"step": i, "start_s": start, "step_s": end - start, "running_reqs": running,
            "decode_reqs": st.decode_reqs, "prefill_tokens": st.prefill_tokens,
            "verify_tokens": st.verify_tokens, "budget_k": st.budget_k,
            "accepted_tokens": st.accepted_tokens, "draft_s": st.draft_s, "sched_s": sched_s, **shape}


def request_row(seq) -> dict:
    """One ``requests.csv`` row of a finished sequence."""
    out = seq.num_outputs
    ms = 1e3
    tpot = (seq.finish_s - seq.first_token_s) * ms / (out - 1) if out > 1 else float("nan")
    return {"request_id": seq.id, "arrival_s": seq.arrival_s, "prompt_tokens": seq.prompt_len,
            "output_tokens": out, "domain": DOMAINS[seq.domain],
            "first_scheduled_s": seq.first_scheduled_s, "first_token_s": seq.first_token_s,
            "finish_s": seq.finish_s,
            "queue_delay_ms": (seq.first_scheduled_s - seq.arrival_s) * ms,
            "ttft_ms": (seq.first_token_s - seq.arrival_s) * ms, "tpot_ms": tpot,
            "e2el_ms": (seq.finish_s - seq.arrival_s) * ms, "num_steps": seq.num_steps,
            "num_preemptions": seq.num_preemptions, "accepted_tokens": seq.accepted,
            "verified_drafts": seq.verified, "cached_tokens": seq.cached_tokens}


def rejected_row(seq, reason: str) -> dict:
    """The ``requests.csv`` row of a request refused on arrival: no times (nan), the reason."""
    nan = float("nan")
    return {"request_id": seq.id, "arrival_s": seq.arrival_s, "prompt_tokens": seq.prompt_len,
            "output_tokens": seq.max_tokens, "domain": DOMAINS[seq.domain], "first_scheduled_s": nan,
            "first_token_s": nan, "finish_s": nan, "queue_delay_ms": nan, "ttft_ms": nan, "tpot_ms": nan,
            "e2el_ms": nan, "num_steps": 0, "num_preemptions": 0, "accepted_tokens": 0, "verified_drafts": 0,
            "cached_tokens": 0, "status": "rejected", "reject_reason": reason}


def write_csvs(run: Run, out_dir: str | Path) -> None:
    """Write the run record (``requests.csv``, ``steps.csv``, the simulator's files) into ``out_dir``."""
    write_record(out_dir, run.requests, run.steps)
