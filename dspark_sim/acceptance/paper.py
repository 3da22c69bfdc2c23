"""Published numbers the acceptance presets are fitted to (shared/DSPARK.md section 6).

Everything here is data copied from the DSpark paper (arXiv 2607.05147) or an
engine report, plus the few assumptions needed where the sources are silent;
each assumption is marked ``ASSUMPTION`` and repeated in docs/acceptance.md.
"""
from __future__ import annotations

import numpy as np

FIT_POSITIONS = 7  # Table 1 and Fig. 2 use a block size of 7

# Table 1 columns, in order, and the domain each belongs to. "math500" is the
# paper's MATH column (renamed so that it cannot be mistaken for the domain).
DATASETS: dict[str, str] = {
    "gsm8k": "math", "math500": "math", "aime25": "math",
    "mbpp": "code", "humaneval": "code", "lcb": "code",
    "mt-bench": "chat", "alpaca": "chat", "arena-hard": "chat",
}

# Mean accepted length per round (bonus token included), temperature 1, block size 7,
# full block verified: paper Table 1, one tuple per (target, drafter) in DATASETS order.
TABLE1: dict[tuple[str, str], tuple[float, ...]] = {
    ("qwen3-4b", "eagle3"): (5.14, 4.62, 3.92, 3.69, 4.16, 3.77, 2.39, 2.26, 2.55),
    ("qwen3-4b", "dflash"): (5.40, 4.85, 4.15, 4.40, 4.74, 4.18, 3.07, 2.96, 2.83),
    ("qwen3-4b", "dspark"): (6.11, 5.70, 4.89, 5.13, 5.38, 4.86, 3.64, 3.54, 3.29),
    ("qwen3-8b", "eagle3"): (5.30, 4.77, 3.91, 3.96, 4.33, 4.17, 2.66, 2.54, 2.54),
    ("qwen3-8b", "dflash"): (5.33, 4.91, 4.07, 4.36, 4.64, 4.39, 3.11, 2.98, 2.81),
    ("qwen3-8b", "dspark"): (6.17, 5.78, 5.01, 5.16, 5.52, 5.17, 3.72, 3.58, 3.21),
    ("qwen3-14b", "eagle3"): (5.24, 4.60, 3.71, 3.81, 4.14, 4.01, 2.62, 2.47, 2.48),
    ("qwen3-14b", "dflash"): (5.41, 4.84, 3.98, 4.44, 4.59, 4.33, 3.10, 2.94, 2.72),
    ("qwen3-14b", "dspark"): (6.21, 5.74, 4.94, 5.26, 5.43, 5.02, 3.70, 3.58, 3.13),
}

# Conditional acceptance at positions 1 and 7 (Qwen3-4B, paper Fig. 2): the
# shape of every Qwen3 preset of that drafter and domain, interpolated linearly
# in logit space in between. ASSUMPTION where Fig. 2 gives no number: Eagle3
# code (0.70 -> 0.76) and math end (0.86), DFlash math end (0.80), DSpark code
# and chat (0.90 -> 0.89, 0.80 -> 0.78): "Eagle3 flat or rising, DFlash suffix
# decay, DSpark high and flat".
FIG2_SHAPES: dict[str, dict[str, tuple[float, float]]] = {
    "eagle3": {"math": (0.81, 0.86), "code": (0.70, 0.76), "chat": (0.53, 0.74)},
    "dflash": {"math": (0.88, 0.80), "code": (0.87, 0.78), "chat": (0.72, 0.63)},
    "dspark": {"math": (0.93, 0.93), "code": (0.90, 0.89), "chat": (0.80, 0.78)},
}

# Confidence-head ROC-AUC by position (Alpaca, paper section 4); positions 2, 4
# and 6 are linear interpolations. Measured as DeepSpec/SGLang do: the cumulative
# survival prod_{i<=k} c_i against the label "draft k was accepted".
AUC_BY_POSITION = (0.818, 0.815, 0.812, 0.838, 0.864, 0.8855, 0.907)

# Raw (uncalibrated) confidences are over-confident with ECE 3-8 %: every
# preset is fitted to the middle of that range at every position.
RAW_ECE_TARGET = 0.055

# DeepSeek-V4-Flash DSpark, engine report: unconditional acceptance by position.
V4_FLASH_ACCEPT = (0.739, 0.478, 0.261, 0.174, 0.130, 0.087, 0.043)

# DeepSeek-V4-Pro DSpark, the LMSYS DeepSeek-V4 DSpark blog (2026-07-06; SGLang, V4-Pro TP8 on
# B300, batch 1): accept length about 5; DSpark's verify windows of 5.24 / 3.78 / 2.91 tokens on
# gsm8k / arena-hard / poetry traffic (DSPARK.md section 6).
V4_PRO_ACCEPT_LEN = 5.0
V4_PRO_WINDOWS = {"gsm8k": 5.24, "arena-hard": 3.78, "poetry": 2.91}
# ASSUMPTIONS deriving V4 accept lengths by domain (no V4 figure is published by domain):
# - the blog's accept length is gsm8k's (the traffic its batch-1 run and first window name);
# - a domain's accept length is in proportion to its verify window (the scheduler sizes the
#   window to the acceptance it expects): arena-hard stands for chat;
# - code relates to math as in the paper's DSpark presets (Table 1, code / math domain means,
#   averaged over the three Qwen3 targets): V4_CODE_OVER_MATH;
# - the V4-Flash engine report's 2.91 is production traffic, taken as chat; Flash's math and code
#   follow from it by V4-Pro's window ratios.


def _domain_mean(target: str, domain: str) -> float:
    cells = [v for d, v in zip(DATASETS, TABLE1[(target, "dspark")]) if DATASETS[d] == domain]
    return float(np.mean(cells))


V4_CODE_OVER_MATH = float(np.mean([_domain_mean(t, "code") / _domain_mean(t, "math")
                                   for t in ("qwen3-4b", "qwen3-8b", "qwen3-14b")]))


def v4_accept_lens() -> dict[tuple[str, str], float]:
    """Accepted length per round (bonus included) of DeepSeek-V4's DSpark by (target, domain),
    derived from the published V4 figures by the ASSUMPTIONS above."""
    chat_over_math = V4_PRO_WINDOWS["arena-hard"] / V4_PRO_WINDOWS["gsm8k"]
    flash_chat = 1.0 + float(np.sum(V4_FLASH_ACCEPT))
    out = {}
    for target, math_len in (("deepseek-v4-flash", flash_chat / chat_over_math), ("deepseek-v4-pro", V4_PRO_ACCEPT_LEN)):
        out[(target, "math")] = math_len
        out[(target, "code")] = math_len * V4_CODE_OVER_MATH
        out[(target, "chat")] = math_len * chat_over_math
    return out


def v4_shape() -> np.ndarray:
    """Logits of the V4-Flash engine report's conditional acceptance by position: the shape of
    every V4 DSpark preset."""
    a = np.asarray(V4_FLASH_ACCEPT, dtype=np.float64)
    cond = np.concatenate([[a[0]], a[1:] / a[:-1]])
    return np.log(cond / (1.0 - cond))


# DeepSeek-V3 MTP: second-token acceptance 85-90 % (we take 0.875). ASSUMPTION:
# a chained MTP module reused k times loses a factor 0.85 of conditional
# acceptance per extra link (0.875, 0.744, 0.632, ...), giving accepted length
# 2.93 at k = 3, in line with public MTP-3 reports of 2.7-3.0.
MTP_FIRST_ACCEPT = 0.875
MTP_CHAIN_DECAY = 0.85


def fig2_shape(drafter: str, domain: str, positions: int = FIT_POSITIONS) -> np.ndarray:
    """Logits of the Fig. 2 conditional-acceptance curve, float64 [positions]."""
    first, last = FIG2_SHAPES[drafter][domain]
    lo, hi = np.log(first / (1 - first)), np.log(last / (1 - last))
    return np.linspace(lo, hi, positions)


def mtp_accept(positions: int = FIT_POSITIONS) -> tuple[float, ...]:
    """Unconditional acceptance by position of a chained DeepSeek-V3 MTP drafter."""
    cond = MTP_FIRST_ACCEPT * MTP_CHAIN_DECAY ** np.arange(positions)
    return tuple(float(a) for a in np.cumprod(cond))
