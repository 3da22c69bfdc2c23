"""What every finished run satisfies, checked in numpy at its end.

A run that breaks one of these has produced a number that cannot happen: that is a bug in
the simulator, never a result, so it raises :class:`~dspark_sim.errors.InternalError`
instead of returning. The checks are linear in the requests and steps (a few numpy passes).
:func:`~dspark_sim.metrics.record.request_faults` states what a completed request keeps, for the
simulator's runs and for the records of real ones alike.
"""
from __future__ import annotations

import numpy as np

from dspark_sim.errors import InternalError
from dspark_sim.metrics.record import request_faults


def check_run(result) -> None:
    """Raise InternalError naming the first invariant a :class:`RunResult` breaks.

    Every request arrived is completed or rejected; completed ones keep :func:`request_faults`
    (TPOT is NaN exactly for one-token outputs); a completed request's prompt + output fits what
    its replica serves; the tokens emitted are the tokens asked; no step holds more KV than the
    cache.
    """
    col = result.collector
    req, steps = col.requests, col.steps
    _need(len(req) + col.rejected == result.num_arrived,
          f"{len(req)} completed + {col.rejected} rejected != {result.num_arrived} requests arrived")
    for bad, what in request_faults(req):
        _need(not bad.any(), what)
    tpot, out = req.tpot_ms, req.output_tokens
    one = out == 1
    _need(_all(np.isnan(tpot) == one), "TPOT is NaN for a request of more than one token, or set for one token")
    _need(_all(tpot[~one] >= 0), f"a TPOT is negative: {_worst(tpot[~one])}")
    longest = getattr(result, "longest_request_tokens", None)
    if longest is not None and len(req):
        total = req.prompt_tokens + out
        _need(int(total.max()) <= longest, f"a completed request of {int(total.max())} tokens is longer than the "
              f"{longest} its replica serves")
    emitted = int(steps.emitted.sum()) if len(steps) else 0
    _need(emitted == int(out.sum()), f"steps emitted {emitted} tokens, completed requests asked for {int(out.sum())}")
    if len(steps):
        kv = steps.kv_tokens
        _need(int(kv.max()) <= result.kv_capacity_tokens,
              f"a step holds {int(kv.max())} KV tokens, above the capacity of {result.kv_capacity_tokens}")
        _need(_all(np.isfinite(steps.step_s) & (steps.step_s > 0)), "a step has no positive finite duration")
    _need(result.kv_peak_tokens <= result.kv_capacity_tokens,
          f"KV peak {result.kv_peak_tokens} above the capacity of {result.kv_capacity_tokens}")
    _need(np.isfinite(result.sim_end_s) and result.sim_end_s >= 0, f"the run ended at {result.sim_end_s} s")


def _need(ok: bool, what: str) -> None:
    if not ok:
        raise InternalError(f"invariant broken: {what}")


def _all(mask: np.ndarray) -> bool:
    return bool(np.all(mask))


def _worst(values: np.ndarray) -> float:
    """The most negative or non-finite value, for the message."""
    bad = values[~np.isfinite(values) | (values < 0)]
    return float(bad[0]) if bad.size else float("nan")
