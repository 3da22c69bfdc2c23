"""Time the decoder's own step functions: verify, draft and prefill.

Each point sets up requests whose prompts are marked cached without running
them (the cache holds random values), then times the decoder's step: the
verify and draft steps through their CUDA graphs (median of replays, the
window tokens rotating between two sets), prefill eagerly, as the decoder runs it.
"""
from __future__ import annotations

import time

import numpy as np
import torch

from dspark_sim.kernels.decoder.graphs import request_tier
from dspark_sim.kernels.decoder.sequence import Sequence
from dspark_sim.kernels.profiler.timing import median_seconds

DRAFT_CONTEXT = 1024


class Stepper:
    """Builds timing points on one :class:`~dspark_sim.kernels.decoder.Decoder`."""

    def __init__(self, decoder, reps: int = 10, seed: int = 0):
        self.dec = decoder
        self.reps = reps
        self.rng = np.random.default_rng(seed)
        self.vocab = decoder.spec.vocab_size

    def _requests(self, reqs: int, context: int) -> list | None:
        """``reqs`` requests with ``context`` cached tokens and an anchor; None if short of pages."""
        seqs = []
        for i in range(reqs):
            s = Sequence(i, self.rng.integers(0, self.vocab, context).tolist(), max_tokens=1 << 30)
            s.tokens.append(int(self.rng.integers(0, self.vocab)))
            seqs.append(s)
            if not self.dec.fake_prefill(s):
                self._release(seqs)
                return None
        self.dec.pages.flush()
        return seqs

    def _release(self, seqs) -> None:
        for s in seqs:
            if s.row is not None:
                self.dec.release(s)

    def _windows(self, rp: int, width: int) -> list[torch.Tensor]:
        return [torch.from_numpy(self.rng.integers(0, self.vocab, (rp, width))).to(self.dec.device)
                for _ in range(2)]

    def verify(self, reqs: int, tokens: int, context: int) -> float | None:
        """Seconds of one verify step: ``tokens`` window tokens over ``reqs`` requests."""
        dec = self.dec
        seqs = self._requests(reqs, context)
        if seqs is None:
            return None
        try:
            vlen = np.full(reqs, tokens // reqs, np.int64)
            vlen[: tokens % reqs] += 1
            rp = request_tier(reqs, dec.conf.max_running_requests)
            rows = np.full(rp, dec.pages.dummy_row, np.int64)
            rows[:reqs] = [s.row for s in seqs]
            pos = np.array([len(s.tokens) - 1 for s in seqs], np.int64)
            wins = self._windows(rp, int(vlen.max()))
            dec.graphs.clear()
            dec._verify(wins[0], vlen, pos + vlen, rows[:reqs], rp)
            static = dec.graphs.last[1][0] if dec.graphs.enabled else None
            rotate = (lambda i: static.copy_(wins[i % 2])) if static is not None else None
            return median_seconds(dec.graphs.replay_last, self.reps, between=rotate)
        finally:
            dec.graphs.clear()
            self._release(seqs)

    def draft(self, reqs: int, gamma: int, context: int = DRAFT_CONTEXT) -> float | None:
        """Seconds of one draft step (backbone + Markov loop + confidence) at block ``gamma``."""
        dec = self.dec
        seqs = self._requests(reqs, context)
        if seqs is None:
            return None
        old = dec.drafter.gamma
        try:
            dec.drafter.gamma = gamma
            rp = request_tier(reqs, dec.conf.max_running_requests)
            rows = np.full(rp, dec.pages.dummy_row, np.int64)
            rows[:reqs] = [s.row for s in seqs]
            pos = np.zeros(rp, np.int64)
            pos[:reqs] = [len(s.tokens) - 1 for s in seqs]
            anchors = torch.from_numpy(self.rng.integers(0, self.vocab, rp)).to(dec.device)
            temp = torch.ones(rp, device=dec.device)
            dec.graphs.clear()
            dec._draft(anchors, temp, pos, rows, rp)
            return median_seconds(dec.graphs.replay_last, self.reps)
        finally:
            dec.drafter.gamma = old
            dec.graphs.clear()
            self._release(seqs)

    def prefill(self, chunk: int, cached: int) -> float | None:
        """Seconds of one prefill step: a ``chunk``-token piece after ``cached`` tokens."""
        dec = self.dec
        s = Sequence(0, self.rng.integers(0, self.vocab, cached + chunk + 1).tolist(), 1)
        dec.admit(s)
        try:
            if not dec.pages.reserve(s, cached + chunk):
                return None

            def step():
                s.num_cached = cached
                dec.prefill([(s, chunk)])
            return median_seconds(step, max(3, self.reps // 3), warmup=1)
        finally:
            dec.release(s)


def run_part(points, fn, deadline: float, log) -> tuple[list, list]:
    """Time ``fn(*point)`` for each point until ``deadline``; ``(rows, skipped points)``."""
    rows, skipped = [], []
    for i, point in enumerate(points):
        if time.perf_counter() > deadline:
            skipped.extend(points[i:])
            break
        seconds = fn(*point)
        if seconds is None:
            skipped.append(point)
            continue
        rows.append((point, seconds))
        log(point, seconds)
    return rows, skipped
