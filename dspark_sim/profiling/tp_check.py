"""Whole steps measured at tp > 1 against the one-GPU profile scaled to that tp.

``dspark-profile steps --tp N`` times whole decode steps of the tensor-parallel decoder
(``steps_<model>.tp<N>.json``: ``{"provenance": {..., "tp": N}, "step": [rows as the
one-GPU profiler's step part]}``). The fit never sees them: the cost model at tp N (the
tp-1 fit sharded, plus the communication the profile's measured curves or the roofline
give) predicts each step, and the relative errors are the tp held-out error, kept in the
profile as ``held_out["step_tp<N>"]`` with the communication's source named in
``held_out_method``.
"""
from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

from dspark_sim.cost.base import DraftWork, StepWork
from dspark_sim.cost.jsonio import read_json
from dspark_sim.errors import InputError
from dspark_sim.profiling.heldout import summarize_errors
from dspark_sim.profiling.rows import step_row

STEPS_FILE = re.compile(r"steps_(?P<model>.+)\.tp(?P<tp>\d+)\.json$")


def step_work(row: dict) -> StepWork:
    """The :class:`StepWork` of one measured whole decode step row."""
    reqs, ctx = int(row["reqs"]), int(row["context"])
    draft = DraftWork(row["kind"], reqs, int(row["block_size"]), reqs * ctx) if row["block_size"] else None
    return StepWork(decode_reqs=reqs, verify_tokens=round(row["verify_tokens"]), decode_context_tokens=reqs * ctx,
                    draft=draft, decode_max_context=ctx, running_reqs=reqs)


def tp_errors(cost, raw: dict, file=None) -> list[float]:
    """Relative errors |predicted / measured - 1| of every graphed step row of ``raw`` under
    ``cost`` (a cost model at the raw file's tp); scheduling gaps are not part of a step."""
    rows = [r for r in map(step_row, raw.get("step", [])) if r is not None]
    if not rows:
        raise InputError(file, "step", [], "no whole steps (run with CUDA graphs) to compare")
    out = []
    for i, r in enumerate(rows):
        if "verify_tokens" not in r or r.get("step_s", 0) <= 0:
            raise InputError(file, f"step[{i}]", r, "needs verify_tokens (or steps) and step_s > 0")
        work = step_work(r)
        out.append(abs((cost.step_s(work) - cost.sched_s(work)) / r["step_s"] - 1.0))
    return out


def tp_step_files(raw_dir: Path, model: str) -> dict[int, Path]:
    """``steps_<model>.tp<N>.json`` files of ``raw_dir`` by N."""
    out = {}
    for path in sorted(raw_dir.glob(f"steps_{model}.tp*.json")):
        m = STEPS_FILE.match(path.name)
        if m and m["model"] == model:
            out[int(m["tp"])] = path
    return out


def with_tp_errors(profile, raw_dir: Path, log=print):
    """``profile`` with ``held_out["step_tp<N>"]`` for every tp its steps were timed at."""
    import numpy as np

    from dspark_sim.catalog import get_gpu, get_model
    from dspark_sim.cost.parallel import Parallel
    from dspark_sim.cost.profile import profile_cost

    files = tp_step_files(raw_dir, profile.model)
    if not files:
        return profile
    model, gpu = get_model(profile.model), get_gpu(profile.gpu)
    held, notes = dict(profile.held_out), []
    for tp, path in files.items():
        raw = read_json(path)
        said = raw.get("provenance", {}).get("tp") if isinstance(raw, dict) else None
        if said != tp:
            raise InputError(path, "provenance.tp", said, f"the file name says tp {tp}")
        cost = profile_cost(profile, model, gpu, Parallel(tp, tp if model.is_moe else 1), warn=False)
        err = np.array(tp_errors(cost, raw, path))
        held[f"step_tp{tp}"] = summarize_errors(err)
        comm = cost.source.split("; communication: ", 1)
        notes.append(f"step_tp{tp}: whole steps at tp {tp} ({path.name}) predicted by the tp-1 fit "
                     f"sharded, communication {comm[1] if len(comm) > 1 else 'none'}")
        log(f"{profile.model}: tp {tp} whole steps, median error {100 * np.median(err):.1f} % over {len(err)}")
    return replace(profile, held_out=held, held_out_method=profile.held_out_method + "; " + "; ".join(notes))


__all__ = ["step_work", "tp_errors", "tp_step_files", "with_tp_errors"]
