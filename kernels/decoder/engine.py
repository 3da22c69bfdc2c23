"""The serving loop: replay requests through the decoder, write the simulator's CSVs.

Arrivals are honoured in real time (``realtime=True``: idle gaps are slept) or as
fast as possible (idle gaps are skipped on a virtual clock, so busy periods keep
their real durations). Times are seconds from the first arrival.

A step's row covers the engine's whole cycle: from the end of the previous step
(its tokens out) through retiring finished requests, admitting and scheduling
(``sched_s``, the host time between two steps) to the end of this step's GPU
work. While serving, the objects alive before it are frozen out of the garbage
collector (``gc.freeze``, as vLLM does after start-up): the model, kernels and graphs are
never garbage, and collections then scan only what serving allocates.
"""
from __future__ import annotations

import gc
import time
from dataclasses import dataclass, field
from pathlib import Path

from dspark_sim.kernels.decoder.scheduler import Scheduler
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


def serve(decoder, seqs: list, realtime: bool = False, max_steps: int | None = None,
          on_step=None) -> Run:
    """Serve ``seqs`` (sorted by ``arrival_s``) to completion; returns their rows.
    ``on_step(row)``, if given, sees each step's row as soon as the step ends."""
    sched, clock, run = Scheduler(decoder), Clock(realtime), Run(sequences=seqs)
    pending = list(reversed(seqs))
    gc.collect()
    gc.freeze()
    try:
        mark = clock.now()  # end of the last step (or of the last idle wait)
        while pending or not sched.idle():
            while pending and pending[-1].arrival_s <= clock.now():
                sched.add(pending.pop())
            plan = sched.next_step()
            if plan is None:
                clock.wait_until(pending[-1].arrival_s)
                mark = clock.now()
                continue
            kind, work = plan
            start = clock.now()
            for seq in (s for s, _ in work) if kind == "prefill" else work:
                if seq.first_scheduled_s is None:
                    seq.first_scheduled_s = start
            shape = _work_columns(kind, work)
            stats = decoder.prefill(work) if kind == "prefill" else decoder.decode(work)
            decoder.sync()
            end = clock.now()
            run.steps.append(_step_row(len(run.steps), mark, end, start - mark, len(sched.running),
                                       stats, shape))
            if on_step is not None:
                on_step(run.steps[-1])
            for seq in list(sched.running):
                if seq.first_token_s is None and seq.num_outputs:
                    seq.first_token_s = end
                if seq.done:
                    seq.finish_s = end
                    sched.finish(seq)
                    run.requests.append(request_row(seq))
            mark = end
            if max_steps is not None and len(run.steps) >= max_steps:
                break
    finally:
        gc.unfreeze()
    return run


def _work_columns(kind: str, work: list) -> dict:
    """What the step does, in the cost model's terms (``StepWork``): KV tokens of the
    decoding requests (sum and longest), prefill requests and their attention pairs."""
    if kind == "prefill":
        return {"decode_context_tokens": 0, "decode_max_context": 0, "prefill_reqs": len(work),
                "prefill_attn_tokens2": sum(n * (s.num_cached + n / 2) for s, n in work)}
    lengths = [len(s.tokens) for s in work]
    return {"decode_context_tokens": sum(lengths), "decode_max_context": max(lengths, default=0),
            "prefill_reqs": 0, "prefill_attn_tokens2": 0.0}


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


def write_csvs(run: Run, out_dir: str | Path) -> None:
    """Write the run record (``requests.csv``, ``steps.csv``, the simulator's files) into ``out_dir``."""
    write_record(out_dir, run.requests, run.steps)
