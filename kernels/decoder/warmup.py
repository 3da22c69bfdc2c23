"""Compile every kernel and capture every CUDA graph a serving run can meet, before it starts.

A decode step replays a verify graph keyed by (token tier, request tier) and a draft
graph keyed by the request tier, and launches ``schedule_verify`` and ``accept`` whose
launch configurations depend on R and the verify token count; a prefill step launches
attention whose shape depends on the chunk. The first use of each compiles Triton
kernels and captures a graph, which takes seconds. SGLang and vLLM capture their
graphs at start-up; :func:`warm_up` does the same: one call of each step function
per reachable tier, on scratch sequences whose pages go back afterwards.
"""
from __future__ import annotations

import numpy as np
import torch

from dspark_sim.kernels.decoder.graphs import request_tier, token_tier
from dspark_sim.kernels.decoder.sequence import Sequence

SCRATCH_TOKENS = 16  # prompt of each scratch sequence: the shapes do not depend on context


def verify_points(max_reqs: int, window: int) -> list[tuple[int, int, int]]:
    """``(request tier, R, verify tokens N)``, one per (token tier, request tier) graph a
    step can use: R in the request tier's range, R <= N <= R * window."""
    tiers = sorted({request_tier(r, max_reqs) for r in range(1, max_reqs + 1)})
    out, low = [], 1
    for rp in tiers:
        first = {}
        for n in range(low, rp * window + 1):
            first.setdefault(token_tier(n), n)
        for n in first.values():
            out.append((rp, max(low, -(-n // window)), n))
        low = rp + 1
    return out


def _decode_tier(dec, seqs, rp: int, reqs: int, tokens: int, probs_by_tier: dict) -> None:
    """Draft (once per request tier), verify and accept at one (R, N) point."""
    conf, dev = dec.conf, dec.device
    window, g = conf.window, conf.gamma
    rows = np.full(rp, dec.pages.dummy_row, np.int64)
    rows[:reqs] = [s.row for s in seqs[:reqs]]
    pos = np.zeros(rp, np.int64)
    pos[:reqs] = [len(s.tokens) - 1 for s in seqs[:reqs]]
    temp = torch.ones(rp, device=dev)
    if dec.drafter is not None and rp not in probs_by_tier:
        anchors = torch.zeros(rp, dtype=torch.int64, device=dev)
        drafts, probs, conf_logit = dec._draft(anchors, temp, pos, rows, rp)
        probs_by_tier[rp] = (torch.cat([anchors[:, None], drafts], 1), probs, conf_logit)
    if dec.drafter is not None:
        win, probs, conf_logit = probs_by_tier[rp]
    else:
        win, probs, conf_logit = torch.zeros(rp, 1, dtype=torch.int64, device=dev), None, None
    vlen = np.full(reqs, tokens // reqs, np.int64)
    vlen[: tokens % reqs] += 1
    assert vlen.max() <= window
    logits, _ = dec._verify(win, vlen, pos[:reqs] + vlen, rows[:reqs], rp)
    dec._accept_step(logits, win, probs, vlen, temp[:reqs], g)
    if conf_logit is not None and conf.method == "dspark" and conf.scheduler != "full":
        c = torch.sigmoid(conf_logit[:reqs])
        dec._schedule(c, dec.temps, dec.sps, min_verify_len=conf.min_verify_len,
                      max_verify_len=conf.max_verify_len, survival_eps=conf.survival_eps,
                      mode=conf.scheduler, lag_conf=c if conf.lag_steps else None)


def _prefill_shapes(dec) -> int:
    """Prefill steps of 1..max_running prompts (sampling their first tokens) and single
    chunks of every power of two up to the token budget; returns the steps run."""
    conf, steps = dec.conf, 0
    counts = sorted({request_tier(r, conf.max_running_requests) for r in range(1, conf.max_running_requests + 1)})
    chunks = [1 << k for k in range(20) if (1 << k) <= min(conf.max_batched_tokens, conf.max_model_len - 2)]
    rng = np.random.default_rng(1)
    shapes = [(n, SCRATCH_TOKENS) for n in counts if n * SCRATCH_TOKENS <= conf.max_batched_tokens] \
        + [(1, c) for c in chunks]
    for count, length in shapes:
        seqs = [Sequence(-1 - i, rng.integers(0, dec.spec.vocab_size, length).tolist(), 1, 1.0)
                for i in range(count)]
        try:
            for s in seqs:
                dec.admit(s)
                if not dec.pages.reserve(s, length):
                    raise RuntimeError("warm-up: no KV pages for a prefill chunk")
            dec.prefill([(s, length) for s in seqs])
            steps += 1
        finally:
            for s in seqs:
                dec.release(s)
    return steps


@torch.no_grad()
def warm_up(dec) -> dict:
    """Run every step shape ``dec`` can meet once (it must serve nothing yet); returns
    ``{"verify_points", "prefill_steps", "graphs"}``. Its pages all go back."""
    conf = dec.conf
    free = len(dec.pages.free)
    points = verify_points(conf.max_running_requests, conf.window)
    seqs = dec.fake_requests(conf.max_running_requests, SCRATCH_TOKENS, np.random.default_rng(0))
    if seqs is None:
        raise RuntimeError(f"warm-up: no KV pages for {conf.max_running_requests} scratch requests")
    probs_by_tier: dict = {}
    try:
        for rp, reqs, tokens in points:
            _decode_tier(dec, seqs, rp, reqs, tokens, probs_by_tier)
    finally:
        for s in seqs:
            dec.release(s)
    prefill = _prefill_shapes(dec)
    dec.sync()
    if len(dec.pages.free) != free:
        raise RuntimeError("warm-up leaked KV pages")
    return {"verify_points": len(points), "prefill_steps": prefill, "graphs": len(dec.graphs.entries)}
