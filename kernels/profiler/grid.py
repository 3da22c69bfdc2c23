"""The profiling grid: SGLang's probe sweep, and a coarse-first order of points.

Points come coarse first (powers of two) so that a run cut short by
``--max-seconds`` still spans the whole range; finer probes fill in after.
"""
from __future__ import annotations

from dspark_sim.cost.sps import default_probes

REQS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
CONTEXTS = (512, 2048, 8192)
BLOCK_SIZES = (4, 5, 7, 8)
CHAIN_KS = (1, 2, 3, 4)  # MTP-k chain lengths timed
STEP_KINDS = ("none", "chain", "block")  # whole decode steps: which drafter
STEP_CONTEXT = 1024
KERNELS = ("schedule_verify", "accept")  # the fused kernels, timed at R x KERNEL_BLOCK_SIZE
KERNEL_BLOCK_SIZE = 7
CHUNKS = (64, 128, 256, 512, 1024, 2048, 4096, 8192)
CACHED = (0, 4096)  # prefill: cached tokens before the chunk (--prefill-cached)
MAX_TOKENS = 2048
MAX_WINDOW = 16  # verify tokens per request: block_size + 1 up to 15 drafts
MIXED_SHORT = 256  # mixed-context verify steps: requests this long ...
MIXED_LONG = (8192, 2048, 256)  # ... and one of these (256: all equal, the baseline)
MIXED_WIDTHS = (1, 8, 4)  # verify tokens per request
SPREAD_REQS = (256, 128, 64, 32, 16)  # verify steps over served-like context spreads ...
SPREAD_WIDTHS = (1, 4, 8)
SPREAD_MEAN, SPREAD_SIGMA = 900, 0.6  # ... lognormal contexts (the fidelity traces' shape)


def verify_points(max_tokens: int = MAX_TOKENS, contexts=CONTEXTS) -> list[tuple[int, int, int]]:
    """``(reqs, tokens, context)`` with ``reqs <= tokens <= 16 * reqs``, coarse first (``contexts``
    in the order given)."""
    probes = default_probes(max_tokens)
    coarse, fine = [], []
    for c in contexts:
        for r in REQS:
            for m in probes:
                if r <= m <= MAX_WINDOW * r:
                    (coarse if m & (m - 1) == 0 or m == r else fine).append((r, m, c))
    return coarse + _spread(fine)


def decode_points(contexts=CONTEXTS) -> list[tuple[int, int, int]]:
    """``(reqs, reqs, context)``: verify steps at one token a request (decode without a
    drafter), every request count at each context, contexts in the order given."""
    return [(r, r, c) for c in contexts for r in REQS]


def _spread(points: list) -> list:
    """Every 4th point, then every 4th from offset 2, then the rest: even coverage early."""
    order = []
    for start, step in ((0, 4), (2, 4), (1, 2)):
        order += points[start::step]
    return order


def mixed_points() -> list[tuple[int, int, int, int]]:
    """``(reqs, tokens, short context, long context)``: verify steps of ``reqs`` requests of
    ``MIXED_SHORT`` tokens of which one holds ``long``, widest windows and longest first."""
    return [(r, r * w, MIXED_SHORT, long) for long in MIXED_LONG for w in MIXED_WIDTHS
            for r in REQS if r >= 4]


def spread_points() -> list[tuple[int, int, int, float]]:
    """``(reqs, tokens, mean context, log-sd)``: verify steps over lognormal contexts,
    largest batches first."""
    return [(r, r * w, SPREAD_MEAN, SPREAD_SIGMA) for r in SPREAD_REQS for w in SPREAD_WIDTHS
            if r * w <= MAX_TOKENS]


def coarse_first(values) -> list:
    """``values`` sorted, then reordered ends first and by halving the gaps (0, 16384, 8192,
    4096, 12288, ...): a run cut short still spans the whole range."""
    values = sorted(set(values))
    if len(values) <= 2:
        return values
    order, seen, spans = [values[0], values[-1]], {0, len(values) - 1}, [(0, len(values) - 1)]
    while spans:
        nxt = []
        for lo, hi in spans:
            if hi - lo < 2:
                continue
            mid = (lo + hi) // 2
            if mid not in seen:
                seen.add(mid)
                order.append(values[mid])
            nxt += [(lo, mid), (mid, hi)]
        spans = nxt
    return order


def prefill_points(kinds, chunks=CHUNKS, cached=CACHED, max_total: int = 0) -> list[tuple[str, int, int]]:
    """``(kind, chunk, cached)``: every chunk after each cached context (levels coarse first,
    kinds alternating), ``chunk + cached <= max_total`` when given."""
    return [(kind, c, k) for k in coarse_first(cached) for c in sorted(set(chunks)) for kind in kinds
            if not max_total or c + k <= max_total]
