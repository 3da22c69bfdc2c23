"""The device functions both schedule_verify paths share (:mod:`.schedule_verify`, one
program; :mod:`.schedule_verify_multi`, many): SPS table look-ups and calibrated prefix
survivals, inlined by Triton into the kernels that call them."""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def count_le(probes_ptr, n, x, LOG_P: tl.constexpr):
    """bisect_right: how many of the n sorted probes are <= x (elementwise, x int32)."""
    pos = x * 0
    for i in tl.static_range(LOG_P):
        cand = pos + (1 << (LOG_P - 1 - i))
        probe = tl.load(probes_ptr + cand - 1, mask=cand <= n, other=0)
        pos = tl.where((cand <= n) & (probe <= x), cand, pos)
    return pos


@triton.jit
def interp_clamped(xs_ptr, ys_ptr, n, x, LOG_P: tl.constexpr):
    """Linear interpolation of (xs, ys) at integer x, clamped to the end values."""
    hi = count_le(xs_ptr, n, x, LOG_P)
    lo = tl.minimum(tl.maximum(hi - 1, 0), n - 1)
    hi = tl.minimum(hi, n - 1)
    x0 = tl.load(xs_ptr + lo).to(tl.float32)
    x1 = tl.load(xs_ptr + hi).to(tl.float32)
    y0 = tl.load(ys_ptr + lo)
    y1 = tl.load(ys_ptr + hi)
    frac = tl.where(x1 > x0, (x.to(tl.float32) - x0) / tl.where(x1 > x0, x1 - x0, 1.0), 0.0)
    return y0 + frac * (y1 - y0)


@triton.jit
def steps_per_sec(b, R, probes_ptr, sps_ptr, n_p, bias_s, bs_ptr, alpha_ptr, n_bs, m_ptr, theta_ptr, n_m,
                  ADDITIVE: tl.constexpr, LOG_P: tl.constexpr):
    """SPS at b batch tokens (elementwise) for R requests."""
    if ADDITIVE:
        step_s = (bias_s + interp_clamped(bs_ptr, alpha_ptr, n_bs, R, LOG_P)
                  + interp_clamped(m_ptr, theta_ptr, n_m, b, LOG_P))
        sps = 1.0 / step_s
    else:
        idx = tl.maximum(count_le(probes_ptr, n_p, b, LOG_P) - 1, 0)
        sps = tl.load(sps_ptr + idx)
    return sps


@triton.jit
def survival(conf_ptr, stride_r, stride_g, temp_ptr, R, gamma, BLOCK_R: tl.constexpr, BLOCK_G: tl.constexpr):
    """Calibrated prefix survival, position-major: a[j, r], fp32 [BLOCK_G, BLOCK_R], 0 outside."""
    rr = tl.arange(0, BLOCK_R)
    jj = tl.arange(0, BLOCK_G)[:, None]
    run = tl.full([BLOCK_R], 1.0, tl.float32)
    a = tl.zeros([BLOCK_G, BLOCK_R], tl.float32)
    # A sequential product (not a scan) keeps a[j + 1] <= a[j] exact in fp32.
    for j in tl.static_range(BLOCK_G):
        c = tl.load(conf_ptr + rr * stride_r + j * stride_g, mask=rr < tl.where(j < gamma, R, 0), other=0.0)
        inv_t = 1.0 / tl.load(temp_ptr + j, mask=j < gamma, other=1.0)
        # sigmoid(logit(c) / T) = 1 / (1 + ((1 - c) / c) ** (1 / T)); exact at c = 0 and c = 1.
        run = run * (1.0 / (1.0 + tl.exp2((tl.log2(1.0 - c) - tl.log2(c)) * inv_t)))
        a = tl.where(jj == j, run[None, :], a)
    return a
