"""Collects what the replicas report: per-request rows, per-step rows, token gaps.

Per-request and per-step rows stream to the run record (:mod:`dspark_sim.metrics.record`)
as they happen (so a million-request run never holds a million row objects); the few
columns the summary needs stay in compact numpy arrays.
"""
from __future__ import annotations

import warnings
from array import array
from pathlib import Path

import numpy as np

from dspark_sim.metrics.record import RecordWriter
from dspark_sim.names import DOMAINS


class Growing:
    """Append-only numeric columns backed by numpy arrays that double as they fill."""

    def __init__(self, dtypes: dict[str, type]):
        self.n = 0
        self.cols = {k: np.zeros(1024, dtype=t) for k, t in dtypes.items()}

    def extend(self, **values) -> None:
        size = np.size(next(iter(values.values())))
        if self.n + size > self.cols[next(iter(self.cols))].size:
            cap = max(2 * (self.n + size), 1024)
            for k, col in self.cols.items():
                new = np.zeros(cap, dtype=col.dtype)
                new[: self.n] = col[: self.n]
                self.cols[k] = new
        for k, v in values.items():
            self.cols[k][self.n: self.n + size] = v
        self.n += size

    def __getitem__(self, key: str) -> np.ndarray:
        return self.cols[key][: self.n]


class Columns:
    """Append-one-row-at-a-time numeric columns (``array.array``: compact and cheap to append)."""

    def __init__(self, typecodes: dict[str, str]):
        self.cols = {k: array(t) for k, t in typecodes.items()}
        self._appends = [c.append for c in self.cols.values()]

    @property
    def n(self) -> int:
        return len(next(iter(self.cols.values())))

    def append(self, *values) -> None:
        for add, v in zip(self._appends, values):
            add(v)

    def __getitem__(self, key: str) -> np.ndarray:
        return np.frombuffer(self.cols[key], dtype=self.cols[key].typecode) if self.n else np.zeros(0)


class Collector:
    """Receives engine events; writes the run record (``requests.csv``, ``steps.csv``) into ``out_dir``."""

    def __init__(self, out_dir: Path | None):
        self.requests = Growing({"arrival_s": np.float64, "finish_s": np.float64, "ttft_ms": np.float64,
                                 "tpot_ms": np.float64, "e2el_ms": np.float64, "queue_delay_ms": np.float64,
                                 "prompt_tokens": np.int64, "output_tokens": np.int64, "domain": np.int8,
                                 "accepted_tokens": np.int64, "verified_drafts": np.int64,
                                 "num_preemptions": np.int64, "num_steps": np.int64, "cached_tokens": np.int64})
        self.steps = Columns({"start_s": "d", "step_s": "d", "running": "i", "decode_reqs": "i",
                              "verify_tokens": "i", "prefill_tokens": "i", "budget_k": "i", "emitted": "i",
                              "draft_s": "d", "sched_s": "d"})
        self.gaps = Growing({"gap_s": np.float64, "count": np.int64})
        self.rejected = 0
        self.record = RecordWriter(out_dir) if out_dir is not None else None

    # -- events ---------------------------------------------------------------
    def on_reject(self, request: dict, why: str) -> None:
        self.rejected += 1
        if self.rejected == 1:
            warnings.warn(f"request {request['rid']} rejected: {why} (further rejections counted)")

    def on_gaps(self, gaps: np.ndarray) -> None:
        if gaps.size == 0:
            return
        lo, hi = gaps.min(), gaps.max()
        if lo == hi:
            self.gaps.extend(gap_s=[lo], count=[gaps.size])
        else:
            values, counts = np.unique(gaps, return_counts=True)
            self.gaps.extend(gap_s=values, count=counts)

    def on_step(self, replica: int, step: dict, running: int, decoded: int, first_tokens: int) -> None:
        """One engine step: ``decoded`` tokens emitted by decoding requests (accepted drafts plus
        bonus), ``first_tokens`` by requests whose prefill completed; ``step["work"]`` its
        :class:`~dspark_sim.cost.base.StepWork`."""
        num_dec = step["num_dec"]
        verify = step["tokens"] - step["prefill_tokens"]
        self.steps.append(step["start_s"], step["step_s"], running, num_dec, verify, step["prefill_tokens"],
                          step["budget"], decoded + first_tokens, step["draft_s"], step["sched_s"])
        if self.record is not None:
            work = step["work"]
            self.record.step((self.steps.n - 1, step["start_s"], step["step_s"], running, num_dec,
                              step["prefill_tokens"], verify, step["budget"], decoded, step["draft_s"],
                              step["sched_s"], work.decode_context_tokens, work.decode_max_context,
                              work.prefill_reqs, work.prefill_attn_tokens2, replica, step["evicted_blocks"]))

    def on_finish(self, rows: dict[str, np.ndarray], now: float) -> None:
        arrival = rows["arrival_s"]
        out = rows["output_tokens"]
        ttft_ms = (rows["first_token_s"] - arrival) * 1e3
        e2el_ms = (now - arrival) * 1e3
        tpot_ms = np.where(out > 1, (e2el_ms - ttft_ms) / np.maximum(out - 1, 1), np.nan)
        queue_ms = (rows["first_scheduled_s"] - arrival) * 1e3
        finish = np.full(arrival.size, now)
        self.requests.extend(arrival_s=arrival, finish_s=finish, ttft_ms=ttft_ms, tpot_ms=tpot_ms,
                             e2el_ms=e2el_ms, queue_delay_ms=queue_ms, prompt_tokens=rows["prompt_tokens"],
                             output_tokens=out, domain=rows["domain"], accepted_tokens=rows["accepted_tokens"],
                             verified_drafts=rows["verified_drafts"], num_preemptions=rows["num_preemptions"],
                             num_steps=rows["num_steps"], cached_tokens=rows["cached_tokens"])
        if self.record is not None:
            n = arrival.size
            self.record.requests(zip(
                rows["rid"].tolist(), arrival.tolist(), rows["prompt_tokens"].tolist(), out.tolist(),
                [DOMAINS[d] for d in rows["domain"].tolist()], rows["first_scheduled_s"].tolist(),
                rows["first_token_s"].tolist(), [now] * n, queue_ms.tolist(), ttft_ms.tolist(), tpot_ms.tolist(),
                e2el_ms.tolist(), rows["num_steps"].tolist(), rows["num_preemptions"].tolist(),
                rows["accepted_tokens"].tolist(), rows["verified_drafts"].tolist(), rows["cached_tokens"].tolist()))

    def close(self) -> None:
        """Finish the record's files."""
        if self.record is not None:
            self.record.close()
