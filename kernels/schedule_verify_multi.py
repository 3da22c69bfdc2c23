"""schedule_verify over many programs: any batch, three or four launches (rule: :mod:`.schedule_verify`).

The single-program kernel sorts every survival of the batch in one program's
registers, which is slow past a thousand survivals and stops at a few thousand. Here:

1. ``_keys_kernel`` (a program per chunk of requests; current and lagged confidences
   side by side): survivals, then one int64 key per (request, position) that orders
   them exactly as the rule ranks them (survival descending, then lower position,
   then lower request): the survival's fp32 bits above, the inverted element index
   below. Inadmissible elements get distinct negative keys, so every key is unique
   and ranks form a permutation.
2. ``_rank_kernel`` (a program per block of keys): a key's rank is the number of
   larger keys. ``pairwise`` counts them against every key of the batch (quadratic,
   the faster up to ~4 k survivals). ``merge`` counts within the key's chunk only and writes
   each chunk sorted; a second launch then adds, for every other chunk, the count a
   binary search finds there. The last launch writes the current confidences' ranks
   by element and, when the budget is searched, the sizing survivals at their sorted
   positions with the SPS at that many batch tokens.
3. ``_finish_kernel`` (one program): the budget from a blockwise prefix sum over the
   sorted survivals (argmax of Theta, or Algorithm 1's first non-improving admission)
   unless the caller gave it, then each request's count among the K best, the clamps,
   K and Theta.

Integers decide everything before the prefix sums, and the floating-point sums run
in one program in a fixed order, so results do not depend on how programs interleave.
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

from .schedule_parts import steps_per_sec, survival
from .schedule_paths import multi_path

CHUNK = {"pairwise": 1024, "merge": 2048}  # survivals per chunk (merge: ranked within, then merged)
INDEX_BITS = tl.constexpr(31)  # a key is (survival bits << 31) + (INDEX_MASK - element index)
INDEX_MASK = tl.constexpr(2**31 - 1)


def tiles() -> dict:
    """Work per program of the rank launches: ``pairwise`` keys x keys compared per step,
    ``merge`` keys x chunks searched. The CPU interpreter pays per operation, not per
    element, so it takes larger tiles (same code, fewer programs)."""
    if os.environ.get("TRITON_INTERPRET") == "1":
        return {"block_e": 256, "block_c": 1024, "merge": 65536}
    return {"block_e": 64, "block_c": 256, "merge": 4096}


@triton.jit(do_not_specialize=["stride_cr", "stride_lr", "R", "R_lag", "gamma", "max_len", "R_PAD", "N_PAD"])
def _keys_kernel(conf_ptr, stride_cr, stride_cg, lag_ptr, stride_lr, stride_lg, temp_ptr, keys_ptr,
                 R, R_lag, gamma, max_len, eps, R_PAD, N_PAD,
                 CHUNK_R: tl.constexpr, BLOCK_G: tl.constexpr):
    c = tl.program_id(0)
    which = tl.program_id(1)  # 0: current confidences, 1: lagged
    r0 = c * CHUNK_R
    if which == 0:
        a = survival(conf_ptr + r0 * stride_cr, stride_cr, stride_cg, temp_ptr, R - r0, gamma, CHUNK_R, BLOCK_G)
        n = R
    else:
        a = survival(lag_ptr + r0 * stride_lr, stride_lr, stride_lg, temp_ptr, R_lag - r0, gamma, CHUNK_R, BLOCK_G)
        n = R_lag
    jj = tl.arange(0, BLOCK_G)[:, None]
    rr = r0 + tl.arange(0, CHUNK_R)[None, :]
    ok = (jj < gamma) & (jj + 2 <= max_len) & (rr < n) & (a >= eps)
    e = (jj * R_PAD + rr).to(tl.int64)
    bits = a.to(tl.int32, bitcast=True).to(tl.int64)
    key = tl.reshape(tl.where(ok, (bits << INDEX_BITS) + (INDEX_MASK - e), -1 - e), [BLOCK_G * CHUNK_R])
    offs = tl.arange(0, BLOCK_G * CHUNK_R)
    tl.store(keys_ptr + which * N_PAD + c * (BLOCK_G * CHUNK_R) + offs, key)


LOCAL, GLOBAL, MERGE = 0, 1, 2  # _rank_kernel modes


@triton.jit(do_not_specialize=["R", "N_PAD", "n_chunks", "n_p", "n_bs", "n_m"])
def _rank_kernel(keys_ptr, sorted_ptr, rank_ptr, vals_ptr, spsat_ptr, R, N_PAD, n_chunks,
                 probes_ptr, sps_ptr, n_p, bias_s, bs_ptr, alpha_ptr, n_bs, m_ptr, theta_ptr, n_m,
                 MODE: tl.constexpr, BLOCK_E: tl.constexpr, CHUNK: tl.constexpr, NCH: tl.constexpr,
                 LOG_CHUNK: tl.constexpr, BLOCK_C: tl.constexpr, SIZE_OF: tl.constexpr,
                 ADDITIVE: tl.constexpr, LOG_P: tl.constexpr):
    which = tl.program_id(1)
    offs = tl.program_id(0) * BLOCK_E + tl.arange(0, BLOCK_E)
    if MODE == 2:  # MERGE: chunks sorted by the LOCAL launch; per chunk, the longest larger prefix
        base = sorted_ptr + which * N_PAD
        mine = tl.load(base + offs)
        q = tl.arange(0, NCH)[None, :]
        pos = tl.zeros([BLOCK_E, NCH], dtype=tl.int32)
        for i in tl.static_range(LOG_CHUNK + 1):
            cand = pos + (CHUNK >> i)
            inside = (cand <= CHUNK) & (q < n_chunks)
            probe = tl.load(base + q * CHUNK + cand - 1, mask=inside, other=0)
            pos = tl.where(inside & (probe > mine[:, None]), cand, pos)
        rank = tl.sum(pos, 1)
    else:
        base = keys_ptr + which * N_PAD
        mine = tl.load(base + offs)
        if MODE == 0:
            lo = (tl.program_id(0) * BLOCK_E // CHUNK) * CHUNK
            hi = lo + CHUNK
        else:
            lo = 0
            hi = N_PAD
        rank = tl.zeros([BLOCK_E], dtype=tl.int32)
        for c0 in range(lo, hi, BLOCK_C):
            other = tl.load(base + c0 + tl.arange(0, BLOCK_C))
            rank += tl.sum((other[None, :] > mine[:, None]).to(tl.int32), 1)
        if MODE == 0:  # LOCAL: write the chunk sorted, for the MERGE launch
            tl.store(sorted_ptr + which * N_PAD + lo + rank, mine)
    if MODE != 0:
        neg = mine < 0
        if which == 0:
            tl.store(rank_ptr + tl.where(neg, -1 - mine, INDEX_MASK - (mine & INDEX_MASK)), rank)
        if which == SIZE_OF:
            val = tl.where(neg, -1.0, (mine >> INDEX_BITS).to(tl.int32).to(tl.float32, bitcast=True))
            tl.store(vals_ptr + rank, val)
            sps = steps_per_sec(R + rank + 1, R, probes_ptr, sps_ptr, n_p, bias_s, bs_ptr, alpha_ptr, n_bs, m_ptr,
                                theta_ptr, n_m, ADDITIVE, LOG_P)
            tl.store(spsat_ptr + rank, sps)


@triton.jit
def _scan_budget(vals_ptr, spsat_ptr, R, max_bt, N_PAD, probes_ptr, sps_ptr, n_p, bias_s, bs_ptr, alpha_ptr, n_bs,
                 m_ptr, theta_ptr, n_m, SCAN: tl.constexpr, ALGORITHM1: tl.constexpr, ADDITIVE: tl.constexpr,
                 LOG_P: tl.constexpr):
    """K from the sorted survivals (-1 = none), block by block in order."""
    sps_r = steps_per_sec(R, R, probes_ptr, sps_ptr, n_p, bias_s, bs_ptr, alpha_ptr, n_bs, m_ptr, theta_ptr, n_m,
                          ADDITIVE, LOG_P)
    carry = 0.0
    best = R * sps_r  # Theta at k = 0: a budget must beat it strictly
    k = 0
    stop = N_PAD
    for s0 in range(0, N_PAD, SCAN):
        kk = s0 + tl.arange(0, SCAN)
        v = tl.load(vals_ptr + kk)
        gain_a = tl.where(v >= 0, v, 0.0)
        tau = R + carry + tl.cumsum(gain_a, 0)
        ok = (v >= 0) & (R + kk + 1 <= max_bt)
        sp = tl.load(spsat_ptr + kk)
        if ALGORITHM1:
            prev = tl.where(kk > 0, tl.load(spsat_ptr + kk - 1, mask=kk > 0, other=0.0), sps_r)
            gain = tau * (sp - prev) + gain_a * prev  # as the single-program kernel: no cancellation
            stop = tl.minimum(stop, tl.min(tl.where((gain <= 0) | (ok == 0), kk, N_PAD), 0))
        else:
            theta = tl.where(ok, tau * sp, -1.0)
            top = tl.max(theta, 0)
            first = tl.min(tl.where(theta == top, kk + 1, N_PAD + 1), 0)
            k = tl.where(top > best, first, k)
            best = tl.maximum(best, top)
        carry += tl.sum(gain_a, 0)
    if ALGORITHM1:
        k = stop
    return k


@triton.jit(do_not_specialize=["stride_cr", "R", "gamma", "min_len", "max_len", "max_bt", "budget", "R_PAD", "N_PAD",
                               "n_p", "n_bs", "n_m"])
def _finish_kernel(conf_ptr, stride_cr, stride_cg, temp_ptr, rank_ptr, vals_ptr, spsat_ptr,
                   probes_ptr, sps_ptr, n_p, bias_s, bs_ptr, alpha_ptr, n_bs, m_ptr, theta_ptr, n_m,
                   len_ptr, k_ptr, theta_out_ptr,
                   R, gamma, min_len, max_len, max_bt, eps, budget, R_PAD, N_PAD,
                   BLOCK_G: tl.constexpr, SCAN: tl.constexpr, BLOCK_RC: tl.constexpr, HAS_BUDGET: tl.constexpr,
                   ALGORITHM1: tl.constexpr, ADDITIVE: tl.constexpr, LOG_P: tl.constexpr):
    if HAS_BUDGET:
        k = budget
    else:
        k = _scan_budget(vals_ptr, spsat_ptr, R, max_bt, N_PAD, probes_ptr, sps_ptr, n_p, bias_s, bs_ptr, alpha_ptr,
                         n_bs, m_ptr, theta_ptr, n_m, SCAN, ALGORITHM1, ADDITIVE, LOG_P)
    jj = tl.arange(0, BLOCK_G)[:, None]
    b = 0
    tau = 0.0
    for r0 in range(0, R, BLOCK_RC):
        a = survival(conf_ptr + r0 * stride_cr, stride_cr, stride_cg, temp_ptr, R - r0, gamma, BLOCK_RC, BLOCK_G)
        rr = r0 + tl.arange(0, BLOCK_RC)
        live = rr < R
        adm = (jj < gamma) & (jj + 2 <= max_len) & live[None, :] & (a >= eps)
        rank = tl.load(rank_ptr + jj * R_PAD + rr[None, :], mask=adm, other=0)
        # admissible survivals hold ranks 0 .. n-1: a rank under K is among the K best
        counts = tl.sum((adm & (rank < k)).to(tl.int32), 0)
        lens = tl.minimum(tl.maximum(1 + counts, min_len), max_len)
        tl.store(len_ptr + rr, lens, mask=live)
        b += tl.sum(tl.where(live, lens, 0), 0)
        tau += tl.sum(tl.sum(tl.where(jj < lens[None, :] - 1, a, 0.0), 1), 0)
    sps = steps_per_sec(b, R, probes_ptr, sps_ptr, n_p, bias_s, bs_ptr, alpha_ptr, n_bs, m_ptr, theta_ptr, n_m,
                        ADDITIVE, LOG_P)
    tl.store(k_ptr, b - R)
    tl.store(theta_out_ptr, (R + tau) * sps)


def run_multi(conf, lag_conf, temperatures, table, additive: bool, log_p: int, outs, min_len: int, max_len: int,
              max_bt: int, eps: float, mode: str, budget_k, merge: bool) -> None:
    """Launch the three kernels into ``outs = (verify_len, budget_k, theta)`` (arguments
    checked and the SPS table unpacked by :func:`~.schedule_verify.run_schedule`)."""
    R, gamma = conf.shape
    lag = conf if lag_conf is None else lag_conf
    block_g = max(2, triton.next_power_of_2(gamma))
    chunk = CHUNK["merge" if merge else "pairwise"]
    chunk_r = chunk // block_g
    n_chunks = triton.cdiv(max(R, lag.shape[0]), chunk_r)
    r_pad, n_pad = n_chunks * chunk_r, n_chunks * chunk
    arrays = 1 if lag_conf is None else 2
    search = budget_k is None
    dev = conf.device
    keys = torch.empty(arrays * n_pad, dtype=torch.int64, device=dev)
    rank = torch.empty(n_pad, dtype=torch.int32, device=dev)
    vals = torch.empty(n_pad if search else 1, dtype=torch.float32, device=dev)
    spsat = torch.empty_like(vals)
    _keys_kernel[(n_chunks, arrays)](
        conf, conf.stride(0), conf.stride(1), lag, lag.stride(0), lag.stride(1), temperatures, keys,
        R, lag.shape[0], gamma, max_len, eps, r_pad, n_pad, CHUNK_R=chunk_r, BLOCK_G=block_g, num_warps=4)
    nch = triton.next_power_of_2(n_chunks)
    sorted_keys = torch.empty_like(keys) if merge else keys
    tile = tiles()
    common = dict(CHUNK=chunk, NCH=nch, LOG_CHUNK=chunk.bit_length() - 1, BLOCK_C=min(tile["block_c"], n_pad),
                  SIZE_OF=(arrays - 1) if search else -1, ADDITIVE=additive, LOG_P=log_p, num_warps=4)
    for step in (LOCAL, MERGE) if merge else (GLOBAL,):
        block_e = max(16, min(chunk, tile["merge"] // nch)) if step == MERGE else min(tile["block_e"], chunk)
        _rank_kernel[(n_pad // block_e, arrays)](
            keys, sorted_keys, rank, vals, spsat, R, n_pad, n_chunks, *table, MODE=step, BLOCK_E=block_e, **common)
    lens, k_out, theta = outs
    _finish_kernel[(1,)](
        conf, conf.stride(0), conf.stride(1), temperatures, rank, vals, spsat, *table, lens, k_out, theta,
        R, gamma, min_len, max_len, max_bt, eps, 0 if search else int(budget_k), r_pad, n_pad,
        BLOCK_G=block_g, SCAN=min(4096, chunk), BLOCK_RC=max(16, 2048 // block_g), HAS_BUDGET=not search,
        ALGORITHM1=mode == "algorithm1", ADDITIVE=additive, LOG_P=log_p, num_warps=8)
