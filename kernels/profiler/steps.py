"""Time the decoder's own step functions: verify, draft, prefill and whole decode steps.

Each point sets up requests whose prompts are marked cached without running
them (the cache holds random values), then times the decoder's step: the
verify and draft steps through their CUDA graphs (median of replays, the
window tokens rotating between two sets), prefill as the decoder runs it (a
CUDA graph up to 512 tokens, eager above; wall time, host included). Whole decode
steps (``Stepper.decode_step``) run back to back as the serving loop runs them,
step n+1 launched before step n's tokens are read: graph replays plus sampling,
``schedule_verify``, ``accept`` and the commit, the host's work hidden behind the
GPU's where it fits; the fit takes what the graphs do not explain as the engine's
per-step host time.
"""
from __future__ import annotations

import gc
import statistics
import time
from collections import Counter
from contextlib import contextmanager

import numpy as np
import torch

from dspark_sim.kernels.decoder.drafter import Chain
from dspark_sim.kernels.decoder.graphs import request_tier, token_tier
from dspark_sim.kernels.decoder.model import drafter_features
from dspark_sim.kernels.decoder.sequence import Sequence
from dspark_sim.kernels.decoder.weights import init_random
from dspark_sim.kernels.profiler.timing import median_seconds

DRAFT_CONTEXT = 1024


class Stepper:
    """Builds timing points on one :class:`~dspark_sim.kernels.decoder.Decoder`."""

    def __init__(self, decoder, reps: int = 10, seed: int = 0, prefill_idle: float = 0.0):
        self.dec = decoder
        self.reps = reps
        self.prefill_idle = prefill_idle  # idle seconds after a timed prefill, per second it took
        self.rng = np.random.default_rng(seed)
        self.vocab = decoder.spec.vocab_size
        self._chain = None
        self._prefill_decoders: dict = {}

    def _requests(self, reqs: int, context: int) -> list | None:
        return self.dec.fake_requests(reqs, context, self.rng)

    def _release(self, seqs) -> None:
        for s in seqs:
            self.dec.release(s)

    def _rows(self, seqs, rp: int) -> torch.Tensor:
        """Table rows of ``seqs``, padded to ``rp`` with the dummy row, on the device."""
        rows = np.full(rp, self.dec.pages.dummy_row, np.int64)
        rows[:len(seqs)] = [s.row for s in seqs]
        return self._tensor(rows, torch.int64)

    def _tensor(self, array: np.ndarray, dtype) -> torch.Tensor:
        return torch.from_numpy(array).to(self.dec.device, dtype)

    def _windows(self, rp: int, width: int) -> list[torch.Tensor]:
        return [torch.from_numpy(self.rng.integers(0, self.vocab, (rp, width))).to(self.dec.device)
                for _ in range(2)]

    def verify_mixed(self, reqs: int, tokens: int, short: int, long: int) -> dict | None:
        """:meth:`verify` over ``reqs - 1`` requests of ``short`` tokens and one of ``long``:
        ``{"step_s", "context": the mean, "max_context": long}``."""
        seconds = self.verify(reqs, tokens, short, long)
        if seconds is None:
            return None
        return {"step_s": seconds, "context": round(((reqs - 1) * short + long) / reqs),
                "max_context": long}

    def verify(self, reqs: int, tokens: int, context: int, long: int | None = None) -> float | None:
        """Seconds of one verify step: ``tokens`` window tokens over ``reqs`` requests
        (the last of ``long`` tokens, when given)."""
        lengths = [context] * (reqs - (long is not None)) + ([long] if long is not None else [])
        return self.verify_lengths(lengths, tokens)

    def verify_spread(self, reqs: int, tokens: int, mean: int, sigma: float) -> dict | None:
        """:meth:`verify` over ``reqs`` requests whose contexts are drawn lognormal (mean
        ``mean`` tokens, log-sd ``sigma``, 32..8192, a fixed draw per point), as served
        traffic holds them: ``{"step_s", "context": the mean drawn, "max_context",
        "uniform_s": the same step with every request at that mean}``."""
        rng = np.random.default_rng(reqs * 1000 + tokens)
        lengths = np.clip(np.round(rng.lognormal(np.log(mean) - sigma ** 2 / 2, sigma, reqs)), 32, 8192)
        lengths = [int(x) for x in lengths]
        seconds = self.verify_lengths(lengths, tokens)
        context = round(sum(lengths) / reqs)
        uniform = self.verify_lengths([context] * reqs, tokens)
        if seconds is None or uniform is None:
            return None
        return {"step_s": seconds, "context": context, "max_context": max(lengths), "uniform_s": uniform}

    def verify_lengths(self, lengths: list[int], tokens: int) -> float | None:
        """Seconds of one verify step of ``tokens`` window tokens over requests of the
        given context lengths (median of graph replays, window tokens rotating)."""
        graph = self.verify_graph(lengths, tokens)
        if graph is None:
            return None
        replay, rotate, seqs = graph
        try:
            return median_seconds(replay, self.reps, between=rotate)
        finally:
            self.dec.graphs.clear()
            self._release(seqs)

    def requests_of(self, lengths: list[int], decoder=None) -> list | None:
        """Requests of the given context lengths on ``decoder`` (default: the stepper's; None,
        and nothing held, when the pages do not hold them all)."""
        dec, seqs = decoder or self.dec, []
        for n, count in Counter(lengths).items():
            got = dec.fake_requests(count, n, self.rng)
            if got is None:
                for s in seqs:
                    dec.release(s)
                return None
            seqs += got
        return seqs

    def verify_graph(self, lengths: list[int], tokens: int) -> tuple | None:
        """``(replay, rotate, requests)``: the verify step of ``tokens`` window tokens over
        requests of the given context lengths, captured (``replay()`` runs it again,
        ``rotate(i)`` swaps its window tokens, None without graphs); the caller clears the
        graphs and releases the requests. None when the pages do not hold them."""
        dec, seqs = self.dec, self.requests_of(lengths)
        if seqs is None:
            return None
        reqs = len(seqs)
        try:
            rp = request_tier(reqs, dec.conf.max_running_requests)
            vlen = np.zeros(rp, np.int64)
            vlen[:reqs] = tokens // reqs
            vlen[: tokens % reqs] += 1
            wins = self._windows(rp, int(vlen.max()))
            dec.graphs.clear()
            dec._verify(wins[0], self._tensor(vlen, torch.int32), self._rows(seqs, rp), token_tier(tokens), rp)
        except BaseException:
            dec.graphs.clear()
            self._release(seqs)
            raise
        static = dec.graphs.last[1][0] if dec.graphs.enabled else None
        rotate = (lambda i: static.copy_(wins[i % 2])) if static is not None else None
        return dec.graphs.replay_last, rotate, seqs

    def draft(self, reqs: int, block_size: int, context: int = DRAFT_CONTEXT, decoder=None, between=None) -> float | None:
        """Seconds of one draft step (backbone + Markov loop + confidence) at ``block_size``
        (``between(i)``: run before replay ``i``, untimed; :func:`median_seconds`)."""
        dec = decoder or self.dec
        seqs = self._requests(reqs, context)
        if seqs is None:
            return None
        old = dec.drafter.block_size
        try:
            dec.drafter.block_size = block_size
            rp = request_tier(reqs, dec.conf.max_running_requests)
            temp = torch.ones(rp, device=dec.device)
            dec.graphs.clear()
            dec._draft(self._rows(seqs, rp), temp, rp)  # anchors: the requests' own, on the device
            return median_seconds(dec.graphs.replay_last, self.reps, between=between)
        finally:
            dec.drafter.block_size = old
            dec.graphs.clear()
            self._release(seqs)

    def prefill(self, chunk: int, cached: int, sample: bool = False, decoder=None) -> float | None:
        """Wall seconds of one prefill step (a ``chunk``-token piece after ``cached``
        tokens), host included: the median of :meth:`prefill_samples`."""
        samples = self.prefill_samples(chunk, cached, sample, decoder)
        return None if samples is None else statistics.median(samples)

    def prefill_samples(self, chunk: int, cached: int, sample: bool = False, decoder=None) -> list | None:
        """Wall seconds of synchronised calls of one prefill step (a ``chunk``-token piece
        after ``cached`` tokens), host included, after 3 warm-up calls, with the garbage
        collector off: at least ``max(reps, 10)`` calls for steps under 0.1 s, else
        ``max(5, reps // 2)``. ``sample``: the chunk ends the prompt, so the step also
        samples the request's first token. None when the pages do not hold it. After each
        call the GPU idles ``prefill_idle`` times the call's seconds: back-to-back prefills
        hold the GPU at full power, where its clock falls below what served prefills (between
        decode steps) run at."""
        dec = decoder or self.dec
        prompt = cached + chunk + (0 if sample else 1)
        s = Sequence(0, self.rng.integers(0, self.vocab, prompt).tolist(), 1, 1.0)
        dec.admit(s)
        try:
            if not dec.pages.reserve(s, cached + chunk):
                return None

            def step() -> float:
                s.num_cached = cached
                del s.tokens[s.prompt_len:]
                t0 = time.perf_counter()
                dec.prefill([(s, chunk)])
                dec.sync()
                took = time.perf_counter() - t0
                if self.prefill_idle > 0:
                    time.sleep(self.prefill_idle * took)
                return took
            with _no_gc():
                first = [step() for _ in range(3)][-1]
                reps = max(self.reps, 10) if first < 0.1 else max(5, self.reps // 2)
                return [step() for _ in range(reps)]
        finally:
            dec.release(s)

    def prefill_kind(self, kind: str, chunk: int, cached: int) -> dict | None:
        """:meth:`prefill` as served with drafter ``kind`` (none, chain: the MTP layer, block:
        DSpark's context projection), the chunk ending its prompt (first token sampled):
        ``{"step_s": median, "p90_s": 90th percentile, "reps": calls timed}``."""
        if kind not in self._prefill_decoders:  # through its graphs up to 512 tokens, as served
            self._prefill_decoders[kind] = self._step_decoder(kind, graphs=self.dec.conf.cuda_graphs)
        samples = self.prefill_samples(chunk, cached, sample=True, decoder=self._prefill_decoders[kind])
        if samples is None:
            return None
        return {"step_s": statistics.median(samples), "p90_s": float(np.percentile(samples, 90)),
                "reps": len(samples)}

    def chain(self, reqs: int, k: int, context: int = DRAFT_CONTEXT, between=None) -> float | None:
        """Seconds of one chain (MTP-k) draft step: one layer run ``k`` times (CUDA graph)."""
        dec = self.dec
        if self._chain is None:
            with torch.device(dec.device):
                # the MTP chain reads the target's last layer, as the served MTP decoder does
                self._chain = Chain(dec.spec, dec.target, k, drafter_features("static", dec.spec),
                                    dec.target.embed.dtype)
            self._chain.requires_grad_(False)
            init_random(self._chain, 0.02, dec.conf.seed + 2)
        self._chain.block_size = k
        chain = dec.variant(dec.conf.replaced(method="static", block_size=k),
                            self._chain)
        return self.draft(reqs, k, context, decoder=chain, between=between)

    def decode_step(self, kind: str, reqs: int, context: int, graphs: bool = True,
                    steps: int = 12) -> dict | None:
        """Whole ``Decoder.decode`` steps of ``reqs`` requests as served (temperature 1,
        synthetic acceptance): ``kind`` none (target only), chain (MTP-3) or block (DSpark,
        block 7, production scheduler). Returns ``{"steps": [[verify_tokens, wall_s,
        draft_s, verify_s], ...], "step_s": median wall}`` (draft and verify: device time of
        their graphs in the same step); steps that captured a graph are left out."""
        return time_steps(self._step_decoder(kind, graphs), reqs, context, self.rng, steps)

    def decode_steps_of(self, kind: str, lengths: list[int], steps: int = 12) -> dict | None:
        """As :meth:`decode_step` (graphs on), over requests of the given context lengths
        (long-tailed, as served traffic holds them): None when the pages do not hold them."""
        dec = self._step_decoder(kind, True)
        seqs = self.requests_of(lengths, dec)
        return None if seqs is None else time_requests(dec, seqs, steps)

    def sched(self, kind: str, reqs: int, steps: int = 12, prompt: int = 64) -> dict | None:
        """The serving loop's host time between steps (``sched_s``: retire, admit, schedule)
        with ``reqs`` requests running: a burst of ``reqs`` requests of ``prompt`` tokens
        served by the real loop (``serve``) with drafter ``kind``, until ``steps`` decode steps
        after the first three (the scheduler admits what the pages hold: ``running`` says how
        many ran). Returns ``{"step_s": median gap, "steps": [[running, gap], ...]}``, or None
        when no decode step was left to time."""
        from dspark_sim.kernels.decoder.engine import serve

        dec = self._step_decoder(kind, graphs=True)
        max_new = dec.conf.max_model_len - prompt - dec.conf.block_size - 1  # none finishes
        seqs = [Sequence(i, self.rng.integers(0, self.vocab, prompt).tolist(), max_new, 1.0, 0)
                for i in range(reqs)]
        prefill_steps = -(-reqs * prompt // dec.conf.max_batched_tokens)
        try:
            run = serve(dec, seqs, max_steps=prefill_steps + 3 + steps)
        finally:
            dec.graphs.clear()
            for s in seqs:
                dec.release(s)
        rows = [[r["running_reqs"], r["sched_s"]] for r in run.steps if r["decode_reqs"]][3:]
        if not rows:
            return None
        return {"step_s": statistics.median(g for _, g in rows), "steps": rows}

    def kernel(self, name: str, reqs: int, block_size: int) -> float | None:
        """Seconds of one fused-kernel launch as the decoder calls it (``decoder.conf.kernels``):
        ``schedule_verify`` (production mode) over ``reqs`` x ``block_size`` confidences, or
        ``accept`` over ``reqs`` full windows of ``block_size + 1`` rows of the model's vocabulary;
        the inputs rotate between two random sets."""
        from dspark_sim.kernels.cases import accept_case, schedule_case, synthetic_sps_table

        dec = self.dec
        if name == "schedule_verify":
            sps = synthetic_sps_table(device=dec.device)
            sets = [schedule_case(reqs, block_size, dec.device, seed=i, lag=True, sps=sps) for i in range(2)]
            call = lambda a: dec._schedule(a.pop("conf"), a.pop("temperatures"), a.pop("sps"),  # noqa: E731
                                           mode="production", **a)
        elif name == "accept":
            sets = [accept_case(reqs, block_size, self.vocab, dec.device, seed=i)[0] for i in range(2)]
            call = lambda a: dec._accept(**a, max_window=block_size + 1)  # noqa: E731
        else:
            raise ValueError(f"unknown kernel {name!r}")
        current = {}

        def rotate(i: int) -> None:
            current.clear()
            current.update(sets[i % 2])
        return median_seconds(lambda: call(dict(current)), self.reps, warmup=3, between=rotate)

    def _step_decoder(self, kind: str, graphs: bool):
        from dspark_sim.kernels.sps_tensors import SpsTensors

        dec = self.dec
        conf = dec.conf.replaced(synthetic=True, cuda_graphs=graphs)
        if kind == "none":
            return dec.variant(conf.replaced(method="none"), None)
        if kind == "chain":
            self.chain(1, 3)  # builds the chain drafter
            self._chain.block_size = 3
            return dec.variant(conf.replaced(method="static", block_size=3),
                               self._chain, acceptance={"drafter": "mtp"})
        dec.drafter.block_size = 7
        flat = SpsTensors.from_json_dict({"sample_batch_tokens": [1], "sample_steps_per_sec": [1.0],
                                          "max_batch_tokens": 1 << 20})
        return dec.variant(conf.replaced(method="dspark", block_size=7, scheduler="production"),
                           dec.drafter, sps=flat, acceptance={"drafter": "dspark"})


def time_steps(dec, reqs: int, context: int, rng, steps: int = 12, overlap: bool = True) -> dict | None:
    """Whole ``dec`` decode steps of ``reqs`` fake requests of ``context`` tokens, timed as
    the serving loop runs them (``overlap``: step n+1 launched before step n's tokens are
    read; the time between two steps' ends), after three steps running that captured no
    graph: ``{"steps": [[verify_tokens, wall_s, draft_s, verify_s], ...], "step_s": median}``,
    or None when the pages do not hold them. Graphs captured here are dropped after."""
    seqs = dec.fake_requests(reqs, context, rng)
    return None if seqs is None else time_requests(dec, seqs, steps, overlap)


def time_requests(dec, seqs: list, steps: int = 12, overlap: bool = True) -> dict | None:
    """:func:`time_steps` over the requests ``seqs`` (released after)."""
    rows = []
    try:
        with _no_gc():
            for wall, st, _ in (overlapped_steps(dec, seqs, steps) if overlap else sync_steps(dec, seqs, steps)):
                rows.append([st.verify_tokens, wall, st.draft_s, st.verify_s])
    finally:
        dec.graphs.clear()
        for s in seqs:
            dec.release(s)
    if not rows:
        return None
    return {"steps": rows, "step_s": statistics.median(r[1] for r in rows)}


def overlapped_steps(dec, seqs, count: int, warm: int = 3) -> list:
    """``count`` decode steps over ``seqs`` as served: step n+1 launched before step n's
    tokens are read. ``[(seconds from the previous step's end to this one's, stats, the
    GPU's idle seconds before the step: host time the overlap did not hide)]``, after
    ``warm`` launches running that captured no graph."""
    out, prev, t_prev, calm, tries, before_prev = [], None, None, 0, 0, None
    while len(out) < count and tries < 4 * count + 40:
        for s in seqs:
            dec.pages.reserve(s, len(s.tokens) + s.pending + dec.conf.block_size)
        before = len(dec.graphs.entries)
        launched = dec.launch(seqs, [])
        tries += 1
        calm = 0 if len(dec.graphs.entries) != before else calm + 1
        if prev is not None:
            st = dec.finish(prev)
            t = time.perf_counter()
            if t_prev is not None and calm >= warm:
                out.append((t - t_prev, st, before_prev.timer.gap_to(prev.timer)))
            t_prev = t
        before_prev, prev = prev, launched
    if prev is not None:
        dec.finish(prev)
    return out


def sync_steps(dec, seqs, count: int) -> list:
    """As :func:`overlapped_steps`, each step waited for before the next is planned."""
    out, calm, tries = [], 0, 0
    while len(out) < count and tries < 4 * count + 40:
        fresh, wall, st = timed_decode(dec, seqs)
        tries += 1
        calm = 0 if fresh else calm + 1
        if calm >= 3:
            out.append((wall, st, None))
    return out


def timed_decode(dec, seqs) -> tuple[bool, float, object]:
    """One ``Decoder.decode`` over ``seqs``, waited for: ``(captured a new graph, wall
    seconds, step stats)``; pages for the drafts are reserved outside the timing."""
    for s in seqs:
        dec.pages.reserve(s, len(s.tokens) + dec.conf.block_size)
    before = len(dec.graphs.entries)
    t0 = time.perf_counter()
    st = dec.decode(seqs)
    dec.sync()
    return len(dec.graphs.entries) != before, time.perf_counter() - t0, st


@contextmanager
def _no_gc():
    """Garbage collection off while timing (a collection is a host stall, not a step cost)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


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
