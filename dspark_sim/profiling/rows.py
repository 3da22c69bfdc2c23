"""The profiler's raw rows in the fit's terms: canonical columns, and the target's and drafters' rows."""
from __future__ import annotations

import numpy as np

from dspark_sim.profiling.stages import Rows

# The profiler's spellings (kernels/profiler) of the canonical columns; a draft row without a
# kind is the DSpark block drafter (older raw files time no other).
RAW_ALIASES = {"prefill": {"context": "cached"}}
# Mixed-context verify steps (one long request among short ones; or lognormal contexts, as
# served traffic holds them) are verify rows with a max_context; their context is the mean.
MIXED_COLUMNS = ("reqs", "tokens", "context", "max_context", "step_s")
# Whole decode steps the profiler times (kernels/profiler/steps.py, decode_step): the
# drafter's block size per kind, when a raw step row does not state it.
STEP_BLOCK = {"none": 0, "chain": 3, "block": 7}


def step_row(r: dict) -> dict | None:
    """A raw whole-step row (``steps: [[verify_tokens, wall_s, draft_s], ...]``) as a grid
    row; steps run without CUDA graphs are left out (the engine replays graphs)."""
    if not r.get("graphs", True):
        return None
    steps = r.get("steps")
    row = {k: r[k] for k in ("kind", "reqs", "context", "step_s") if k in r}
    row["block_size"] = r.get("block_size", STEP_BLOCK.get(r.get("kind"), 0))
    ok = isinstance(steps, list) and steps and all(isinstance(x, list) and x for x in steps)
    if "verify_tokens" in r:
        row["verify_tokens"] = r["verify_tokens"]
    elif ok:
        row["verify_tokens"] = float(np.mean([x[0] for x in steps]))
    if ok and all(len(x) >= 4 for x in steps):  # host outside the draft and verify timers
        row["host_s"] = float(np.median([x[1] - x[2] - x[3] for x in steps]))
    return row


def canonical_rows(raw: dict) -> dict:
    """The raw sections with aliased columns renamed and a missing draft kind set to block."""
    out = {}
    for section in ("verify", "draft", "prefill", "step", "sched"):
        rows, aliases = raw.get(section, []), RAW_ALIASES.get(section, {})
        if isinstance(rows, list):
            rows = [{aliases.get(k, k): v for k, v in r.items()} if isinstance(r, dict) else r
                    for r in rows]
            if section == "draft":
                rows = [{"kind": "block", **r} if isinstance(r, dict) else r for r in rows]
            if section == "step":
                rows = [x for x in (step_row(r) if isinstance(r, dict) else r for r in rows)
                        if x is not None]
        out[section] = rows
    for section in ("mixed", "spread"):
        rows = raw.get(section, [])
        if isinstance(rows, list) and rows and isinstance(out["verify"], list):
            out["verify"] = out["verify"] + [{k: r[k] for k in MIXED_COLUMNS if k in r}
                                             if isinstance(r, dict) else r for r in rows]
            # a spread row also timed the same step with every request at the mean
            out["verify"] += [{**{k: r[k] for k in ("reqs", "tokens", "context") if k in r},
                               "step_s": r["uniform_s"]} for r in rows
                              if isinstance(r, dict) and "uniform_s" in r]
    return out




def target_rows(grids: dict) -> Rows:
    """The verify and prefill grid rows as the target fit's columns."""
    v, p = grids["verify"], grids["prefill"]
    col = lambda rows, k: np.array([r[k] for r in rows], dtype=np.float64)  # noqa: E731
    chunk, cached, none = col(p, "chunk"), col(p, "cached"), np.zeros(len(p))
    cols = {"reqs": np.concatenate([col(v, "reqs"), none]),
            "vtok": np.concatenate([col(v, "tokens"), none]),
            "ptok": np.concatenate([np.zeros(len(v)), chunk]),
            "ctx": np.concatenate([col(v, "reqs") * col(v, "context"), none]),
            "maxctx": np.concatenate([np.array([r.get("max_context", r["context"]) for r in v],
                                               dtype=np.float64), none]),
            "pairs": np.concatenate([np.zeros(len(v)), chunk * (cached + chunk / 2)]),
            "pre": np.concatenate([np.zeros(len(v)), np.ones(len(p))]),
            "cached": np.concatenate([np.zeros(len(v)), cached])}
    step = np.concatenate([col(v, "step_s"), col(p, "step_s")])
    section = np.array(["verify"] * len(v) + ["prefill"] * len(p))
    return Rows(cols, step, section)


def draft_rows(rows: list[dict]) -> Rows:
    """One drafter's grid rows as its fit's columns."""
    col = lambda k: np.array([r[k] for r in rows], dtype=np.float64)  # noqa: E731
    cols = {"reqs": col("reqs"), "block_size": col("block_size"), "ctx": col("reqs") * col("context")}
    return Rows(cols, col("step_s"), np.array([f"draft_{r['kind']}" for r in rows]))
