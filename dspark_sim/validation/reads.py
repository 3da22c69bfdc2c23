"""When the host reads a request's first token, served and simulated.

The decoder overlaps its steps: it launches step n+1 before it reads step n's tokens, so a
token reaches the request once step n has ended on the GPU and the host has launched the step
after it. An eager step (prompt chunks past the graphs' tokens) takes the host tens of
milliseconds to launch, a graph step a few; while the host launches, step n's tokens wait. The
simulator takes a token's time as its step's end.

A record written before the ``read_s`` column does not say which step gave a request its first
token; :func:`first_reads` infers it for the requests whose whole prompt a step prefilled alone
(one chunk, the prompt less its cached tokens, in the first such step after the request was
scheduled) and measures the wait from that step's end to the request's first token, by what
the next step is. A record with ``read_s`` gives every step's wait (:func:`step_reads`).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from dspark_sim.cost.terms import runs_eager
from dspark_sim.metrics.record import read_requests, read_steps

KINDS = ("graph", "eager")  # the next step: replayed from a CUDA graph, or launched kernel by kernel


def first_reads(run: Path, graph_tokens: int) -> dict[str, list[float]]:
    """Milliseconds from the end of the step that prefilled a request's prompt alone to the
    request's first token, by the kind of the next step (eager when its tokens pass
    ``graph_tokens`` with prompt chunks among them); the requests that cannot be placed so are
    left out."""
    req = read_requests(run / "requests.csv", ("prompt_tokens", "cached_tokens", "first_scheduled_s", "first_token_s"))
    st = read_steps(run / "steps.csv", ("start_s", "step_s", "prefill_tokens", "prefill_reqs", "verify_tokens"))
    end, eager = st.start_s + st.step_s, runs_eager(st.verify_tokens, st.prefill_tokens, graph_tokens)
    out: dict[str, list[float]] = {k: [] for k in KINDS}
    alone = st.prefill_reqs == 1
    for prompt, cached, sched, first in zip(req.prompt_tokens, req.cached_tokens, req.first_scheduled_s,
                                            req.first_token_s):
        at = np.flatnonzero(alone & (st.prefill_tokens == prompt - cached) & (st.start_s >= sched - 1e-4))
        if not at.size or at[0] + 1 >= end.size or first < end[at[0]] - 1e-6:
            continue
        k = at[0]
        out[KINDS[int(eager[k + 1])]].append(round(float((first - end[k]) * 1e3), 3))
    return out


def step_reads(run: Path, graph_tokens: int) -> dict[str, list[float]] | None:
    """Milliseconds from each step's end to when the host read its tokens (``read_s``), by the
    kind of the next step; None for a record without the column (or written before it: zeros)."""
    st = read_steps(run / "steps.csv", ("start_s", "step_s", "prefill_tokens", "verify_tokens", "read_s"))
    if len(st) < 2 or not st.read_s.any():
        return None
    eager = runs_eager(st.verify_tokens, st.prefill_tokens, graph_tokens)
    wait = (st.read_s - st.start_s - st.step_s) * 1e3
    return {k: np.round(wait[:-1][eager[1:] == (k == "eager")], 3).tolist() for k in KINDS}  # (to a microsecond)


def table(rows: list[dict], field: str = "first_reads", what: str = "requests") -> list[str]:
    """By method and batching: the median and mean wait (ms) and how many, decoder / simulator, by
    the next step's kind, over ``rows``' cases (each with ``field`` of both sides: ``first_reads``,
    or ``step_reads`` where the decoder's records time every read)."""
    lines = ["| method | batching | " + " | ".join(f"next step {k}: decoder / simulator, median, mean ms ({what})"
                                                 for k in KINDS) + " |", "|---|---|" + "---|" * len(KINDS)]
    for method in sorted({r["method"] for r in rows}):
        for batching in sorted({r["batching"] for r in rows}):
            mine = [r[field] for r in rows if r["method"] == method and r["batching"] == batching
                    and r.get(field)]
            if not mine:
                continue
            cells = []
            for k in KINDS:
                real = [x for m in mine for x in m["real"][k]]
                sim = [x for m in mine for x in m["sim"][k]]
                cells.append(f"{_stats(real)} / {_stats(sim)} ({len(real)} / {len(sim)})")
            lines.append(f"| {method} | {batching} | " + " | ".join(cells) + " |")
    return lines


def _stats(x: list[float]) -> str:
    """Median and mean, ms, to a tenth (a token read at its step's end is 0.0, not -0.0)."""
    return ", ".join(f"{round(float(v), 1) + 0.0:.1f}" for v in (np.median(x), np.mean(x))) if x else "-"
