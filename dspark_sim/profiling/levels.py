"""Leave-one-level-out error: the strict counterpart of the k-fold error, per term.

k-fold holds out random grid points, so every held-out point has measured neighbours on
both sides: it measures interpolation. Here a whole level of one axis is held out at a
time (every row at that request count, or that context per request, or that prefill
chunk, or that many cached tokens before a chunk), the term refitted without it and the level predicted, so the error includes
extrapolation: at the grid's edges the level is predicted from one side only.

For each term ``<t>`` (``verify``, ``prefill``, ``draft_<kind>``, ``step``, ``sched``) and
axis ``<a>`` of :data:`AXES`, the profile's ``held_out`` gets ``<t>@<a>`` (every level held
out in turn) and ``<t>@largest`` (only the largest level of each axis: the pure
extrapolation a capacity answer at high load rests on). Long contexts are reported level by
level: ``verify@context=<n>`` and ``prefill@cached=<n>`` for every level of at least
:data:`LONG_CONTEXT` tokens, each held out whole. ``docs/profiles.md`` explains them.
"""
from __future__ import annotations

import numpy as np

from dspark_sim.cost.profile_format import HeldOut
from dspark_sim.cost.shapes import pow2_array
from dspark_sim.profiling.heldout import summarize_errors

# term -> axes whose levels are held out one at a time
AXES = {"verify": ("reqs", "context"), "prefill": ("chunk", "cached"), "draft": ("reqs", "context"),
        "step": ("reqs",), "sched": ("reqs",)}
# Levels of context per request (verify) and of cached tokens (prefill) reported one by one.
LONG_CONTEXT = 16384
LONG_AXES = {"verify": "context", "prefill": "cached"}
METHOD = ("leave-one-level-out (<term>@<axis>): every row at one level of the axis (request count, "
          "context per request rounded up to a power of two, prefill chunk, cached tokens before a prefill "
          "chunk) held out together and "
          "predicted by a fit without it; <term>@largest: the largest level of each axis only; "
          f"<term>@<axis>=<n>: one long level (>= {LONG_CONTEXT} tokens) alone")


def level_columns(cols: dict, section: str) -> dict[str, np.ndarray]:
    """The level of each row on each axis: request count, context per request (power of two),
    prefill chunk (power of two), cached tokens before a prefill chunk (as timed)."""
    reqs = cols["reqs"]
    out = {"reqs": reqs, "context": pow2_array(cols["ctx"] / np.maximum(reqs, 1.0))}
    if "ptok" in cols:
        out["chunk"] = pow2_array(cols["ptok"])
    if "cached" in cols:
        out["cached"] = cols["cached"]
    return {axis: out[axis] for axis in AXES[section]}


def long_levels(term: str, found: dict, levels: dict[str, np.ndarray], measured: np.ndarray) -> dict[str, HeldOut]:
    """``{"<term>@<axis>=<level>": HeldOut}`` for each long level (>= :data:`LONG_CONTEXT`) of
    the term's long axis, from :func:`leave_levels_out`'s predictions (each level held out whole)."""
    axis = LONG_AXES.get(term)
    if axis not in found:
        return {}
    idx, pred = found[axis]
    level = levels[axis][idx]
    signed = pred / measured[idx] - 1.0
    return {f"{term}@{axis}={int(value)}": summarize_errors(np.abs(signed[level == value]), signed[level == value])
            for value in np.unique(level) if value >= LONG_CONTEXT}


def leave_levels_out(n: int, mask: np.ndarray, levels: dict[str, np.ndarray], predict) -> dict[str, np.ndarray]:
    """Relative-error inputs per axis and for the largest levels: for each axis, each level
    among the rows of ``mask`` held out in turn; ``predict(train, test)`` (index arrays) gives
    the predicted seconds of ``test`` from a fit on ``train``. Returns ``{axis: (test index,
    prediction)}`` concatenated, and ``"largest"`` for the largest level of every axis."""
    out, largest = {}, ([], [])
    for axis, level in levels.items():
        values = np.unique(level[mask])
        if values.size < 2:  # one level: nothing left to fit on
            continue
        idx, pred = [], []
        for value in values:
            test = np.flatnonzero(mask & (level == value))
            train = np.setdiff1d(np.arange(n), test)
            got = predict(train, test)
            idx.append(test)
            pred.append(got)
            if value == values[-1]:
                largest[0].append(test)
                largest[1].append(got)
        out[axis] = (np.concatenate(idx), np.concatenate(pred))
    if largest[0]:
        out["largest"] = (np.concatenate(largest[0]), np.concatenate(largest[1]))
    return out


def summarize_levels(term: str, found: dict, measured: np.ndarray) -> dict[str, HeldOut]:
    """``{"<term>@<axis>": HeldOut}`` from :func:`leave_levels_out`'s predictions."""
    return {f"{term}@{axis}": summarize_errors(np.abs(pred / measured[idx] - 1.0))
            for axis, (idx, pred) in found.items()}


def level_errors(raw: dict, model, gpu) -> dict[str, HeldOut]:
    """Leave-one-level-out errors of every term of the profile fitted to ``raw`` (see the module
    docstring); the target and drafter fits are refitted per level, the host and scheduling
    terms too (on the full target and drafter fits)."""
    from dspark_sim.cost.profile_format import check_grids
    from dspark_sim.profiling.fit import (DraftModel, TargetModel, fit_draft, fit_target, measured_model,
                                          pad_and_splits)
    from dspark_sim.profiling.host import fit_host, fit_schedule, predict_steps
    from dspark_sim.profiling.rows import canonical_rows, draft_rows, target_rows

    provenance = raw.get("provenance", {}) if isinstance(raw, dict) else {}
    grids = check_grids(canonical_rows(raw))
    model, _ = measured_model(provenance, model)
    pad = pad_and_splits(provenance, model)
    out: dict[str, HeldOut] = {}
    rows = target_rows(grids)
    n = rows.step_s.size

    def target_predict(train, test):
        return TargetModel(fit_target(rows.take(train), model, gpu, pad)).predict(rows.take(test))
    for section in ("verify", "prefill"):
        mask = rows.section == section
        if np.any(mask):
            levels = level_columns(rows.cols, section)
            found = leave_levels_out(n, mask, levels, target_predict)
            out.update(summarize_levels(section, found, rows.step_s))
            out.update(long_levels(section, found, levels, rows.step_s))
    target = fit_target(rows, model, gpu, pad)
    drafts = {}
    for kind in sorted({r["kind"] for r in grids["draft"]}):
        d = draft_rows([r for r in grids["draft"] if r["kind"] == kind])
        drafts[kind] = fit_draft(d, kind, model, gpu)
        found = leave_levels_out(d.step_s.size, np.ones(d.step_s.size, bool), level_columns(d.cols, "draft"),
                                 lambda train, test, d=d, k=kind: DraftModel(fit_draft(d.take(train), k, model, gpu))
                                 .predict(d.take(test)))
        out.update(summarize_levels(f"draft_{kind}", found, d.step_s))
    steps = grids.get("step", [])
    if steps:
        reqs = np.array([r["reqs"] for r in steps], dtype=np.float64)
        measured = np.array([r["step_s"] for r in steps])

        def step_predict(train, test):
            host = fit_host([steps[i] for i in train], target, drafts)
            return predict_steps([steps[i] for i in test], target, drafts, host)
        out.update(summarize_levels("step", leave_levels_out(len(steps), np.ones(len(steps), bool),
                                                             {"reqs": reqs}, step_predict), measured))
    sched = grids.get("sched", [])
    if len(sched) >= 2:
        reqs = np.array([r["reqs"] for r in sched], dtype=np.float64)
        measured = np.array([r["step_s"] for r in sched])

        def sched_predict(train, test):
            fit = fit_schedule([sched[i] for i in train])
            return np.array([fit.seconds(sched[i]["reqs"]) for i in test])
        out.update(summarize_levels("sched", leave_levels_out(len(sched), np.ones(len(sched), bool),
                                                              {"reqs": reqs}, sched_predict), measured))
    return out


__all__ = ["AXES", "LONG_CONTEXT", "METHOD", "level_errors", "leave_levels_out", "level_columns", "long_levels",
           "summarize_levels"]
