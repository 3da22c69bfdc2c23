"""Step replay: the cost model on every step a run served, from the work its ``steps.csv`` records."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from dspark_sim.cost.base import DraftWork, StepWork
from dspark_sim.cost.hot import duty_column, duty_terms
from dspark_sim.metrics.record import STEP_COLUMNS, WORK_COLUMNS, read_steps
from dspark_sim.speculation.config import Speculation

REPLAY_COLUMNS = ("step_s", "running_reqs", "decode_reqs", "prefill_tokens", "verify_tokens", "sched_s")
RUNNING_BINS = ((1, 4), (5, 16), (17, 64), (65, 128), (129, 256))


def step_replay(run_dir: Path, speculation: Speculation, cost) -> dict | None:
    """The cost model on every step of the run in ``run_dir`` (its work from ``steps.csv``): median
    relative error of decode steps, of mixed steps (prompt chunks beside decode windows) and of
    prefill steps without the gap before them, and of that gap (``sched_s``, the serving loop's
    host time), by running requests; None for runs that do not record their steps' work.
    ``speculation`` names the drafter the run used."""
    present = read_steps(run_dir / "steps.csv", (), optional=STEP_COLUMNS)
    if any(getattr(present, c) is None for c in WORK_COLUMNS) or not len(present):
        return None
    rows = read_steps(run_dir / "steps.csv", REPLAY_COLUMNS + WORK_COLUMNS + ("start_s", "prefill_longest"))
    kind = speculation.draft_kind
    duty = duty_column(rows.start_s, rows.step_s, rows.prefill_tokens, *duty_terms(cost))
    out = {"decode": [], "mixed": [], "prefill": [], "sched": []}
    for i in range(len(rows)):
        dec, running, ctx = int(rows.decode_reqs[i]), int(rows.running_reqs[i]), int(rows.decode_context_tokens[i])
        draft = DraftWork(kind, dec, speculation.block_size, ctx) if dec and kind else None
        work = StepWork(dec, int(rows.verify_tokens[i]), ctx, int(rows.prefill_tokens[i]), int(rows.prefill_reqs[i]),
                        float(rows.prefill_attn_tokens2[i]), draft, int(rows.decode_max_context[i]), running,
                        prefill_duty=duty[i], prefill_longest=int(rows.prefill_longest[i]))
        parts = cost.breakdown(work)
        sched, real_sched = parts.pop("sched_s", 0.0), float(rows.sched_s[i])
        real = float(rows.step_s[i]) - real_sched
        part = ("mixed" if int(rows.prefill_tokens[i]) else "decode") if dec else "prefill"
        out[part].append((running, sum(parts.values()) / real - 1.0 if real > 0 else math.nan))
        out["sched"].append((running, sched / real_sched - 1.0 if real_sched > 0 else math.nan))
    return {part: _medians(errs) for part, errs in out.items()}


def _medians(errs: list[tuple[int, float]]) -> dict:
    """Median error over the steps, and by bin of running requests."""
    run = np.array([x for x, _ in errs], dtype=np.float64)
    err = np.array([e for _, e in errs], dtype=np.float64)
    ok = ~np.isnan(err)
    return {"steps": int(ok.sum()),
            "median_error": float(np.median(err[ok])) if ok.any() else math.nan,
            "by_running": {f"{lo}-{hi}": float(np.median(err[m])) for lo, hi in RUNNING_BINS
                           if (m := ok & (run >= lo) & (run <= hi)).any()}}
