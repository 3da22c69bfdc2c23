"""What every finished run satisfies, checked in numpy at its end.

A run that breaks one of these has produced a number that cannot happen: that is a bug in
the simulator, never a result, so it raises :class:`~dspark_sim.errors.InternalError`
instead of returning. The checks are linear in the requests and steps (a few numpy passes).
"""
from __future__ import annotations

import numpy as np

from dspark_sim.errors import InternalError


def check_run(result) -> None:
    """Raise InternalError naming the first invariant a :class:`RunResult` breaks.

    Every request arrived is completed or rejected; latencies are finite and non-negative
    (TPOT is NaN exactly for one-token outputs); arrival <= first step <= first token <= finish;
    a completed request's prompt + output fits what its replica serves; the tokens emitted are
    the tokens asked; no step holds more KV than the cache; no request accepts more drafts than
    it verified.
    """
    col = result.collector
    req, steps = col.requests, col.steps
    _need(req.n + col.rejected == result.num_arrived,
          f"{req.n} completed + {col.rejected} rejected != {result.num_arrived} requests arrived")
    ttft, tpot, e2el, queue = req["ttft_ms"], req["tpot_ms"], req["e2el_ms"], req["queue_delay_ms"]
    for name, values in (("TTFT", ttft), ("E2E latency", e2el), ("queue delay", queue)):
        _need(_all(np.isfinite(values) & (values >= 0)), f"a {name} is negative or not finite: {_worst(values)}")
    out = req["output_tokens"]
    one = out == 1
    _need(_all(np.isnan(tpot) == one), "TPOT is NaN for a request of more than one token, or set for one token")
    _need(_all(tpot[~one] >= 0), f"a TPOT is negative: {_worst(tpot[~one])}")
    _need(_all(queue <= ttft) and _all(ttft <= e2el), "a request's first step, first token and finish are out "
          "of order (arrival <= first step <= first token <= finish)")
    _need(_all(req["finish_s"] >= req["arrival_s"]), "a request finished before it arrived")
    longest = getattr(result, "longest_request_tokens", None)
    if longest is not None and req.n:
        total = req["prompt_tokens"] + out
        _need(int(total.max()) <= longest, f"a completed request of {int(total.max())} tokens is longer than the "
              f"{longest} its replica serves")
    emitted = int(steps["emitted"].sum()) if steps.n else 0
    _need(emitted == int(out.sum()), f"steps emitted {emitted} tokens, completed requests asked for {int(out.sum())}")
    if steps.n:
        kv = steps["kv_tokens"]
        _need(int(kv.max()) <= result.kv_capacity_tokens,
              f"a step holds {int(kv.max())} KV tokens, above the capacity of {result.kv_capacity_tokens}")
        _need(_all(np.isfinite(steps["step_s"]) & (steps["step_s"] > 0)), "a step has no positive finite duration")
    _need(result.kv_peak_tokens <= result.kv_capacity_tokens,
          f"KV peak {result.kv_peak_tokens} above the capacity of {result.kv_capacity_tokens}")
    _need(_all(req["accepted_tokens"] <= req["verified_drafts"]), "a request accepted more drafts than it verified")
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
