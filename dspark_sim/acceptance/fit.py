"""Fitting a preset by simulation with common random numbers (CRN).

One fixed set of noise and uniform draws (``Crn``) stands for many
requests running several steps each; every candidate parameter is scored on the
same draws, so each score is a smooth, monotone function that a 1-D root-finder
can solve. Averages are step-weighted: a request's steps count in proportion to
1 / (its mean accepted length), because a request that accepts fewer tokens per
round needs more rounds for the same output, and an engine's logs and the
paper's Table 1 average over rounds.

The fit, per preset:
1. target curve: the unconditional acceptance a_k (draft k accepted) by
   position, either given (engine report, user table) or the Fig. 2 shape with
   one level shift found so that 1 + sum_k a_k equals the Table 1 cell;
2. mu_k, left to right: the simulated a_k (step-weighted, over the difficulty
   and step noise, never from mean p) equals the target;
3. confidence head, left to right: noise for the ROC-AUC, slope for the raw
   ECE, bias so that one temperature can calibrate it, then STS temperatures.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
from scipy.optimize import brentq
from scipy.special import expit

from dspark_sim.acceptance import metrics
from dspark_sim.acceptance.noise import standard_noise
from dspark_sim.acceptance.paper import AUC_BY_POSITION, RAW_ECE_TARGET
from dspark_sim.acceptance.preset import AcceptancePreset


@dataclass(frozen=True, slots=True)
class Spread:
    """Logit-space noise of the true acceptance: per request, per step (whole block), per position."""

    difficulty_sigma: float
    step_sigma: float
    position_sigma: float

    @property
    def total_var(self) -> float:
        return self.difficulty_sigma ** 2 + self.step_sigma ** 2 + self.position_sigma ** 2


# Noise by domain. The per-position spread is wide (tokens are mostly near-certain
# or near-hopeless, as in real traffic) so that a head can reach the paper's
# ROC-AUC at position 7 even in math, where acceptance is high; the block-wide
# part is what makes later positions' AUC rise, but too much of it makes the
# cumulative survival uncalibratable by one temperature per position, so it is
# largest in math (needed there) and smallest in chat. See docs/acceptance.md.
DOMAIN_SPREADS = {"math": Spread(0.5, 2.5, 6.0), "code": Spread(0.5, 2.0, 5.0), "chat": Spread(0.5, 1.5, 5.0)}


@dataclass(frozen=True, slots=True)
class Crn:
    """Standard draws for ``num_requests * steps`` request-steps (rows, request-major) and ``positions``.

    difficulty, block: [rows]; position, head, uniform: [rows, positions].
    """

    num_requests: int
    steps: int
    difficulty: np.ndarray
    block: np.ndarray
    position: np.ndarray
    head: np.ndarray
    uniform: np.ndarray


@dataclass(frozen=True, slots=True)
class HeadFit:
    """A fitted confidence head and what it achieves on the fitting sample, per position."""

    slope: np.ndarray
    bias: np.ndarray
    noise: np.ndarray
    temperatures: np.ndarray
    auc: np.ndarray
    ece_raw: np.ndarray
    ece_sts: np.ndarray


def draw_crn(seed: int, num_requests: int = 2048, steps: int = 16, positions: int = 7) -> Crn:
    """The common random numbers every fit in one run shares."""
    rng = np.random.default_rng(seed)
    rows = num_requests * steps
    difficulty = np.repeat(rng.standard_normal(num_requests), steps)
    return Crn(num_requests, steps, difficulty, standard_noise(rng, (rows,)),
               standard_noise(rng, (rows, positions)), standard_noise(rng, (rows, positions)),
               rng.random((rows, positions)))


def true_logits(mu: np.ndarray, spread: Spread, crn: Crn) -> np.ndarray:
    """logit p for every row and position, float64 [rows, len(mu)]."""
    base = spread.difficulty_sigma * crn.difficulty + spread.step_sigma * crn.block
    k = len(mu)
    return mu + base[:, None] + spread.position_sigma * crn.position[:, :k]


def step_weights(mu: np.ndarray, spread: Spread, crn: Crn) -> np.ndarray:
    """Row weights (mean 1) proportional to 1 / E[accepted length | the row's request difficulty].

    The expectation is over the step noise, tabulated on a grid of difficulty
    from a slice of the draws: weighting by a request's own sample mean instead
    would correlate each row's weight with its value and bias the fit.
    """
    rows = slice(0, min(len(crn.block), 8192))
    shared = spread.step_sigma * crn.block[rows]
    spread_pos = spread.position_sigma * crn.position[rows, : len(mu)]
    grid = np.linspace(-5.0, 5.0, 41)
    tau = [np.mean(1.0 + np.cumprod(expit(mu + (spread.difficulty_sigma * g + shared)[:, None] + spread_pos),
                                    axis=1).sum(axis=1)) for g in grid]
    w = 1.0 / np.interp(crn.difficulty, grid, tau)
    return w / w.mean()


def accept_len(mu: np.ndarray, spread: Spread, crn: Crn) -> float:
    """Step-weighted mean accepted length (bonus included) with the whole block verified."""
    p = expit(true_logits(mu, spread, crn))
    return float(np.average(1.0 + np.cumprod(p, axis=1).sum(axis=1), weights=step_weights(mu, spread, crn)))


def accept_curve(mu: np.ndarray, spread: Spread, crn: Crn) -> np.ndarray:
    """Step-weighted unconditional acceptance a_k by position, float64 [len(mu)]."""
    p = expit(true_logits(mu, spread, crn))
    return np.average(np.cumprod(p, axis=1), axis=0, weights=step_weights(mu, spread, crn))


def curve_for_accept_len(shape_logits: np.ndarray, target_len: float) -> np.ndarray:
    """The unconditional curve a_k = prod_{i<=k} sigmoid(shape_i + s) with 1 + sum a_k = target_len.

    This is exact, not an approximation: the mean accepted length is
    1 + sum_k a_k for any distribution of per-step probabilities, and a_k is
    the product of the empirical conditional acceptances Fig. 2 shows.
    """
    k = len(shape_logits)
    if not 1.0 < target_len < 1.0 + k:
        raise ValueError(f"accepted length {target_len} outside (1, {1 + k})")

    def curve(s: float) -> np.ndarray:
        return np.cumprod(expit(shape_logits + s))

    s = brentq(lambda s: 1.0 + curve(s).sum() - target_len, -30.0, 30.0, xtol=1e-12)
    return curve(s)


def fit_mu(curve: np.ndarray, spread: Spread, crn: Crn, passes: int = 3) -> np.ndarray:
    """mu_k such that the simulated step-weighted a_k equals ``curve`` [k], left to right.

    The step weights depend on every mu, so the sweep repeats ``passes`` times
    with the weights of the previous sweep (they move by well under 1 %).
    """
    curve = np.asarray(curve, dtype=np.float64)
    if np.any(np.diff(curve) > 0) or curve[0] >= 1 or curve[-1] <= 0:
        raise ValueError("acceptance curve must be non-increasing and inside (0, 1)")
    base = spread.difficulty_sigma * crn.difficulty + spread.step_sigma * crn.block
    mu = np.zeros(len(curve))
    w = np.ones(len(base))
    for _ in range(passes):
        survival = np.ones(len(base))
        for k, target in enumerate(curve):
            shifted = base + spread.position_sigma * crn.position[:, k]

            def gap(m: float) -> float:
                return np.average(survival * expit(m + shifted), weights=w) - target

            mu[k] = brentq(gap, -40.0, 40.0, xtol=1e-10)
            survival = survival * expit(mu[k] + shifted)
        w = step_weights(mu, spread, crn)
    return mu


def sampled_accepted(x: np.ndarray, crn: Crn) -> np.ndarray:
    """Accepted drafts per row (first rejection stops) from the CRN uniforms; int64 [rows]."""
    ok = crn.uniform[:, : x.shape[1]] < expit(x)
    return np.logical_and.accumulate(ok, axis=1).sum(axis=1)


def fit_head(mu: np.ndarray, spread: Spread, crn: Crn, auc_targets, ece_target,
             max_noise: float | None = None) -> HeadFit:
    """Confidence head and its STS temperatures, fitted left to right.

    The head observes o_k = logit p_k + s_k n_k, forms the posterior-mean logit
    u_k = m_k + rho_k (o_k - m_k), rho_k = v_k / (v_k + s_k^2) (m_k, v_k: mean and
    variance of logit p_k), and reports the over-confident z_k = kappa_k u_k. So
    s_k alone sets the discrimination (ROC-AUC of the cumulative survival) and
    kappa_k the raw ECE, and one temperature near kappa_k undoes the
    over-confidence, as STS does in the paper. In the preset's terms
    z = a x + b + s' n with a = kappa rho, b = kappa (1 - rho) m, s' = kappa rho s.
    """
    max_noise = max_noise or 3.0 * np.sqrt(spread.total_var)
    ece_targets = np.broadcast_to(np.asarray(ece_target, dtype=np.float64), (len(mu),))
    x = true_logits(mu, spread, crn)
    w = step_weights(mu, spread, crn)
    labels = metrics.prefix_labels(sampled_accepted(x, crn), len(mu))
    k_all = len(mu)
    noise, kappa = np.zeros(k_all), np.ones(k_all)
    slope, bias, head_noise = np.ones(k_all), np.zeros(k_all), np.zeros(k_all)
    survival = np.ones(len(w))
    for k in range(k_all):
        mean = np.average(x[:, k], weights=w)
        var = np.average((x[:, k] - mean) ** 2, weights=w)

        def cumulative(s: float, kap: float) -> np.ndarray:
            rho = var / (var + s * s)
            return survival * expit(kap * (mean + rho * (x[:, k] + s * crn.head[:, k] - mean)))

        for _ in range(2):
            noise[k] = _solve_noise(lambda s: metrics.auc(cumulative(s, kappa[k]), labels[:, k], w),
                                    auc_targets[k], max_noise, noise[k - 1] if k else 0.0)
            kappa[k] = _solve_kappa(lambda kap: metrics.ece(cumulative(noise[k], kap), labels[:, k], w),
                                    ece_targets[k])
        rho = var / (var + noise[k] ** 2)
        slope[k], bias[k], head_noise[k] = kappa[k] * rho, kappa[k] * (1 - rho) * mean, kappa[k] * rho * noise[k]
        survival = cumulative(noise[k], kappa[k])
    logits = slope * x + bias + head_noise * crn.head[:, :k_all]
    accepted = labels.sum(axis=1)
    temps = metrics.fit_sts(logits, accepted, w)
    raw = expit(logits)
    return HeadFit(slope, bias, head_noise, temps, metrics.auc_by_position(raw, accepted, w),
                   metrics.ece_by_position(raw, accepted, w),
                   metrics.ece_by_position(expit(logits / temps), accepted, w))


def _solve_noise(auc_of, target: float, max_noise: float, unseen: float) -> float:
    """Observation noise s in [0, max_noise] with auc_of(s) = target, clipped at the ends; ``unseen``
    where the fitting draws hold one outcome only at this position (nearly every draft accepted,
    or nearly none reaching it), so that no noise moves the ROC-AUC."""
    at_zero = auc_of(0.0)
    if np.isnan(at_zero):
        return unseen
    if at_zero <= target:
        return 0.0
    if auc_of(max_noise) >= target:
        return max_noise
    return brentq(lambda s: auc_of(s) - target, 0.0, max_noise, xtol=1e-3)


def _solve_kappa(ece_of, target: float) -> float:
    """Over-confidence kappa on the rising branch of ece_of with ece_of(kappa) = target, at most 4.

    Past 4 a head is implausibly extreme; where even 4 leaves the ECE under
    target (late positions of low-acceptance chat, whose survival is near 0 for
    most rows, so its ECE is small whatever the head says) the cap stands.
    """
    grid = np.exp(np.linspace(np.log(0.5), np.log(4.0), 19))
    values = [ece_of(a) for a in grid]
    i = int(np.argmin(values))
    if values[i] >= target:
        return float(grid[i])
    j = next((j for j in range(i + 1, len(grid)) if values[j] > target), None)
    if j is None:
        return float(grid[-1])
    return brentq(lambda a: ece_of(a) - target, grid[j - 1], grid[j], xtol=1e-4)


def spread_of(preset: AcceptancePreset) -> Spread:
    """The noise triple of an AcceptancePreset."""
    return Spread(preset.difficulty_sigma, preset.step_sigma, preset.position_sigma)


def refit_head(preset: AcceptancePreset, auc_targets, *, seed: int, num_requests: int = 512,
               steps: int = 16) -> AcceptancePreset:
    """The preset cut to len(auc_targets) positions, its head refitted for those ROC-AUCs."""
    k = len(auc_targets)
    mu = np.asarray(preset.mu[:k])
    head = fit_head(mu, spread_of(preset), draw_crn(seed, num_requests, steps, k), auc_targets, RAW_ECE_TARGET)
    return replace(preset, mu=tuple(mu.tolist()), conf_slope=tuple(head.slope.tolist()),
                   conf_bias=tuple(head.bias.tolist()), conf_noise=tuple(head.noise.tolist()),
                   sts_temperatures=tuple(head.temperatures.tolist()))


def build_preset(drafter: str, target: str, domain: str, curve, crn: Crn, *, dataset: str | None = None,
                 spread: Spread | None = None, auc_targets=AUC_BY_POSITION,
                 ece_target=RAW_ECE_TARGET) -> tuple[AcceptancePreset, dict]:
    """Fit a whole preset to an unconditional acceptance curve [k]; returns (preset, fit report)."""
    spread = spread or DOMAIN_SPREADS[domain]
    k = len(curve)
    auc_targets = (tuple(auc_targets) + (auc_targets[-1],) * k)[:k]
    mu = fit_mu(curve, spread, crn)
    head = fit_head(mu, spread, crn, auc_targets, np.broadcast_to(ece_target, (k,)))
    preset = AcceptancePreset(drafter, target, domain, tuple(mu.tolist()), spread.difficulty_sigma,
                              spread.step_sigma, tuple(head.slope.tolist()), tuple(head.bias.tolist()),
                              tuple(head.noise.tolist()), tuple(head.temperatures.tolist()),
                              spread.position_sigma, dataset)
    report = {"target_accept": [round(float(a), 6) for a in curve],
              "sim_accept_len": round(accept_len(mu, spread, crn), 6),
              "auc": _rounded(head.auc), "ece_raw": _rounded(head.ece_raw), "ece_sts": _rounded(head.ece_sts)}
    return preset, report


def conditional_shape(preset: AcceptancePreset, crn: Crn, positions: int = 7) -> np.ndarray:
    """Logits of a preset's simulated conditional acceptance by position: the shape a level shift keeps."""
    curve = accept_curve(np.asarray(preset.mu[:positions]), spread_of(preset), crn)
    cond = curve / np.r_[1.0, curve[:-1]]
    return np.log(cond) - np.log1p(-cond)


def _rounded(values) -> list[float | None]:
    """Five decimals; None where a figure is undefined (a ROC-AUC over one outcome only)."""
    return [None if np.isnan(v) else round(float(v), 5) for v in values]
