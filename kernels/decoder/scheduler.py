"""Continuous batching: admission, chunked prefill, decode batches, preemption.

``prefill_first`` (SGLang's default): a step prefills chunks of waiting or partly
prefilled requests, up to ``max_batched_tokens``, whenever any prompt work fits, and
decodes every running request otherwise. ``mixed`` (vLLM, Sarathi): every step decodes
the running requests and fills the rest of the token budget (a decoding request counts
its whole verify window) with prompt chunks. Admission stops at ``max_running_requests``
or when the pages run out; a decode step short of pages preempts the newest request
(recompute: it re-prefills its tokens later).

Steps overlap: the plan for step n+1 is made while step n runs, so the host's token
counts lag by what launched steps may still add (``Sequence.pending``); pages are
reserved for that much more, a request that step n surely finishes is left out, and
a preemption first lets the launched step finish (:data:`DRAIN`).
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass

DRAIN = "drain"  # next_step: pages ran short while a step is in flight; finish it, then ask again


@dataclass(slots=True)
class Plan:
    """One step: decoding requests and ``(request, tokens)`` prompt chunks."""

    decode: list
    prefill: list

    def seqs(self) -> list:
        return self.decode + [s for s, _ in self.prefill]


class Scheduler:
    """Waiting queue and running set of :class:`~.sequence.Sequence` objects."""

    def __init__(self, decoder):
        self.decoder = decoder
        self.conf = decoder.conf
        self.waiting: deque = deque()
        self.running: list = []

    def add(self, seq) -> None:
        self.waiting.append(seq)

    def refusal(self, seq) -> tuple[str, str] | None:
        """Why ``seq`` is refused on arrival, as the engines refuse it (:mod:`dspark_sim.serving.admission`):
        ``(reason, the line saying so)``, or None when it can be served. A request longer than
        ``max_model_len`` (prompt + output), or than the KV cache holds for it alone with its
        steps' slack (:attr:`~.config.DecoderConfig.max_positions`), would never finish."""
        from dspark_sim.serving.admission import CONTEXT, Admission

        conf, pages = self.conf, self.decoder.pages
        slack = conf.max_positions - conf.max_model_len
        rule = Admission(conf.max_model_len, pages.capacity_tokens, spec_slots=slack)
        reason = rule.refusal(seq.prompt_len, seq.max_tokens)
        if reason is None:
            return None
        limit = (f"max-model-len {conf.max_model_len}" if reason == CONTEXT else
                 f"the {rule.kv_tokens} tokens the KV cache holds for one request ({pages.capacity_tokens} "
                 f"less {slack} for the steps in flight)")
        return reason, (f"request {seq.id} refused: prompt {seq.prompt_len} + output {seq.max_tokens} tokens "
                        f"exceed {limit}")

    def idle(self) -> bool:
        return not self.waiting and not self.running

    def next_step(self):
        """A :class:`Plan`, ``None`` (nothing to run) or :data:`DRAIN`."""
        conf = self.conf
        if conf.batching == "mixed":
            decode = self._decode_batch()
            if decode == DRAIN:
                return DRAIN
            prefill = self._prefill_work(conf.max_batched_tokens - len(decode) * conf.window)
        else:
            prefill = self._prefill_work(conf.max_batched_tokens)
            decode = [] if prefill else self._decode_batch()
            if decode == DRAIN:
                return DRAIN
        return Plan(decode, prefill) if decode or prefill else None

    def _prefill_work(self, budget: int) -> list:
        pages, work = self.decoder.pages, []
        for seq in self.running:
            if seq.prefilling and budget > 0:
                n = min(seq.prefill_target - seq.num_cached, budget)
                if pages.reserve(seq, seq.num_cached + n):
                    work.append((seq, n))
                    budget -= n
        while self.waiting and budget > 0 and len(self.running) < self.conf.max_running_requests:
            seq = self.waiting[0]
            self.decoder.admit(seq)  # with a prefix cache, its cached pages: num_cached > 0
            n = min(seq.prefill_target - seq.num_cached, budget)
            if not pages.reserve(seq, seq.num_cached + n):
                self.decoder.release(seq)
                break
            self.waiting.popleft()
            self.running.append(seq)
            work.append((seq, n))
            budget -= n
        return work

    def _decode_batch(self):
        block_size, pages = self.conf.block_size, self.decoder.pages
        while True:
            batch = [s for s in self.running if not s.prefilling
                     and s.num_outputs + s.pending_min < s.max_tokens]  # else a launched step ends it
            if all(pages.reserve(s, len(s.tokens) + s.pending + block_size) for s in batch):
                return batch
            if any(s.pending for s in self.running):
                return DRAIN
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
