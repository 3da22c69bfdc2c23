"""Vectorised torch versions of the kernels: the speed baselines of the benchmark.

Same contracts as the kernels, written the way one would in plain torch (sort +
cumsum + bucketize; softmax + gather + cumsum + searchsorted), with no host
synchronisation, so ``torch.compile`` can take them whole. Tests hold them equal to
the loop references in :mod:`dspark_sim.kernels.reference`.
"""

from __future__ import annotations

import torch

from .checks import check_accept_args, check_schedule_args, nothing_accepted, resolve_max_window
from .sps_tensors import SpsTensors

__all__ = ["schedule_verify_torch", "accept_torch", "accept_greedy_torch"]


def _interp(xs: torch.Tensor, ys: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    hi = torch.bucketize(x, xs, right=True)
    lo = (hi - 1).clamp(0, xs.numel() - 1)
    hi = hi.clamp(max=xs.numel() - 1)
    x0, x1 = xs[lo].float(), xs[hi].float()
    frac = torch.where(x1 > x0, (x.float() - x0) / torch.where(x1 > x0, x1 - x0, 1.0), 0.0)
    return ys[lo] + frac * (ys[hi] - ys[lo])


def steps_per_sec(sps, num_reqs: int, b: torch.Tensor) -> torch.Tensor:
    """SPS at batch tokens b (int tensor), fp32."""
    if isinstance(sps, SpsTensors):
        idx = (torch.bucketize(b, sps.probes, right=True) - 1).clamp(min=0)
        return sps.steps_per_sec[idx]
    alpha = _interp(sps.bs_probes, sps.alpha_s, torch.full_like(b, num_reqs))
    return 1.0 / (sps.bias_s + alpha + _interp(sps.m_probes, sps.theta_s, b))


def _ranked(conf, temperatures, max_len: int, eps: float):
    """(survival [R, block_size], candidates position-major flat with -1 = inadmissible,
    sorted values, sorting order). Stable sort keeps (j, r) order among ties."""
    c = torch.sigmoid(torch.logit(conf) / temperatures)
    a = torch.cumprod(c, dim=1)
    j = torch.arange(a.shape[1], device=a.device)
    cand = torch.where((a >= eps) & (j + 2 <= max_len), a, -1.0).t().reshape(-1)
    vals, order = torch.sort(cand, descending=True, stable=True)
    return a, cand, vals, order


def _budget(vals, R: int, sps, max_bt, algorithm1: bool) -> torch.Tensor:
    n = vals.numel()
    k = torch.arange(1, n + 1, device=vals.device)
    gain_a = vals.clamp(min=0)
    tau = R + torch.cumsum(gain_a, 0)
    ok = (vals >= 0) & (R + k <= max_bt)
    sps_b, sps_prev = steps_per_sec(sps, R, R + k), steps_per_sec(sps, R, R + k - 1)
    if algorithm1:
        stop = ~((tau * (sps_b - sps_prev) + gain_a * sps_prev > 0) & ok)
        return torch.where(stop.any(), stop.int().argmax(), n)
    theta = torch.where(ok, tau * sps_b, -1.0)
    best = theta.max()
    return torch.where(best > R * sps_prev[0], theta.argmax() + 1, 0)


def schedule_verify_torch(
    conf, temperatures, sps, *, min_verify_len=1, max_verify_len=None, survival_eps=1e-6, mode="production", lag_conf=None
):
    """Torch version of :func:`dspark_sim.kernels.schedule_verify` (same contract)."""
    min_len, max_len = check_schedule_args(conf, temperatures, sps, min_verify_len, max_verify_len, survival_eps, mode, lag_conf)
    R, block_size = conf.shape
    max_bt = 2**30 if sps.max_batch_tokens is None else sps.max_batch_tokens
    a, cand, vals, order = _ranked(conf, temperatures, max_len, survival_eps)
    sizing = vals if lag_conf is None else _ranked(lag_conf, temperatures, max_len, survival_eps)[2]
    k = _budget(sizing, R, sps, max_bt, mode == "algorithm1")
    rank = torch.empty_like(order)
    rank[order] = torch.arange(order.numel(), device=conf.device)
    chosen = (rank < k) & (cand >= 0)
    counts = chosen.view(block_size, R).sum(0)
    lens = (1 + counts).clamp(min_len, max_len).to(torch.int32)
    b = lens.sum()
    j = torch.arange(block_size, device=conf.device)
    tau = R + torch.where(j[None, :] < lens[:, None] - 1, a, 0.0).sum()
    theta = tau * steps_per_sec(sps, R, b.view(1))
    return lens, (b - R).view(1).to(torch.int32), theta.float()


def _windows(indptr: torch.Tensor, N: int):
    """Per row: its request, its position in the window, and the window's length."""
    rows = torch.arange(N, device=indptr.device)
    req = torch.bucketize(rows, indptr[1:].long(), right=True)
    length = (indptr[1:] - indptr[:-1]).long()
    return req, rows - indptr[req], length


def _emit(ok, req, pos, length, indptr, draft_tokens, token_at, W: int):
    """Accepted counts from per-row verdicts, then the out_tokens rows. token_at(srow,
    accepted) gives the corrected or bonus token of each request."""
    R, N = indptr.numel() - 1, draft_tokens.numel()
    ok = ok & (pos < length[req] - 1)
    ok_mat = torch.zeros(R, W + 1, dtype=torch.int32, device=ok.device)
    ok_mat[req, pos.clamp(max=W)] = ok.int()
    accepted = torch.cumprod(ok_mat, 1).sum(1)
    srow = (indptr[:-1] + accepted).clamp(min=0, max=N - 1)
    tok = torch.where(length > 0, token_at(srow, accepted), -1)  # an empty window samples nothing
    j = torch.arange(W, device=ok.device)
    drafts = draft_tokens[(indptr[:-1, None] + j).clamp(min=0, max=N - 1)].int()
    out = torch.where(j < accepted[:, None], drafts, torch.where(j == accepted[:, None], tok[:, None].int(), -1))
    return accepted.int(), out.int()


def accept_torch(
    target_logits, indptr, draft_tokens, draft_probs, temperature, uniforms, resample_uniforms, *, max_window=None
):
    """Torch version of :func:`dspark_sim.kernels.accept` (same contract; draft_probs required)."""
    R, N, V = check_accept_args(target_logits, indptr, draft_tokens, draft_probs, temperature, uniforms, resample_uniforms)
    W = resolve_max_window(indptr, max_window)
    if N == 0:
        return nothing_accepted(R, W, target_logits.device)
    req, pos, length = _windows(indptr, N)
    greedy_r = temperature <= 0
    logits = target_logits.float()
    p = torch.softmax(logits / torch.where(greedy_r, 1.0, temperature)[req][:, None], -1)
    arg = logits.argmax(-1)
    x = draft_tokens.long().clamp(0, V - 1)
    px, qx = p.gather(1, x[:, None])[:, 0], draft_probs.float().gather(1, x[:, None])[:, 0]
    ok = torch.where(greedy_r[req], arg == x, uniforms * qx < px)

    def token_at(srow, accepted):
        ps, qs = p[srow], draft_probs[srow].float()
        w = torch.where((accepted < length - 1)[:, None], (ps - qs).clamp(min=0), ps)
        cdf = torch.cumsum(w, -1)
        total = cdf[:, -1:]
        tok = torch.searchsorted(cdf, resample_uniforms[:, None] * total, right=True)[:, 0].clamp(max=V - 1)
        return torch.where(greedy_r | (total[:, 0] <= 0), arg[srow], tok)

    return _emit(ok, req, pos, length, indptr, draft_tokens, token_at, W)


def accept_greedy_torch(target_logits, indptr, draft_tokens, *, max_window=None):
    """Torch version of :func:`dspark_sim.kernels.accept_greedy`."""
    R, N, _ = check_accept_args(target_logits, indptr, draft_tokens, None, None, None, None)
    W = resolve_max_window(indptr, max_window)
    if N == 0:
        return nothing_accepted(R, W, target_logits.device)
    req, pos, length = _windows(indptr, N)
    arg = target_logits.argmax(-1)
    ok = arg == draft_tokens.long()
    return _emit(ok, req, pos, length, indptr, draft_tokens, lambda srow, accepted: arg[srow], W)
