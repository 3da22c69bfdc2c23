"""Continuous batching: admission, chunked prefill, decode batches, preemption.

Each step is a prefill step (chunks of waiting or partly prefilled requests up
to ``max_batched_tokens``) when any prefill work fits, else a decode step over
every running request. Admission stops at ``max_running_requests`` or when the
pages run out; a decode step short of pages preempts the newest request
(recompute: it re-prefills its tokens later).
"""
from __future__ import annotations

from collections import deque


class Scheduler:
    """Waiting queue and running set of :class:`~.sequence.Sequence` objects."""

    def __init__(self, decoder):
        self.decoder = decoder
        self.conf = decoder.conf
        self.waiting: deque = deque()
        self.running: list = []

    def add(self, seq) -> None:
        self.waiting.append(seq)

    def idle(self) -> bool:
        return not self.waiting and not self.running

    def next_step(self):
        """``("prefill", [(seq, tokens)])``, ``("decode", [seq])`` or ``None`` (idle)."""
        work = self._prefill_work()
        if work:
            return "prefill", work
        batch = self._decode_batch()
        return ("decode", batch) if batch else None

    def _prefill_work(self) -> list:
        budget = self.conf.max_batched_tokens
        pages, work = self.decoder.pages, []
        for seq in self.running:
            if seq.prefilling and budget > 0:
                n = min(seq.prefill_target - seq.num_cached, budget)
                if pages.reserve(seq, seq.num_cached + n):
                    work.append((seq, n))
                    budget -= n
        while self.waiting and budget > 0 and len(self.running) < self.conf.max_running_requests:
            seq = self.waiting[0]
            n = min(seq.prefill_target, budget)
            self.decoder.admit(seq)
            if not pages.reserve(seq, n):
                self.decoder.release(seq)
                break
            self.waiting.popleft()
            self.running.append(seq)
            work.append((seq, n))
            budget -= n
        return work

    def _decode_batch(self) -> list:
        gamma, pages = self.conf.gamma, self.decoder.pages
        while True:
            batch = [s for s in self.running if not s.prefilling]
            if all(pages.reserve(s, len(s.tokens) + gamma) for s in batch):
                return batch
            self.preempt(self.running[-1])

    def preempt(self, seq) -> None:
        """Free ``seq``'s cache and put it back at the head of the queue."""
        self.running.remove(seq)
        self.decoder.release(seq)
        seq.num_preemptions += 1
        self.waiting.appendleft(seq)

    def finish(self, seq) -> None:
        self.running.remove(seq)
        self.decoder.release(seq)
