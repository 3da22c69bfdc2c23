"""accept: speculative verification over ragged verify windows (DSPARK.md section 4).

Request r owns rows indptr[r]..indptr[r+1]-1 of the flattened batch. Row j of its
window holds the target logits that judge draft token j+1 (``draft_tokens[row]``);
the last row has no draft and supplies the bonus token.

Passes over memory, fewest the maths allows:

1. ``_row_stats_kernel`` reads every logit once: per (row, split of V) the online max,
   the sum of exp((l - max) / T) and the first argmax, each thread on its own 16-byte
   rows until the end. A softmax needs the whole row before any probability is known,
   so this pass is unavoidable.
2. ``_residual_sums_kernel``: each request walks its window on those statistics alone
   (p(x) = exp((l_x - max) / T) / sum needs one logit and one draft probability per
   row), finds its first rejection, and reads that single row again to sum
   normalize(max(p - q, 0)) - or p for the bonus - per block of V.
3. ``_finalize_kernel`` picks the block where the inverse CDF crosses u * total,
   rescans that one block, and writes the accepted drafts and the new token.

Logits are read once plus one row per request; draft probabilities only at that row
(and at the draft token of each row). Greedy (temperature 0) needs pass 1 (argmax only)
and pass 3. The semantics are those of :func:`~dspark_sim.kernels.reference.accept_ref`.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from . import autotune
from .checks import check_accept_args, nothing_accepted, resolve_max_window

__all__ = ["accept", "accept_greedy"]

LOG2E = tl.constexpr(1.4426950408889634)
_BIG = tl.constexpr(2147483647)
MAX_SPLITS = 128  # splits of V per row (row statistics) - also the merge width
MIN_BLOCK_SUMS = 256  # block sums one program scans (pass 3): V / BLOCK_V must fit


@triton.jit
def _request_of_row(indptr_ptr, R, row, LOG_R: tl.constexpr):
    """Binary search: the r with indptr[r] <= row < indptr[r + 1]."""
    r = row * 0
    for i in tl.static_range(LOG_R):
        cand = r + (1 << (LOG_R - 1 - i))
        nxt = tl.load(indptr_ptr + cand, mask=cand <= R, other=0)
        r = tl.where((cand <= R) & (nxt <= row), cand, r)
    return r


@triton.jit
def _absorb(x, it, m_lane, it_lane, ms_row, s_row, scale, GREEDY: tl.constexpr):
    """Fold one block x [BLOCK_V / 8, 8] into the running statistics (see below)."""
    first = x > m_lane
    it_lane = tl.where(first, it, it_lane)
    m_lane = tl.where(first, x, m_lane)
    if not GREEDY:
        row_m = tl.max(m_lane, 1)
        ms_new = tl.where(row_m == float("-inf"), 0.0, row_m) * scale
        # min(., 0): while a row has seen no finite logit ms_row is a placeholder and s_row is 0.
        s_row = s_row * tl.exp2(tl.minimum(ms_row - ms_new, 0.0)) + tl.sum(tl.exp2(x * scale - ms_new[:, None]), 1)
        ms_row = ms_new
    return m_lane, it_lane, ms_row, s_row


# Shape-dependent integers are not specialised on (== 1, % 16): one binary per config.
@triton.jit(do_not_specialize=["R"])
def _row_stats_kernel(
    logits_ptr, stride_l, indptr_ptr, temp_ptr, part_m_ptr, part_s_ptr, part_i_ptr, R, V, chunk,
    BLOCK_V: tl.constexpr, GREEDY: tl.constexpr, LOG_R: tl.constexpr, PREFETCH: tl.constexpr,
):
    row = tl.program_id(0)
    split = tl.program_id(1)
    start = split * chunk
    end = tl.minimum(start + chunk, V)
    base = logits_ptr + row.to(tl.int64) * stride_l + start
    scale = LOG2E  # logits to base-2 units at the row's temperature (1 for greedy rows)
    if not GREEDY:
        temp = tl.load(temp_ptr + _request_of_row(indptr_ptr, R, row, LOG_R))
        scale = LOG2E / tl.where(temp > 0, temp, 1.0)
    # The block is viewed as [BLOCK_V / 8, 8]: one 16-byte bf16 vector per row, so a thread
    # owns whole rows and reduces them alone. Running max and first argmax are kept per
    # lane, the exp-sum per row (rescaled by its own max); nothing crosses threads, and no
    # barrier runs, until the loop is done. Full blocks load unmasked; one masked tail.
    lane = tl.arange(0, BLOCK_V // 8)[:, None] * 8 + tl.arange(0, 8)[None, :]
    m_lane = tl.full([BLOCK_V // 8, 8], float("-inf"), tl.float32)
    it_lane = tl.zeros([BLOCK_V // 8, 8], tl.int32)  # block where the lane's max first appeared
    ms_row = tl.zeros([BLOCK_V // 8], tl.float32)  # the row's max * scale (0 until one is finite)
    s_row = tl.zeros([BLOCK_V // 8], tl.float32)  # sum of exp2(l * scale - ms_row)
    n_full = (end - start) // BLOCK_V
    if PREFETCH:
        if n_full > 0:  # the next block is requested before this one is folded in
            x = tl.load(base + lane).to(tl.float32)
            for it in range(1, n_full):
                x_next = tl.load(base + it * BLOCK_V + lane).to(tl.float32)
                m_lane, it_lane, ms_row, s_row = _absorb(x, it - 1, m_lane, it_lane, ms_row, s_row, scale, GREEDY)
                x = x_next
            m_lane, it_lane, ms_row, s_row = _absorb(x, n_full - 1, m_lane, it_lane, ms_row, s_row, scale, GREEDY)
    else:
        for it in range(0, n_full):
            x = tl.load(base + it * BLOCK_V + lane).to(tl.float32)
            m_lane, it_lane, ms_row, s_row = _absorb(x, it, m_lane, it_lane, ms_row, s_row, scale, GREEDY)
    if n_full * BLOCK_V < end - start:
        v = n_full * BLOCK_V + lane
        x = tl.load(base + v, mask=v < end - start, other=float("-inf")).to(tl.float32)
        m_lane, it_lane, ms_row, s_row = _absorb(x, n_full, m_lane, it_lane, ms_row, s_row, scale, GREEDY)
    m = tl.max(tl.max(m_lane, 1), 0)
    ms = tl.where(m == float("-inf"), 0.0, m) * scale
    arg = tl.min(tl.min(tl.where(m_lane == m, start + it_lane * BLOCK_V + lane, _BIG), 1), 0)
    out = row * tl.num_programs(1) + split
    tl.store(part_m_ptr + out, m)
    tl.store(part_s_ptr + out, tl.sum(tl.where(s_row > 0, s_row * tl.exp2(ms_row - ms), 0.0), 0))
    tl.store(part_i_ptr + out, arg)


@triton.jit
def _row_combine(part_m_ptr, part_s_ptr, part_i_ptr, row, n_splits, scale, SPLITS_P2: tl.constexpr):
    """Merge a row's split statistics: (max * scale, sum of exp2(l * scale - that), first argmax)."""
    k = tl.arange(0, SPLITS_P2)
    at = row.to(tl.int64) * n_splits + k
    m = tl.load(part_m_ptr + at, mask=k < n_splits, other=float("-inf"))
    s = tl.load(part_s_ptr + at, mask=k < n_splits, other=0.0)
    i = tl.load(part_i_ptr + at, mask=k < n_splits, other=_BIG)
    big_m = tl.max(m, 0)
    ms = tl.where(big_m == float("-inf"), 0.0, big_m) * scale
    return ms, tl.sum(s * tl.exp2(m * scale - ms), 0), tl.min(tl.where(m == big_m, i, _BIG), 0)


@triton.jit
def _walk_window(
    logits_ptr, stride_l, q_ptr, stride_q, draft_ptr, u_ptr, part_m_ptr, part_s_ptr, part_i_ptr,
    indptr_ptr, temp_ptr, r, N, V, n_splits, HAS_Q: tl.constexpr, SPLITS_P2: tl.constexpr,
):
    """Request r's verification up to its first rejection. Returns (start, length, greedy,
    scale, accepted, sample row, that row's max * scale, sum and argmax, residual?)."""
    start = tl.load(indptr_ptr + r)
    length = tl.load(indptr_ptr + r + 1) - start
    if HAS_Q:
        temp = tl.load(temp_ptr + r)
        greedy = (temp <= 0).to(tl.int32)
        scale = LOG2E / tl.where(greedy != 0, 1.0, temp)
    else:
        greedy = length * 0 + 1
        scale = length * 0.0 + LOG2E
    n = 0
    done = 0
    for j in range(0, length - 1):
        row = start + j
        ms, s, arg = _row_combine(part_m_ptr, part_s_ptr, part_i_ptr, row, n_splits, scale, SPLITS_P2)
        x = tl.load(draft_ptr + row).to(tl.int32)
        ok = arg == x
        if HAS_Q:
            inb = (x >= 0) & (x < V) & (greedy == 0)
            lx = tl.load(logits_ptr + row.to(tl.int64) * stride_l + x, mask=inb, other=float("-inf")).to(tl.float32)
            qx = tl.load(q_ptr + row.to(tl.int64) * stride_q + x, mask=inb, other=0.0).to(tl.float32)
            px = tl.exp2(lx * scale - ms) / s
            ok = tl.where(greedy != 0, ok, tl.load(u_ptr + row) * qx < px)
        n += ((done == 0) & ok).to(tl.int32)
        done = done | (ok == 0).to(tl.int32)
    # A window of length 0 (no anchor row) samples nothing: its row only has to stay in bounds
    # (N >= 1 here: a call with no rows launches nothing).
    srow = tl.maximum(tl.minimum(start + n, N - 1), 0)
    ms, s, arg = _row_combine(part_m_ptr, part_s_ptr, part_i_ptr, srow, n_splits, scale, SPLITS_P2)
    return start, length, greedy, scale, n, srow, ms, s, arg, n < length - 1


@triton.jit
def _sample_weights(logits_row, q_row, v, limit, scale, ms, inv_s, resid):
    """Unnormalised sampling mass at v < limit: max(p - q, 0) after a rejection, else p."""
    x = tl.load(logits_row + v, mask=v < limit, other=float("-inf")).to(tl.float32)
    p = tl.exp2(x * scale - ms) * inv_s
    q = tl.load(q_row + v, mask=v < tl.where(resid, limit, 0), other=0.0).to(tl.float32)
    return tl.where(v < limit, tl.where(resid, tl.maximum(p - q, 0.0), p), 0.0)


@triton.jit(do_not_specialize=["N", "n_splits", "n_blocks"])
def _residual_sums_kernel(
    logits_ptr, stride_l, q_ptr, stride_q, draft_ptr, u_ptr, part_m_ptr, part_s_ptr, part_i_ptr,
    indptr_ptr, temp_ptr, bsum_ptr, N, V, n_splits, n_blocks, chunk,
    BLOCK_V: tl.constexpr, SPLITS_P2: tl.constexpr,
):
    r = tl.program_id(0)
    start, length, greedy, scale, n, srow, ms, s, arg, resid = _walk_window(
        logits_ptr, stride_l, q_ptr, stride_q, draft_ptr, u_ptr, part_m_ptr, part_s_ptr, part_i_ptr,
        indptr_ptr, temp_ptr, r, N, V, n_splits, True, SPLITS_P2)
    lo = tl.program_id(1) * chunk
    hi = tl.where((greedy != 0) | (length <= 0), lo, tl.minimum(lo + chunk, V))  # greedy rows sample nothing
    logits_row = logits_ptr + srow.to(tl.int64) * stride_l
    q_row = q_ptr + srow.to(tl.int64) * stride_q
    inv_s = 1.0 / s
    offs = tl.arange(0, BLOCK_V)
    for off in range(lo, hi, BLOCK_V):
        w = _sample_weights(logits_row, q_row, off + offs, hi, scale, ms, inv_s, resid)
        tl.store(bsum_ptr + r.to(tl.int64) * n_blocks + off // BLOCK_V, tl.sum(w, 0))


@triton.jit(do_not_specialize=["N", "n_splits", "n_blocks", "W"])
def _finalize_kernel(
    logits_ptr, stride_l, q_ptr, stride_q, draft_ptr, u_ptr, ur_ptr, part_m_ptr, part_s_ptr, part_i_ptr,
    indptr_ptr, temp_ptr, bsum_ptr, acc_ptr, out_ptr, N, V, n_splits, n_blocks, W,
    BLOCK_V: tl.constexpr, NBLK_P2: tl.constexpr, W_P2: tl.constexpr,
    HAS_Q: tl.constexpr, SPLITS_P2: tl.constexpr,
):
    r = tl.program_id(0)
    start, length, greedy, scale, n, srow, ms, s, arg, resid = _walk_window(
        logits_ptr, stride_l, q_ptr, stride_q, draft_ptr, u_ptr, part_m_ptr, part_s_ptr, part_i_ptr,
        indptr_ptr, temp_ptr, r, N, V, n_splits, HAS_Q, SPLITS_P2)
    tok = arg
    if HAS_Q:
        sampling = (greedy == 0) & (length > 0)
        b = tl.arange(0, NBLK_P2)
        bs = tl.load(bsum_ptr + r.to(tl.int64) * n_blocks + b, mask=b < tl.where(sampling, n_blocks, 0), other=0.0)
        total = tl.sum(bs, 0)
        target = tl.load(ur_ptr + r) * total
        # Inverse CDF, coarse then fine: the first block whose inclusive sum passes target...
        blk = tl.sum(((tl.cumsum(bs, 0) <= target) & (b < n_blocks)).to(tl.int32), 0)
        blk = tl.where(blk < n_blocks, blk, tl.max(tl.where(bs > 0, b, 0), 0))
        excl = tl.sum(tl.where(b < blk, bs, 0.0), 0)
        # ...then the first token in it; rounding that overshoots falls back to the last token with mass.
        v = blk * BLOCK_V + tl.arange(0, BLOCK_V)
        w = _sample_weights(logits_ptr + srow.to(tl.int64) * stride_l, q_ptr + srow.to(tl.int64) * stride_q,
                            v, tl.where(sampling, V, 0), scale, ms, 1.0 / s, resid)
        hit = (excl + tl.cumsum(w, 0) > target) & (w > 0)
        first = tl.min(tl.where(hit, v, _BIG), 0)
        pick = tl.where(first < _BIG, first, tl.max(tl.where(w > 0, v, -1), 0))
        tok = tl.where(sampling & (total > 0) & (pick >= 0), pick, arg)  # no mass at all: target argmax
    tok = tl.where(length > 0, tok, -1)
    j = tl.arange(0, W_P2)
    drafts = tl.load(draft_ptr + start + j, mask=j < n, other=0).to(tl.int32)
    row = tl.where(j < n, drafts, tl.where(j == n, tok, -1))
    tl.store(out_ptr + r.to(tl.int64) * W + j, row, mask=j < W)
    tl.store(acc_ptr + r, n)


# ----------------------------------------------------------------------------- launchers


def _log_r(R: int) -> int:
    """Binary-search depth over indptr: one value (one binary) up to R = 4095."""
    return max(12, R.bit_length())


def _chunk(vocab: int, splits: int, block_v: int) -> tuple[int, int]:
    """Per-program span of V (a multiple of block_v) and the number of programs it gives."""
    if not 1 <= splits <= MAX_SPLITS:
        raise ValueError(f"SPLITS must be in 1..{MAX_SPLITS}, got {splits}")
    chunk = triton.cdiv(triton.cdiv(vocab, splits), block_v) * block_v
    return chunk, triton.cdiv(vocab, chunk)


def launch_row_stats(logits, indptr, temperature, greedy: bool, cfg: dict):
    """Pass 1. Returns (part_m, part_s, part_i, n_splits); parts are [N * n_splits]."""
    N, V = logits.shape
    chunk, n_splits = _chunk(V, cfg["SPLITS"], cfg["BLOCK_V"])
    part_m = torch.empty(N * n_splits, dtype=torch.float32, device=logits.device)
    part_s = torch.empty_like(part_m)
    part_i = torch.empty(N * n_splits, dtype=torch.int32, device=logits.device)
    R = indptr.numel() - 1
    _row_stats_kernel[(N, n_splits)](
        logits, logits.stride(0), indptr, temperature, part_m, part_s, part_i, R, V, chunk,
        BLOCK_V=cfg["BLOCK_V"], GREEDY=greedy, LOG_R=1 if greedy else _log_r(R), PREFETCH=bool(cfg.get("PREFETCH", 0)),
        num_warps=cfg["num_warps"], num_stages=cfg["num_stages"],
    )
    return part_m, part_s, part_i, n_splits


def launch_residual_sums(args: dict, stats, cfg: dict):
    """Pass 2. Returns (block sums [R, n_blocks], n_blocks)."""
    logits, q = args["target_logits"], args["draft_probs"]
    N, V = logits.shape
    R = args["indptr"].numel() - 1
    part_m, part_s, part_i, n_splits = stats
    chunk, n_programs = _chunk(V, cfg["SPLITS"], cfg["BLOCK_V"])
    n_blocks = triton.cdiv(V, cfg["BLOCK_V"])
    bsum = torch.empty(R, n_blocks, dtype=torch.float32, device=logits.device)
    _residual_sums_kernel[(R, n_programs)](
        logits, logits.stride(0), q, q.stride(0), args["draft_tokens"], args["uniforms"], part_m, part_s, part_i,
        args["indptr"], args["temperature"], bsum, N, V, n_splits, n_blocks, chunk,
        BLOCK_V=cfg["BLOCK_V"], SPLITS_P2=MAX_SPLITS,
        num_warps=cfg["num_warps"], num_stages=cfg["num_stages"],
    )
    return bsum, n_blocks


def launch_finalize(args: dict, stats, sums, cfg: dict, W: int):
    """Pass 3 (with pass 2's config: it rescans one of its blocks the same way).
    Returns (accepted int32 [R], out_tokens int32 [R, W])."""
    logits, q = args["target_logits"], args["draft_probs"]
    N, V = logits.shape
    R = args["indptr"].numel() - 1
    part_m, part_s, part_i, n_splits = stats
    has_q = q is not None
    bsum, n_blocks = sums if has_q else (part_m, 1)
    q = q if has_q else logits  # an unused stand-in keeps the signature fixed
    accepted = torch.empty(R, dtype=torch.int32, device=logits.device)
    out = torch.empty(R, W, dtype=torch.int32, device=logits.device)
    _finalize_kernel[(R,)](
        logits, logits.stride(0), q, q.stride(0), args["draft_tokens"], args["uniforms"], args["resample_uniforms"],
        part_m, part_s, part_i, args["indptr"], args["temperature"], bsum, accepted, out, N, V, n_splits, n_blocks, W,
        BLOCK_V=cfg["BLOCK_V"] if has_q else 16,  # greedy: unused, fixed to compile once
        NBLK_P2=max(MIN_BLOCK_SUMS, triton.next_power_of_2(n_blocks)),
        W_P2=max(8, triton.next_power_of_2(W)), HAS_Q=has_q, SPLITS_P2=MAX_SPLITS, num_warps=4,
    )
    return accepted, out


def configs_for(args: dict) -> dict:
    """Launch configs for the three passes at this call's shape (tuned profile or default)."""
    N, V = args["target_logits"].shape
    R = args["indptr"].numel() - 1
    dev = args["target_logits"].device
    stats_kernel = "accept_row_stats" if args["draft_probs"] is not None else "accept_row_stats_greedy"
    return {
        "row_stats": autotune.lookup(stats_kernel, {"V": V, "N": N}, dev),
        "residual": autotune.lookup("accept_residual", {"V": V, "R": R}, dev),
    }


def run_accept(args: dict, W: int, cfgs: dict | None = None):
    """All passes with explicit configs (the tuner and the tests pick their own). With no
    logit rows at all (every window empty) nothing is launched: no accepted drafts, no token."""
    if args["target_logits"].shape[0] == 0:
        return nothing_accepted(args["indptr"].numel() - 1, W, args["target_logits"].device)
    cfgs = cfgs or configs_for(args)
    has_q = args["draft_probs"] is not None
    stats = launch_row_stats(args["target_logits"], args["indptr"], args["temperature"], not has_q, cfgs["row_stats"])
    sums = launch_residual_sums(args, stats, cfgs["residual"]) if has_q else None
    return launch_finalize(args, stats, sums, cfgs["residual"], W)


def accept(
    target_logits, indptr, draft_tokens, draft_probs, temperature, uniforms, resample_uniforms, *, max_window=None
):
    """Verify draft tokens against the target over ragged windows; sample the next token.

    Args:
        target_logits: [N, V] bf16/fp16/fp32, rows contiguous; N = indptr[-1].
        indptr: int32 [R + 1]; request r owns rows indptr[r]..indptr[r+1]-1 (its verify_len, >= 1).
        draft_tokens: int32/int64 [N]; row j's entry is draft token j + 1 (the last row's is ignored).
        draft_probs: [N, V] float draft distributions (rejection sampling), or None: every request greedy.
        temperature: fp32 [R]; 0 = greedy (argmax match; draft_probs unused for that request).
        uniforms: fp32 [N] in [0, 1): accept draft at row i iff uniforms[i] * q(x) < p(x).
        resample_uniforms: fp32 [R] in [0, 1): inverse-CDF draw of the corrected or bonus token.
        max_window: width W of out_tokens (gamma + 1). None infers it from indptr (one host sync).

    Returns:
        accepted int32 [R] (accepted drafts), out_tokens int32 [R, W]: the accepted drafts, then the
        corrected (normalize(max(p - q, 0))) or bonus (p) token, then -1.
    """
    check_accept_args(target_logits, indptr, draft_tokens, draft_probs, temperature, uniforms, resample_uniforms)
    W = resolve_max_window(indptr, max_window)
    args = dict(target_logits=target_logits, indptr=indptr, draft_tokens=draft_tokens, draft_probs=draft_probs,
                temperature=temperature, uniforms=uniforms, resample_uniforms=resample_uniforms)
    return run_accept(args, W)


def accept_greedy(target_logits, indptr, draft_tokens, *, max_window=None):
    """Greedy verification: accept while argmax(target) equals the draft; then the argmax.

    Shapes as in :func:`accept` (temperatures and uniforms are not needed). One read of
    the logits, no exponentials.
    """
    check_accept_args(target_logits, indptr, draft_tokens, None, None, None, None)
    W = resolve_max_window(indptr, max_window)
    # The greedy kernels never read temperature or uniforms: indptr stands in for them.
    args = dict(target_logits=target_logits, indptr=indptr, draft_tokens=draft_tokens, draft_probs=None,
                temperature=indptr, uniforms=indptr, resample_uniforms=indptr)
    return run_accept(args, W)
