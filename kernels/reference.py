"""Plain torch references for the DSpark kernels: loops, float64, obviously correct.

They define the semantics the Triton kernels must reproduce; they are slow on
purpose. The vectorised torch versions used as speed baselines live in
:mod:`dspark_sim.kernels.baseline`.
"""

from __future__ import annotations

import bisect
import math

import torch

from dspark_sim.cost.shapes import interp_clamped

from .checks import check_accept_args, check_schedule_args, resolve_max_window
from .sps_tensors import SpsTensors

__all__ = ["schedule_verify_ref", "accept_ref", "calibrated_survival_ref", "steps_per_sec_ref"]


# ----------------------------------------------------------------------------- schedule


def calibrated_survival_ref(conf: torch.Tensor, temperatures: torch.Tensor) -> torch.Tensor:
    """a[r, j] = prod_{i <= j} sigmoid(logit(conf[r, i]) / T_i), float64 [R, gamma]."""
    c = conf.double().cpu()
    t = temperatures.double().cpu()
    R, gamma = c.shape
    a = torch.zeros(R, gamma, dtype=torch.float64)
    for r in range(R):
        run = 1.0
        for j in range(gamma):
            run *= float(torch.sigmoid(torch.logit(c[r, j]) / t[j]))
            a[r, j] = run
    return a


def steps_per_sec_ref(sps, num_reqs: int, batch_tokens: int) -> float:
    """SPS at B = batch_tokens verify tokens for num_reqs requests (float64)."""
    if isinstance(sps, SpsTensors):
        probes = sps.probes.tolist()
        idx = max(0, min(bisect.bisect_right(probes, batch_tokens) - 1, len(probes) - 1))
        return float(sps.steps_per_sec[idx])
    step_s = (
        sps.bias_s
        + interp_clamped(sps.bs_probes.tolist(), sps.alpha_s.double().tolist(), float(num_reqs))
        + interp_clamped(sps.m_probes.tolist(), sps.theta_s.double().tolist(), float(batch_tokens))
    )
    return 1.0 / step_s


def _max_batch_tokens(sps) -> float:
    mbt = sps.max_batch_tokens
    return math.inf if mbt is None else mbt


def _candidates(a: torch.Tensor, max_len: int, eps: float) -> list:
    """Admissible (a, j, r), best first: a descending, then lower j, then lower r."""
    R, gamma = a.shape
    cands = [(float(a[r, j]), j, r) for r in range(R) for j in range(min(gamma, max_len - 1)) if a[r, j] >= eps]
    cands.sort(key=lambda c: (-c[0], c[1], c[2]))
    return cands


def schedule_verify_ref(
    conf, temperatures, sps, *, min_verify_len=1, max_verify_len=None, survival_eps=1e-6, mode="production", lag_conf=None,
    budget_k=None,
):
    """Loop reference of :func:`dspark_sim.kernels.schedule_verify` (same contract)."""
    min_len, max_len = check_schedule_args(
        conf, temperatures, sps, min_verify_len, max_verify_len, survival_eps, mode, lag_conf, budget_k
    )
    R, gamma = conf.shape
    a = calibrated_survival_ref(conf, temperatures)
    cands = _candidates(a, max_len, survival_eps)
    k_limit = _max_batch_tokens(sps) - R

    def theta(tau: float, k: int) -> float:
        return tau * steps_per_sec_ref(sps, R, R + k)

    if budget_k is not None:
        k = int(budget_k)
    elif mode == "algorithm1":
        k, tau = 0, float(R)
        for v, _, _ in cands:
            if k + 1 > k_limit or theta(tau + v, k + 1) <= theta(tau, k):
                break
            k, tau = k + 1, tau + v
    else:
        sizing = cands if lag_conf is None else _candidates(calibrated_survival_ref(lag_conf, temperatures), max_len, survival_eps)
        k, best, tau = 0, theta(float(R), 0), float(R)
        for i, (v, _, _) in enumerate(sizing, start=1):
            if i > k_limit:
                break
            tau += v
            if theta(tau, i) > best:
                k, best = i, theta(tau, i)

    counts = [0] * R
    for _, _, r in cands[:k]:
        counts[r] += 1
    lens = [min(max(1 + c, min_len), max_len) for c in counts]
    b = sum(lens)
    tau = R + sum(float(a[r, j]) for r in range(R) for j in range(lens[r] - 1))
    dev = conf.device
    return (
        torch.tensor(lens, dtype=torch.int32, device=dev),
        torch.tensor([b - R], dtype=torch.int32, device=dev),
        torch.tensor([tau * steps_per_sec_ref(sps, R, b)], dtype=torch.float32, device=dev),
    )


# ----------------------------------------------------------------------------- accept


def _first_argmax(x: torch.Tensor) -> int:
    return int((x == x.max()).nonzero()[0, 0])


def inverse_cdf_ref(w: torch.Tensor, u: float) -> int | None:
    """Smallest v with cumsum(w)[v] > u * sum(w) and w[v] > 0; the last v with
    w[v] > 0 if rounding leaves none; None when w has no mass."""
    if not float(w.sum()) > 0:
        return None
    c = torch.cumsum(w, 0)
    hit = ((c > u * c[-1]) & (w > 0)).nonzero()
    return int(hit[0, 0]) if hit.numel() else int((w > 0).nonzero()[-1, 0])


def accept_ref(
    target_logits, indptr, draft_tokens, draft_probs, temperature, uniforms, resample_uniforms, *, max_window=None
):
    """Loop reference of :func:`dspark_sim.kernels.accept` (same contract)."""
    R, N, V = check_accept_args(target_logits, indptr, draft_tokens, draft_probs, temperature, uniforms, resample_uniforms)
    W = resolve_max_window(indptr, max_window)
    logits = target_logits.double().cpu()
    q_all = None if draft_probs is None else draft_probs.double().cpu()
    ptr, drafts = indptr.tolist(), draft_tokens.tolist()
    out = torch.full((R, W), -1, dtype=torch.int32)
    accepted = torch.zeros(R, dtype=torch.int32)
    for r in range(R):
        start, length = ptr[r], ptr[r + 1] - ptr[r]
        if length <= 0:
            continue
        greedy = q_all is None or float(temperature[r]) <= 0
        t = 1.0 if greedy else float(temperature[r])
        n = 0
        for j in range(length - 1):
            row, x = start + j, drafts[start + j]
            if greedy:
                ok = _first_argmax(logits[row]) == x
            else:
                p = torch.softmax(logits[row] / t, 0)
                ok = 0 <= x < V and float(uniforms[row]) * float(q_all[row, x]) < float(p[x])
            if not ok:
                break
            n += 1
        row = start + n
        tok = _first_argmax(logits[row])
        if not greedy:
            p = torch.softmax(logits[row] / t, 0)
            w = (p - q_all[row]).clamp_min(0) if n < length - 1 else p
            sampled = inverse_cdf_ref(w, float(resample_uniforms[r]))
            tok = tok if sampled is None else sampled
        tokens = drafts[start : start + n] + [tok]
        for j, v in enumerate(tokens[:W]):
            out[r, j] = v
        accepted[r] = n
    dev = target_logits.device
    return accepted.to(dev), out.to(dev)
