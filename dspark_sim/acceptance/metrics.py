"""Calibration metrics and Sequential Temperature Scaling, as DeepSpec and SGLang compute them.

Per position k the prediction is the cumulative survival prod_{i<=k} c_i and the
label is "the first k drafts were accepted"; ECE uses 15 equal-width bins. STS
(paper section 4) fits one temperature per position, left to right, each
minimising the ECE of the cumulative product with the earlier positions
already calibrated; a temperature T maps a raw confidence logit z to
sigmoid(z / T) (SGLang ``apply_sts``).
"""
from __future__ import annotations

import numpy as np
from scipy.special import expit

NUM_BINS = 15
TEMPERATURE_RANGE = (0.1, 10.0)


def ece(pred: np.ndarray, label: np.ndarray, weights: np.ndarray | None = None,
        num_bins: int = NUM_BINS) -> float:
    """Binned expected calibration error of probabilities ``pred`` [n] against 0/1 ``label`` [n]."""
    pred = np.asarray(pred, dtype=np.float64)
    w = np.ones_like(pred) if weights is None else weights
    idx = np.minimum((pred * num_bins).astype(np.intp), num_bins - 1)
    mass = np.bincount(idx, w, num_bins)
    gap = np.bincount(idx, w * pred, num_bins) - np.bincount(idx, w * label, num_bins)
    return float(np.abs(gap).sum() / mass.sum())


def auc(score: np.ndarray, label: np.ndarray, weights: np.ndarray | None = None) -> float:
    """ROC-AUC of ``score`` [n] for the 0/1 ``label`` [n]; ties count half; NaN if one class is empty."""
    score = np.asarray(score, dtype=np.float64)
    label = np.asarray(label, dtype=bool)
    w = np.ones_like(score) if weights is None else np.asarray(weights, dtype=np.float64)
    order = np.argsort(score, kind="stable")
    s, y, w = score[order], label[order], w[order]
    starts = np.flatnonzero(np.r_[True, s[1:] != s[:-1]])
    pos = np.add.reduceat(np.where(y, w, 0.0), starts)
    neg = np.add.reduceat(np.where(y, 0.0, w), starts)
    total_pos, total_neg = pos.sum(), neg.sum()
    if total_pos <= 0 or total_neg <= 0:
        return float("nan")
    neg_below = np.cumsum(neg) - neg
    return float((pos * (neg_below + 0.5 * neg)).sum() / (total_pos * total_neg))


def prefix_labels(accepted: np.ndarray, positions: int) -> np.ndarray:
    """``labels[n, k]`` = draft k+1 was accepted, from accepted drafts per row [n]; bool [n, positions]."""
    return np.asarray(accepted)[:, None] > np.arange(positions)


def ece_by_position(conf: np.ndarray, accepted: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
    """ECE of the cumulative survival at each position; conf [n, k] -> float64 [k]."""
    labels = prefix_labels(accepted, conf.shape[1])
    survival = np.cumprod(conf, axis=1)
    return np.array([ece(survival[:, k], labels[:, k], weights) for k in range(conf.shape[1])])


def auc_by_position(conf: np.ndarray, accepted: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
    """ROC-AUC of the cumulative survival at each position; conf [n, k] -> float64 [k]."""
    labels = prefix_labels(accepted, conf.shape[1])
    survival = np.cumprod(conf, axis=1)
    return np.array([auc(survival[:, k], labels[:, k], weights) for k in range(conf.shape[1])])


def fit_sts(logits: np.ndarray, accepted: np.ndarray, weights: np.ndarray | None = None,
            num_bins: int = NUM_BINS) -> np.ndarray:
    """STS temperatures, one per position, for raw confidence logits [n, k] and accepted drafts [n].

    A log-spaced grid over TEMPERATURE_RANGE, refined once around its best
    point; ties go to the temperature closest to 1 (the identity).
    """
    labels = prefix_labels(accepted, logits.shape[1])
    survival = np.ones(logits.shape[0])
    temps = np.empty(logits.shape[1])
    for k in range(logits.shape[1]):
        def cost(t: float) -> tuple[float, float]:
            return ece(survival * expit(logits[:, k] / t), labels[:, k], weights, num_bins), abs(np.log(t))
        temps[k] = _grid_min(cost)
        survival = survival * expit(logits[:, k] / temps[k])
    return temps


def _grid_min(cost) -> float:
    """The argmin of ``cost`` over log-spaced temperatures, coarse then fine."""
    lo, hi = np.log(TEMPERATURE_RANGE)
    grid = np.exp(np.linspace(lo, hi, 47))
    best = min(grid, key=cost)
    step = (hi - lo) / 46
    fine = np.exp(np.linspace(np.log(best) - step, np.log(best) + step, 41))
    return float(min(np.r_[fine, best], key=cost))


def reliability(pred: np.ndarray, label: np.ndarray, num_bins: int = NUM_BINS) -> tuple[np.ndarray, ...]:
    """(mean prediction, observed rate, count) per non-empty bin, for a reliability diagram."""
    idx = np.minimum((np.asarray(pred) * num_bins).astype(np.intp), num_bins - 1)
    count = np.bincount(idx, minlength=num_bins).astype(np.float64)
    keep = count > 0
    mean_pred = np.bincount(idx, pred, num_bins)[keep] / count[keep]
    rate = np.bincount(idx, label.astype(np.float64), num_bins)[keep] / count[keep]
    return mean_pred, rate, count[keep]
