"""schedule_verify: DSpark's verify-length scheduler without host synchronisation (DSPARK.md section 3).

Small batches (padded R x gamma up to :data:`SINGLE_MAX`) run in one program, one launch:
STS temperature scaling, prefix survival products, one bitonic sort of every
admissible (request, position) survival across the batch, prefix sums, SPS table
look-ups by binary search, the budget (argmax of Theta, or Algorithm 1's early stop),
the per-request counts among the top-K, and the clamps. Larger batches, any R, run the
same rule over many programs in three launches (:mod:`.schedule_verify_multi`).

Semantics (the loop reference :func:`~dspark_sim.kernels.reference.schedule_verify_ref`
is the definition):

* c = sigmoid(logit(c_raw) / T_j) per position (SGLang's ``apply_sts`` on the logit),
  a[r, j] = prod_{i <= j} c[r, i].
* Candidates are (r, j) with a[r, j] >= survival_eps and j + 2 <= max_verify_len,
  ranked by a descending, then lower j, then lower r (so prefix order holds).
* Theta(k) = (R + sum of the k best candidates) * SPS(R + k); k + R above the table's
  max_batch_tokens is inadmissible.
* production: K = the first argmax of Theta over k >= 0, from ``lag_conf``'s ranking
  when given (its R_lag may differ from R; R itself stays the current batch's).
  algorithm1: admit candidates in rank order, stop at the first that does not raise Theta.
* Each request gets verify_len = clamp(1 + its count among the K best *current*
  candidates, min_verify_len, max_verify_len). min_verify_len can force tokens in
  below survival_eps or past max_batch_tokens: it is a hard floor.
* ``budget_k`` given (an int: the caller sized the budget, as SGLang's host planner does
  from lagged confidences): K = that number, no Theta search.
* budget_k = sum(verify_len) - R; theta = Theta of the returned lengths, from the
  current survivals: (R + sum_r sum_{j < verify_len_r - 1} a[r, j]) * SPS(sum(verify_len)).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from . import autotune
from .checks import check_schedule_args
from .schedule_parts import steps_per_sec, survival
from .schedule_paths import SINGLE_MAX, block_shape, path_for
from .schedule_verify_multi import run_multi
from .sps_tensors import SpsTensors

__all__ = ["schedule_verify"]

_NO_LIMIT = 2**30


@triton.jit
def _ranked(a, R, gamma, max_len, eps, BLOCK_R: tl.constexpr, BLOCK_G: tl.constexpr):
    """(flat candidates in (j, r) order with -1 for inadmissible, the same sorted descending)."""
    jj = tl.arange(0, BLOCK_G)[:, None]
    rr = tl.arange(0, BLOCK_R)[None, :]
    ok = (jj < gamma) & (jj + 2 <= max_len) & (rr < R) & (a >= eps)
    flat = tl.reshape(tl.where(ok, a, -1.0), [BLOCK_G * BLOCK_R])
    return flat, tl.sort(flat, descending=True)


@triton.jit
def _budget(ranked, R, max_bt, probes_ptr, sps_ptr, n_p, bias_s, bs_ptr, alpha_ptr, n_bs, m_ptr, theta_ptr, n_m,
            SIZE: tl.constexpr, ALGORITHM1: tl.constexpr, ADDITIVE: tl.constexpr, LOG_P: tl.constexpr):
    """K, the number of extra verify tokens, from survivals sorted descending (-1 = none)."""
    kk = tl.arange(0, SIZE)
    gain_a = tl.where(ranked >= 0, ranked, 0.0)
    tau = R + tl.cumsum(gain_a, 0)  # tau after admitting kk + 1 candidates
    b = R + kk + 1
    ok = (ranked >= 0) & (b <= max_bt)
    sps = steps_per_sec(b, R, probes_ptr, sps_ptr, n_p, bias_s, bs_ptr, alpha_ptr, n_bs, m_ptr, theta_ptr, n_m,
                        ADDITIVE, LOG_P)
    if ALGORITHM1:
        sps_prev = steps_per_sec(b - 1, R, probes_ptr, sps_ptr, n_p, bias_s, bs_ptr, alpha_ptr, n_bs, m_ptr, theta_ptr, n_m,
                                 ADDITIVE, LOG_P)
        # Theta(k) - Theta(k-1), written so that a flat SPS step leaves only a_k * SPS (no cancellation).
        gain = tau * (sps - sps_prev) + gain_a * sps_prev
        k = tl.min(tl.where((gain <= 0) | (ok == 0), kk, SIZE), 0)
    else:
        theta0 = R * steps_per_sec(R, R, probes_ptr, sps_ptr, n_p, bias_s, bs_ptr, alpha_ptr, n_bs, m_ptr, theta_ptr, n_m,
                                   ADDITIVE, LOG_P)
        theta = tl.where(ok, tau * sps, -1.0)
        best = tl.max(theta, 0)
        first = tl.min(tl.where(theta == best, kk + 1, SIZE + 1), 0)
        k = tl.where(best > theta0, first, 0)
    return k


@triton.jit
def _top_k_counts(flat, ranked, k, BLOCK_R: tl.constexpr, BLOCK_G: tl.constexpr):
    """Per-request counts among the k best candidates, ties by (j, r) order: int32 [BLOCK_R]."""
    kk = tl.arange(0, BLOCK_G * BLOCK_R)
    k = tl.minimum(k, tl.sum((ranked >= 0).to(tl.int32), 0))
    thr = tl.sum(tl.where(kk == k - 1, ranked, 0.0), 0)
    above = (flat > thr) & (flat >= 0)
    tie = (flat == thr) & (flat >= 0)
    tie_rank = tl.cumsum(tie.to(tl.int32), 0) - 1  # flat is (j, r) ordered: lower j, then lower r first
    need = k - tl.sum(above.to(tl.int32), 0)
    chosen = (above | (tie & (tie_rank < need))) & (k > 0)
    return tl.sum(tl.reshape(chosen.to(tl.int32), [BLOCK_G, BLOCK_R]), 0)


# Shape-dependent integers are not specialised on (== 1, % 16): one binary per block shape.
@triton.jit(do_not_specialize=["stride_cr", "stride_lr", "R", "R_lag", "gamma", "min_len", "max_len", "max_bt",
                               "n_p", "n_bs", "n_m", "budget"])
def _schedule_verify_kernel(
    conf_ptr, stride_cr, stride_cg, lag_ptr, stride_lr, stride_lg, temp_ptr,
    probes_ptr, sps_ptr, n_p, bias_s, bs_ptr, alpha_ptr, n_bs, m_ptr, theta_ptr, n_m,
    len_ptr, k_ptr, theta_out_ptr,
    R, R_lag, gamma, min_len, max_len, max_bt, eps, budget,
    BLOCK_R: tl.constexpr, BLOCK_G: tl.constexpr,
    ALGORITHM1: tl.constexpr, HAS_LAG: tl.constexpr, HAS_BUDGET: tl.constexpr, ADDITIVE: tl.constexpr,
    LOG_P: tl.constexpr,
):
    a = survival(conf_ptr, stride_cr, stride_cg, temp_ptr, R, gamma, BLOCK_R, BLOCK_G)
    flat, ranked = _ranked(a, R, gamma, max_len, eps, BLOCK_R, BLOCK_G)
    if HAS_BUDGET:
        k = budget
    elif HAS_LAG:
        a_lag = survival(lag_ptr, stride_lr, stride_lg, temp_ptr, R_lag, gamma, BLOCK_R, BLOCK_G)
        _, sizing = _ranked(a_lag, R_lag, gamma, max_len, eps, BLOCK_R, BLOCK_G)
        k = _budget(sizing, R, max_bt, probes_ptr, sps_ptr, n_p, bias_s, bs_ptr, alpha_ptr, n_bs, m_ptr, theta_ptr, n_m,
                    BLOCK_G * BLOCK_R, ALGORITHM1, ADDITIVE, LOG_P)
    else:
        k = _budget(ranked, R, max_bt, probes_ptr, sps_ptr, n_p, bias_s, bs_ptr, alpha_ptr, n_bs, m_ptr, theta_ptr, n_m,
                    BLOCK_G * BLOCK_R, ALGORITHM1, ADDITIVE, LOG_P)
    counts = _top_k_counts(flat, ranked, k, BLOCK_R, BLOCK_G)

    rr = tl.arange(0, BLOCK_R)
    lens = tl.minimum(tl.maximum(1 + counts, min_len), max_len)
    lens = tl.where(rr < R, lens, 0)
    tl.store(len_ptr + rr, lens, mask=rr < R)
    b = tl.sum(lens, 0)
    tl.store(k_ptr, b - R)
    jj = tl.arange(0, BLOCK_G)[:, None]
    tau = R + tl.sum(tl.sum(tl.where(jj < lens[None, :] - 1, a, 0.0), 1), 0)
    sps = steps_per_sec(b, R, probes_ptr, sps_ptr, n_p, bias_s, bs_ptr, alpha_ptr, n_bs, m_ptr, theta_ptr, n_m,
                        ADDITIVE, LOG_P)
    tl.store(theta_out_ptr, tau * sps)


def table_args(sps, device):
    """Kernel arguments for either table form; the unused form gets dummies."""
    if isinstance(sps, SpsTensors):
        t = sps.to(device) if sps.probes.device != device else sps
        n = t.probes.numel()
        dummies = (1.0, t.probes, t.steps_per_sec, 1, t.probes, t.steps_per_sec, 1)
        return (t.probes, t.steps_per_sec, n) + dummies, False, n, t.max_batch_tokens
    t = sps.to(device) if sps.bs_probes.device != device else sps
    n_bs, n_m = t.bs_probes.numel(), t.m_probes.numel()
    max_bt = _NO_LIMIT if t.max_batch_tokens is None else t.max_batch_tokens
    args = (t.m_probes, t.theta_s, 1, float(t.bias_s), t.bs_probes, t.alpha_s, n_bs, t.m_probes, t.theta_s, n_m)
    return args, True, max(n_bs, n_m), max_bt


def schedule_verify(
    conf, temperatures, sps, *, min_verify_len=1, max_verify_len=None, survival_eps=1e-6, mode="production", lag_conf=None,
    budget_k=None,
):
    """Choose per-request verify lengths for one DSpark step, with no host synchronisation
    (one launch up to :data:`SINGLE_MAX` padded survivals, three above, any R).

    Args:
        conf: fp32 [R, gamma], raw draft confidences of the current step, in [0, 1].
        temperatures: fp32 [gamma], STS temperatures (> 0), one per position.
        sps: :class:`SpsTensors` or :class:`AdditiveSpsTensors` (moved to conf's device if needed).
        min_verify_len, max_verify_len: bounds on verify_len, counting the anchor (default 1, gamma + 1).
        survival_eps: candidates with survival below it are never admitted.
        mode: ``"production"`` (budget = argmax of Theta) or ``"algorithm1"`` (early stop).
        lag_conf: fp32 [R_lag, gamma], the confidences that size the budget (production only).
        budget_k: int, a budget sized by the caller (production only, no ``lag_conf``): the
            kernel takes the top ``budget_k`` current candidates and searches nothing.

    Returns:
        verify_len int32 [R] (1..gamma+1, anchor included), budget_k int32 [1] (sum - R),
        theta fp32 [1] (predicted accepted tokens per second of the returned schedule).
    """
    return run_schedule(conf, temperatures, sps, None, min_verify_len, max_verify_len, survival_eps, mode, lag_conf,
                        budget_k)


def log_probes(n_probes: int) -> int:
    """Binary-search depth over a table of ``n_probes`` probes, rounded up to a multiple of 4
    so that few kernel variants compile."""
    return max(4, (n_probes.bit_length() + 3) & ~3)


def run_schedule(conf, temperatures, sps, cfg, min_verify_len=1, max_verify_len=None, survival_eps=1e-6,
                 mode="production", lag_conf=None, budget_k=None, path=None):
    """schedule_verify with an explicit launch config (None: the tuned profile's) and, for
    benchmarks and tests, an explicit ``path`` (``single``, ``pairwise``, ``merge``)."""
    min_len, max_len = check_schedule_args(conf, temperatures, sps, min_verify_len, max_verify_len, survival_eps, mode,
                                           lag_conf, budget_k)
    R, gamma = conf.shape
    lag = conf if lag_conf is None else lag_conf
    # one row block for both: each (block, lag block) pair would be another binary, and a
    # sort over thousands of elements compiles for seconds in the middle of a serving step
    block_r, block_g = block_shape(max(R, lag.shape[0]), gamma)
    path = path or path_for(max(R, lag.shape[0]), gamma)
    table, additive, n_probes, max_bt = table_args(sps, conf.device)
    lens = torch.empty(R, dtype=torch.int32, device=conf.device)
    k_out = torch.empty(1, dtype=torch.int32, device=conf.device)
    theta = torch.empty(1, dtype=torch.float32, device=conf.device)
    if path != "single":
        run_multi(conf, lag_conf, temperatures, table, additive, log_probes(n_probes), (lens, k_out, theta),
                  min_len, max_len, max_bt, float(survival_eps), mode, budget_k, merge=path == "merge")
        return lens, k_out, theta
    cfg = cfg or autotune.lookup("schedule_verify", {"R": block_r, "G": block_g}, conf.device)
    _schedule_verify_kernel[(1,)](
        conf, conf.stride(0), conf.stride(1), lag, lag.stride(0), lag.stride(1), temperatures,
        *table,
        lens, k_out, theta,
        R, lag.shape[0], gamma, min_len, max_len, max_bt, float(survival_eps), 0 if budget_k is None else int(budget_k),
        BLOCK_R=block_r, BLOCK_G=block_g,
        ALGORITHM1=mode == "algorithm1", HAS_LAG=lag_conf is not None, HAS_BUDGET=budget_k is not None,
        ADDITIVE=additive, LOG_P=log_probes(n_probes), num_warps=cfg["num_warps"],
    )
    return lens, k_out, theta
