"""Synthetic raw profiles: the profiler's JSON, made from a cost model plus noise.

For tests and dry runs of ``dspark-profile fit --synthetic`` only: the
provenance says ``"synthetic": true`` and the fitting script refuses to ship
such files. ``quantum`` rounds the token count of every GEMM up to a tile
multiple, the staircase real kernels show and a smooth fit must interpolate.
"""
from __future__ import annotations

import math

import numpy as np

from dspark_sim.cost.base import CostModel, DraftWork, StepWork

VERIFY_REQS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
VERIFY_TOKENS_PER_REQ = (1, 2, 4, 8)
CONTEXTS = (512, 2048, 8192)
BLOCK_SIZES = (3, 5, 7)
PREFILL_CHUNKS = (64, 256, 1024, 2048, 4096, 8192)
PREFILL_CACHED = (0, 4096, 16384)


def default_grid() -> dict:
    """The grid of (R, M, C), (R, g, kind, C) and (chunk, cached) the synthetic profiler sweeps."""
    return {
        "verify": [(r, r * t, c) for r in VERIFY_REQS for t in VERIFY_TOKENS_PER_REQ for c in CONTEXTS],
        "draft": [(r, g, kind, 2048) for kind in ("block", "chain") for r in VERIFY_REQS
                  for g in BLOCK_SIZES],
        "prefill": [(n, c) for n in PREFILL_CHUNKS for c in PREFILL_CACHED],
    }


def synthetic_raw(cost: CostModel, *, noise: float = 0.015, quantum: int = 64, seed: int = 0,
                  grid: dict | None = None) -> dict:
    """A raw profile (``verify``/``draft``/``prefill`` rows) timed by ``cost`` with log-normal noise."""
    rng = np.random.default_rng(seed)
    grid = grid or default_grid()

    def tiled(tokens: int) -> int:
        return tokens if tokens <= quantum else quantum * math.ceil(tokens / quantum)

    def noisy(seconds: float) -> float:
        return float(seconds * math.exp(rng.normal(0.0, noise)))

    verify = [{"reqs": r, "tokens": m, "context": c,
               "step_s": noisy(cost.step_s(StepWork(decode_reqs=r, verify_tokens=tiled(m),
                                                    decode_context_tokens=r * c)))}
              for r, m, c in grid["verify"]]
    draft = [{"reqs": r, "block_size": g, "kind": k, "context": c,
              "step_s": noisy(cost.step_s(StepWork(draft=DraftWork(k, r, g, r * c))))}
             for r, g, k, c in grid["draft"]]
    prefill = [{"chunk": n, "cached": c,
                "step_s": noisy(cost.step_s(StepWork(prefill_tokens=tiled(n), prefill_reqs=1,
                                                     prefill_attn_tokens2=n * (c + n / 2))))}
               for n, c in grid["prefill"]]
    # the only padding is the quantum staircase above, for the fit to interpolate, not model
    provenance = {"synthetic": True, "generator": cost.name, "noise": noise, "quantum": quantum,
                  "seed": seed, "date": "synthetic", "pad_limits": [], "pad_steps": [],
                  "prefill_graph_tokens": 0}
    return {"provenance": provenance, "verify": verify, "draft": draft, "prefill": prefill}
