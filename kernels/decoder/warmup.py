"""Compile every kernel and capture every CUDA graph a serving run can meet, before it starts.

A decode step replays a verify graph keyed by (token tier, request tier) and a draft
graph keyed by the request tier, and launches ``schedule_verify`` and ``accept`` whose
launch configurations depend on R and the verify token count; a step with prompt
chunks up to :data:`~.step.PREFILL_GRAPH_TOKENS` tokens replays a graph keyed by
(token tier, slot tier), larger ones run eagerly with attention shaped by the chunk.
The first use of each compiles Triton kernels and captures a graph, which takes
seconds. SGLang and vLLM capture their graphs at start-up; :func:`warm_up` does the
same: one call of each step function per reachable tier, on scratch sequences whose
pages go back afterwards.
"""
from __future__ import annotations

import numpy as np
import torch

from dspark_sim.kernels.decoder import step as steps
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


def prefill_tiers(max_reqs: int) -> list[tuple[int, int]]:
    """``(token tier T, slot tier S)`` of every prefill graph: T a power of two from 16 to
    ``PREFILL_GRAPH_TOKENS``; S a power of two up to what decode slots (at least half of
    their tier holds a request of one token or more) and prompt chunks can fill."""
    out, T = [], 16
    cap = 1 << (2 * max_reqs - 1).bit_length()
    while T <= steps.PREFILL_GRAPH_TOKENS:
        S = 1
        while S <= min(cap, 4 * T):
            out.append((T, S))
            S *= 2
        T *= 2
    return out


def _decode_tier(dec, seqs, rp: int, reqs: int, tokens: int, drafts: dict) -> None:
    """Draft (once per request tier), verify and accept at one (R, N) point."""
    conf, dev = dec.conf, dec.device
    rows = torch.full((rp,), dec.pages.dummy_row, dtype=torch.int64, device=dev)
    rows[:reqs] = torch.tensor([s.row for s in seqs[:reqs]], device=dev)
    temp = torch.ones(rp, device=dev)
    if dec.drafter is not None and rp not in drafts:
        drafts[rp] = dec._draft(rows, temp, rp)
    win, probs, conf_logit = drafts[rp] if dec.drafter is not None else \
        (dec.rows.anchor[rows][:, None], None, None)
    vlen = np.full(rp, 0, np.int64)
    vlen[:reqs] = tokens // reqs
    vlen[: tokens % reqs] += 1
    assert vlen.max() <= conf.window
    vlen_t = torch.from_numpy(vlen).to(dev, torch.int32)
    logits = dec._verify(win, vlen_t, rows, token_tier(tokens), rp)
    tab = {"rows": rows, "nl": vlen_t, "temp": temp}
    steps._accept(dec, logits, tab, win, probs, reqs, rp, greedy=False)
    if conf_logit is not None and conf.method == "dspark" and conf.scheduler != "full":
        c = torch.sigmoid(conf_logit[:reqs])
        kw = dict(min_verify_len=conf.min_verify_len, max_verify_len=conf.max_verify_len,
                  survival_eps=conf.survival_eps)
        if conf.scheduler == "production" and conf.lag_steps:
            dec._schedule(c, dec.temps, dec.sps, lag_conf=c, **kw)  # the first steps
            dec._schedule(c, dec.temps, dec.sps, budget_k=tokens - reqs, **kw)  # then the host's budget
        else:
            dec._schedule(c, dec.temps, dec.sps, mode=conf.scheduler, **kw)


def _prefill_graphs(dec) -> int:
    """One prefill graph per (token tier, slot tier): a scratch prompt in slot 0, the other
    slots padding; its first token sampled as served. Returns the graphs run."""
    if not dec.graphs.enabled:
        return 0
    conf, dev, width = dec.conf, dec.device, dec.conf.window
    count = 0
    for T, S in prefill_tiers(conf.max_running_requests):
        seq = Sequence(-1, [1] * T, 1, 1.0)
        dec.admit(seq)
        try:
            if not dec.pages.reserve(seq, T):
                raise RuntimeError("warm-up: no KV pages for a prefill graph")
            dec.pages.flush()
            tab = torch.zeros(5, S, dtype=torch.int64, device=dev)
            tab[0] = dec.pages.dummy_row
            tab[0, 0], tab[1, 0], tab[3, 0], tab[4, 0] = seq.row, T, 0, 1  # rows, q_len, src_start, nl
            src = torch.ones(S * width + T, dtype=torch.int64, device=dev)
            L = min(T, S * width)
            logits = dec._prefill_forward(src, tab[1], tab[2], tab[0], tab[3], tab[4], T, L, S, T, True)
            temp = torch.ones(S, device=dev)
            steps._accept(dec, logits, {"rows": tab[0], "nl": tab[4], "temp": temp}, None, None, 0, 0,
                          greedy=False)
            count += 1
        finally:
            dec.release(seq)
    return count


def _prefill_shapes(dec) -> int:
    """Prefill steps of 1..max_running prompts (sampling their first tokens) and single
    chunks of every power of two up to the token budget; returns the steps run."""
    conf, steps_run = dec.conf, 0
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
            steps_run += 1
        finally:
            for s in seqs:
                dec.release(s)
    return steps_run


@torch.no_grad()
def warm_up(dec) -> dict:
    """Run every step shape ``dec`` can meet once (it must serve nothing yet); returns
    ``{"verify_points", "prefill_steps", "prefill_graphs", "graphs"}``. Its pages all go back."""
    conf = dec.conf
    free = len(dec.pages.free)
    points = verify_points(conf.max_running_requests, conf.window)
    seqs = dec.fake_requests(conf.max_running_requests, SCRATCH_TOKENS, np.random.default_rng(0))
    if seqs is None:
        raise RuntimeError(f"warm-up: no KV pages for {conf.max_running_requests} scratch requests")
    drafts: dict = {}
    try:
        for rp, reqs, tokens in points:
            _decode_tier(dec, seqs, rp, reqs, tokens, drafts)
    finally:
        for s in seqs:
            dec.release(s)
    graphs = _prefill_graphs(dec)
    prefill = _prefill_shapes(dec)
    dec.sync()
    dec.pages.drop_cached()  # the scratch prompts' pages: serving starts with a cold cache
    if len(dec.pages.free) != free:
        raise RuntimeError("warm-up leaked KV pages")
    return {"verify_points": len(points), "prefill_steps": prefill, "prefill_graphs": graphs,
            "graphs": len(dec.graphs.entries)}
