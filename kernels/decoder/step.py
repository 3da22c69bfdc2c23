"""One engine step, launched without waiting; its tokens read back while the next one runs.

:func:`launch` enqueues a whole step and returns: no device-to-host read happens
inside it. A step is one table of requests: decoding requests first (a draft per
request tier, verify lengths, their windows) then prompt chunks (a chunk that ends
its prompt samples the first token). One target forward runs every token of the
table; ``accept`` judges the decode windows and samples the first tokens; the
device then moves each request's anchor and position (:class:`~.rows.RowState`)
and copies the step's tokens to pinned host memory behind an event. :func:`finish`
waits for that event, which the GPU has usually passed already (the serving loop
launches step n+1 before it finishes step n), and commits the tokens to the host's
sequences.

The host never needs a step's verify lengths before launching it: the verify graph
is padded to the token tier of a bound the host knows (exact for static chains and
no speculation; R + K for DSpark's production scheduler, whose budget K the host
sizes from the confidences of ``lag_steps`` steps ago - read back then, so with a
lag of two they are there before they are asked for - and the kernel takes the top K).
Padded rows belong to a sink request that ``accept`` judges and nobody reads.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import torch

from dspark_sim.kernels.decoder.batch import expand
from dspark_sim.kernels.checks import nothing_accepted
from dspark_sim.kernels.decoder.graphs import request_tier, token_tier

PREFILL_GRAPH_TOKENS = 512  # steps with prompt tokens run as a CUDA graph up to this many tokens
PREFILL_GRAPH_MIN = 16  # ... over the next power of two of them, at least this many
SAMPLE, SET = 1, 2  # prompt slots: the chunk ends the prompt and samples / restores the anchor


@dataclass(slots=True)
class StepStats:
    """What one step did (the ``steps.csv`` columns the decoder knows)."""

    decode_reqs: int = 0
    prefill_tokens: int = 0
    verify_tokens: int = 0
    budget_k: int = 0
    accepted_tokens: int = 0  # tokens emitted (accepted drafts + one per request), as the simulator
    draft_s: float = 0.0
    verify_s: float = 0.0  # the target's forward (device time; host time on the CPU)


class Timer:
    """Named points of a step: CUDA events on the GPU (read after the step), host clock else."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self.marks: dict = {}

    def mark(self, name: str) -> None:
        if self.cuda:
            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            self.marks[name] = ev
        else:
            self.marks[name] = time.perf_counter()

    def gap_to(self, later: "Timer") -> float:
        """Seconds from this step's end to ``later``'s start (both steps done)."""
        a, b = self.marks.get("end"), later.marks.get("start")
        if a is None or b is None:
            return 0.0
        return a.elapsed_time(b) / 1e3 if self.cuda else b - a

    def seconds(self, a: str, b: str) -> float:
        """Seconds from mark ``a`` to ``b`` (0 when either is missing); events must be done."""
        x, y = self.marks.get(a), self.marks.get(b)
        if x is None or y is None:
            return 0.0
        return x.elapsed_time(y) / 1e3 if self.cuda else y - x


@dataclass(eq=False)
class Pending:
    """A launched step: what :func:`finish` reads back."""

    decode: list
    prefill: list
    slots: int  # rows of the request table (decode tier first)
    rp: int  # decode request tier
    width: int
    host: torch.Tensor  # int32: accepted [slots], q_len [slots], tokens [slots, width], budget [1]
    event: object
    timer: Timer
    stats: StepStats
    flags: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))


def _to(dev, array: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(array).to(dev, non_blocking=True)


def _pinned(like: torch.Tensor) -> torch.Tensor:
    return torch.empty(like.shape, dtype=like.dtype, pin_memory=like.is_cuda)


def launch(dec, decode: list, prefill: list) -> Pending:
    """Enqueue one step over ``decode`` (sequences whose anchors the device holds; pages
    reserved for ``len + pending + block_size`` tokens) and ``prefill`` (``(seq, tokens)`` prompt
    chunks, pages reserved); returns at once."""
    conf, dev = dec.conf, dec.device
    width = conf.window
    timer = Timer(dev)
    timer.mark("start")
    dec.pages.flush()
    R = len(decode)
    rp = request_tier(R, conf.max_running_requests) if R else 0
    stats = StepStats(decode_reqs=R, prefill_tokens=sum(int(n) for _, n in prefill))
    win = probs = vlen = rows = temp = None
    run, bound, budget = None, 0, None
    if R:
        rows_h = np.full(rp, dec.pages.dummy_row, np.int64)
        rows_h[:R] = [s.row for s in decode]
        temp_h = np.zeros(rp, np.float32)
        temp_h[:R] = [s.temperature for s in decode]
        rows, temp = _to(dev, rows_h), _to(dev, temp_h)
        conf_logit = None
        if dec.drafter is not None:
            win, probs, conf_logit = dec._draft(rows, temp, rp)
            dec.agree(win)
        else:
            win = dec.rows.anchor[rows][:, None]
        timer.mark("draft")
        vlen, bound, run, budget = dec._verify_lengths(decode, rp, conf_logit)
    timer.mark("forward")
    if prefill:
        logits, tab, flags = _mixed(dec, decode, prefill, rp, win, vlen, bound)
    else:
        tp = token_tier(bound)
        logits = dec._verify(win, vlen, rows, tp, rp)
        tab, flags = {"rows": rows, "nl": vlen, "temp": temp}, np.zeros(rp, np.int64)
    timer.mark("accept")
    greedy = all(s.temperature <= 0 for s in decode) and all(s.temperature <= 0 for s, _ in prefill)
    accepted, out = _accept(dec, logits, tab, win, probs, R, rp, greedy)
    if run is not None:
        accepted, out = _synthetic(accepted, out, run, win, tab["nl"], R)
    dec.agree(accepted, out)
    _commit(dec, tab, accepted, out, R)
    if budget is None:
        budget = torch.zeros(1, dtype=torch.int32, device=dev)
    stats_dev = torch.cat([accepted[:len(flags)], tab["nl"][:len(flags)].to(torch.int32),
                           out[:len(flags)].reshape(-1), budget.reshape(1).to(torch.int32)])
    host = _pinned(stats_dev)
    host.copy_(stats_dev, non_blocking=True)
    timer.mark("end")  # after the copy: when it is done, every mark of the step is
    for s in decode:
        s.pending += width
        s.pending_min += 1
    for s, n in prefill:
        s.num_cached += int(n)
        s.num_steps += 1
    dec.pages.share([s for s, _ in prefill])  # the stream orders a later reader after this step
    for i, (s, _) in enumerate(prefill):
        if flags[rp + i] & SAMPLE:
            s.pending += 1
            s.pending_min += 1
    return Pending(decode, prefill, len(flags), rp, width, host, timer.marks["end"] if timer.cuda else None,
                   timer, stats, flags)


def finish(dec, p: Pending) -> StepStats:
    """Wait for ``p``'s tokens and commit them to its sequences (tokens, cache, pages)."""
    if p.event is not None:
        p.event.synchronize()
    S, W = p.slots, p.width
    host = p.host.numpy()
    accepted, q_len = host[:S], host[S:2 * S]
    out = host[2 * S:2 * S + S * W].reshape(S, W)
    st = p.stats
    emitted = 0
    for i, s in enumerate(p.decode):
        s.pending -= W
        s.pending_min -= 1
        a = int(accepted[i])
        st.verify_tokens += int(q_len[i])
        if s.done or s.row is None:  # finished while this step ran: its tokens are dropped
            continue
        emitted += s.extend(out[i, :a + 1].tolist())
        s.num_cached = len(s.tokens) - 1
        s.accepted += a
        s.verified += int(q_len[i]) - 1
        s.num_steps += 1
        _trim(dec, s)
    for i, (s, _) in enumerate(p.prefill):
        if p.flags[p.rp + i] & SAMPLE:
            s.pending -= 1
            s.pending_min -= 1
            if not s.done and s.row is not None:
                emitted += s.extend([int(out[p.rp + i, 0])])
                _trim(dec, s)
    if dec.conf.method == "dspark" and dec.conf.scheduler != "full" and p.decode:
        st.budget_k = int(host[-1])
    elif p.decode:
        st.budget_k = st.verify_tokens - len(p.decode)
    st.accepted_tokens = emitted
    st.draft_s = p.timer.seconds("start", "draft")
    st.verify_s = p.timer.seconds("forward", "accept")
    return st


def _trim(dec, s) -> None:
    """Return the pages past what the cache holds and what launched steps may still write."""
    keep = len(s.tokens) + s.pending + dec.conf.block_size if s.pending else s.num_cached
    dec.pages.truncate(s, keep)


def _mixed(dec, decode, prefill, rp, win, vlen, bound):
    """The forward of a step with prompt chunks (and decode windows, if any): ``(logits,
    table, flags)``. A CUDA graph per (token tier, slot tier) up to ``PREFILL_GRAPH_TOKENS``."""
    conf, dev, width = dec.conf, dec.device, dec.conf.window
    n_pre = len(prefill)
    chunks = np.array([int(n) for _, n in prefill], np.int64)
    tokens = bound + int(chunks.sum())
    graph = dec.pad_prefill and tokens <= PREFILL_GRAPH_TOKENS
    starts = np.array([s.num_cached for s, _ in prefill], np.int64)
    done = starts + chunks >= np.array([s.prefill_target for s, _ in prefill], np.int64)
    outs = np.array([s.num_outputs for s, _ in prefill], np.int64)
    flags_pre = np.where(done & (outs == 0), SAMPLE, np.where(done, SET, 0))
    if graph:
        T, S = max(PREFILL_GRAPH_MIN, 1 << (tokens - 1).bit_length()), 1 << (rp + n_pre - 1).bit_length()
        L = min(T, S * width)
    else:
        T, S = tokens, rp + n_pre
        L = bound + int((flags_pre == SAMPLE).sum())
    tab = np.zeros((8, S), np.int64)  # rows, start, q_len, src_start, nl, flags, anchor pos, anchor
    tab[0] = dec.pages.dummy_row
    temp = np.zeros(S, np.float32)
    sl = slice(rp, rp + n_pre)
    if decode:
        tab[0, :len(decode)] = [s.row for s in decode]
        temp[:len(decode)] = [s.temperature for s in decode]
    tab[0, sl] = [s.row for s, _ in prefill]
    tab[1, sl], tab[2, sl] = starts, chunks
    tab[3, sl] = rp * width + np.concatenate([[0], np.cumsum(chunks)[:-1]])
    tab[4, sl] = flags_pre == SAMPLE
    tab[5, sl] = flags_pre
    tab[6, sl] = [len(s.tokens) - (f == SET) for (s, _), f in zip(prefill, flags_pre)]
    tab[7, sl] = [s.tokens[-1] for s, _ in prefill]
    temp[sl] = [s.temperature for s, _ in prefill]
    ids = np.zeros(S * width + T if graph else rp * width + int(chunks.sum()), np.int64)
    ids[rp * width:rp * width + int(chunks.sum())] = np.concatenate(
        [s.tokens[a:a + n] for (s, _), a, n in zip(prefill, starts, chunks)])
    t, src = _to(dev, tab), _to(dev, ids)
    if rp:  # decode rows came with the table; their positions and lengths are on the device
        t[1, :rp] = dec.rows.pos[t[0, :rp]].long()
        t[2, :rp] = vlen
        t[3, :rp] = torch.arange(rp, device=dev) * width
        t[4, :rp] = vlen
        src[:rp * width] = win.reshape(-1)
    max_q = T if graph else max(int(chunks.max()), width if rp else 1)
    logits = dec._prefill_forward(src, t[2], t[1], t[0], t[3], t[4], T, L, S, max_q, graph)
    flags = np.zeros(S, np.int64)
    flags[sl] = flags_pre
    tab_dev = {"rows": t[0], "nl": t[4], "temp": _to(dev, temp), "flags": t[5], "pos": t[6], "anchor": t[7]}
    return logits, tab_dev, flags


def _accept(dec, logits, tab, win, probs, R: int, rp: int, greedy: bool):
    """Judge every logit row: decode windows (a draft per row but the last), first-token
    samples (one row), and a sink request owning the padded rows. ``(accepted [S + 1],
    tokens [S + 1, W])``. An eager step of prompt chunks none of which ends its prompt has
    no row: accept is not called (its kernels would have no row to sample from)."""
    dev, g = dec.device, dec.conf.block_size
    W = win.shape[1] if win is not None else dec.conf.window
    nl = tab["nl"].to(torch.int32)
    L, S = logits.shape[0], nl.shape[0]
    if L == 0:  # only prompt chunks that stop short of their prompts: nothing to judge, no token
        return nothing_accepted(S + 1, W, dev)
    own, k, valid, _ = expand(nl, L)
    indptr = torch.cat([torch.zeros(1, dtype=torch.int32, device=dev), torch.cumsum(nl, 0, dtype=torch.int32),
                        torch.full((1,), L, dtype=torch.int32, device=dev)])
    has_draft = valid & (own < R) & (k < nl[own] - 1)
    drafts = torch.zeros(L, dtype=torch.int64, device=dev)
    if win is not None:
        drafts = torch.where(has_draft, win.reshape(-1)[(own.clamp(max=rp - 1) * W + k + 1).clamp(max=rp * W - 1)], 0)
    temp = torch.cat([tab["temp"], torch.zeros(1, device=dev)])
    if greedy:
        dprobs = None
    elif probs is not None:
        rows = torch.where(has_draft, own.clamp(max=rp - 1) * max(g, 1) + k, 0)
        dprobs = probs.reshape(-1, probs.shape[-1])[rows]
    else:  # windows of one row read no draft probability: any float rows stand in
        dprobs = logits
    return dec._accept(logits, indptr, drafts, dprobs, temp, torch.rand(L, device=dev),
                       torch.rand(S + 1, device=dev), max_window=W)


def _synthetic(accepted, out, run, win, nl, R: int):
    """Synthetic acceptance: decode request r keeps min(run[r], its drafts) drafts, then the
    token the real verification emitted (tokens still flow through the real kernels)."""
    r = torch.arange(R, device=out.device)
    tok = out[r, accepted[:R].long()]
    n = torch.minimum(run, nl[:R].to(run.dtype) - 1)
    fake = torch.cat([win[:R, 1:].to(out.dtype), tok[:, None]], dim=1)
    fake[r, n.long()] = tok
    accepted, out = accepted.clone(), out.clone()
    accepted[:R], out[:R] = n.to(accepted.dtype), fake
    return accepted, out


def _commit(dec, tab, accepted, out, R: int) -> None:
    """Move every slot's anchor and position on the device: decode windows by their
    accepted tokens, prompts that end here to their first (or restored) anchor."""
    rows = tab["rows"].long()
    S = rows.shape[0]
    anchor, pos = dec.rows.gather(rows)
    tok = out[torch.arange(S, device=rows.device), accepted[:S].long()].long()
    dec_slot = torch.arange(S, device=rows.device) < R
    new_pos = torch.where(dec_slot, pos + accepted[:S] + 1, pos)
    new_anchor = torch.where(dec_slot, tok, anchor)
    if "flags" in tab:
        flags = tab["flags"]
        ends = (flags & (SAMPLE | SET)) != 0
        new_pos = torch.where(ends, tab["pos"], new_pos)
        new_anchor = torch.where((flags & SAMPLE) != 0, tok, torch.where((flags & SET) != 0, tab["anchor"], new_anchor))
    pad = rows == dec.pages.dummy_row
    dec.rows.commit(rows, torch.where(pad, 0, new_pos), torch.where(pad, 0, new_anchor))
