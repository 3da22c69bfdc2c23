"""Target logits of whole sequences from eager forwards laid out as the caller says.

A served request's logits come from many forwards: its prompt in chunks beside other
requests' work, then one token a step over the paged cache. A check that compares served
tokens with one eager forward of the whole sequence (:func:`whole`) meets bf16 rounding: the
two computations add in other orders, and two logits within that rounding can swap places.
To say how far valid computations of the same logits disagree, the same positions can also be
computed as a server steps a request alone (:func:`chunked`), in one forward with other
sequences (:func:`packed`), or stepped together with them as mixed batching does
(:func:`interleaved`): the same kernels, other shapes and reduction orders.
"""
from __future__ import annotations

import numpy as np
import torch

from dspark_sim.kernels.decoder.attention import plan
from dspark_sim.kernels.decoder.batch import make_batch

Span = tuple[int, int, int]  # (sequence, first position, end position): tokens one forward runs


def whole(n: int) -> list[list[Span]]:
    """One forward of sequence 0's ``n`` tokens."""
    return [[(0, 0, n)]]


def chunked(n: int, prompt: int, chunk: int) -> list[list[Span]]:
    """Sequence 0 as a server steps it alone: its first ``prompt`` tokens in chunks of at most
    ``chunk``, then the rest one token a forward (decode steps)."""
    chunks = [[(0, a, min(a + chunk, prompt))] for a in range(0, prompt, chunk)]
    return chunks + [[(0, p, p + 1)] for p in range(prompt, n)]


def interleaved(lengths: list[int], prompts: list[int], budget: int, prefill_first: bool = False) -> list[list[Span]]:
    """Every sequence as a server steps them together: each forward holds one token of every
    sequence past its prompt (a decode row) and prompt chunks in order, filling ``budget``
    tokens in all (mixed batching); ``prefill_first``: a forward with prompt chunks to run holds
    only those, the decode rows waiting. A sequence's first generated token follows its last
    prompt chunk."""
    done, steps = [0] * len(lengths), []
    while any(d < n for d, n in zip(done, lengths)):
        waiting = any(d < p for d, p in zip(done, prompts))
        step = [] if prefill_first and waiting else \
            [(i, d, d + 1) for i, (d, n, p) in enumerate(zip(done, lengths, prompts)) if p <= d < n]
        room = budget - len(step)
        for i, (d, p) in enumerate(zip(done, prompts)):
            if d < p and room > 0:
                take = min(p - d, room)
                step.append((i, d, d + take))
                room -= take
        if not step:
            raise ValueError("a budget of no tokens schedules nothing")
        for i, a, b in step:
            done[i] = b
        steps.append(step)
    return steps


def packed(lengths: list[int]) -> list[list[Span]]:
    """Every sequence whole, in one forward."""
    return [[(i, 0, n) for i, n in enumerate(lengths)]]


@torch.no_grad()
def score_steps(dec, seqs: list[list[int]], steps: list[list[Span]], wanted: list[range]) -> list[torch.Tensor]:
    """fp32 target logits ``[len(wanted[i]), V]`` of each sequence ``i`` (token ids) at its
    positions ``wanted[i]`` (a range), from one eager forward a step: span ``(i, a, b)`` runs
    sequence ``i``'s tokens ``a .. b-1`` over its keys before ``a`` (earlier steps wrote them).
    Each sequence holds a scratch row and pages of ``dec`` until the last step."""
    from dspark_sim.kernels.decoder.sequence import Sequence

    holders = [Sequence(-1 - i, list(tokens), max_tokens=0) for i, tokens in enumerate(seqs)]
    pieces: list[list[tuple[int, torch.Tensor]]] = [[] for _ in seqs]
    try:
        for s in holders:
            dec.pages.attach(s)
            if not dec.pages.reserve(s, len(s.tokens)):
                raise RuntimeError("no pages left to score the sequences")
        dec.pages.flush()
        for step in steps:
            _forward(dec, holders, step, wanted, pieces)
    finally:
        for s in holders:
            dec.pages.release(s)
    return [torch.cat([t for _, t in sorted(p, key=lambda x: x[0])]) if p else
            torch.empty(0, dec.spec.vocab_size, device=dec.device) for p in pieces]


def _forward(dec, holders, step: list[Span], wanted: list[range], pieces) -> None:
    """One eager forward of ``step``'s spans; the logits of their wanted positions into ``pieces``
    as ``(first wanted index, [rows, V])``."""
    ids, picks, offset = [], [], 0
    for i, a, b in step:
        ids += holders[i].tokens[a:b]
        lo, hi = max(a, wanted[i].start), min(b, wanted[i].stop)
        if lo < hi:
            picks.append((i, lo - wanted[i].start, offset + lo - a, offset + hi - a))
        offset += b - a
    q_len = np.array([b - a for _, a, b in step])
    kv_len = np.array([b for _, _, b in step])
    batch = make_batch(np.array(ids), q_len, kv_len, np.array([holders[i].row for i, _, _ in step]), dec.pages)
    shape = plan(int(q_len.max()), len(step), dec.spec.num_kv_heads, dec.group(), dec.num_sms)
    hidden, _ = dec.target(batch.input_ids, batch, dec.cache, dec.rope, shape, dec.conf.attention)
    for i, first, r0, r1 in picks:
        pieces[i].append((first, dec.target.logits(hidden[r0:r1])))
