"""What every finished run satisfies, checked in numpy at its end.

A run that breaks one of these has produced a number that cannot happen: that is a bug in
the simulator, never a result, so it raises :class:`~dspark_sim.errors.InternalError`
instead of returning. The checks are linear in the requests and steps (a few numpy passes).
:func:`request_faults` states what a completed request keeps, for the simulator's runs and for
the records of real ones alike (:func:`dspark_sim.metrics.record.read_record`).
"""
from __future__ import annotations

from collections.abc import Iterator, Mapping

import numpy as np

from dspark_sim.errors import InternalError
from dspark_sim.limits import MAX_TOKENS

_LATENCIES = (("ttft_ms", "TTFT"), ("e2el_ms", "E2E latency"), ("queue_delay_ms", "queue delay"))


def request_faults(req: Mapping[str, np.ndarray]) -> Iterator[tuple[np.ndarray, str]]:
    """(the requests breaking it, what it says) for each invariant of completed requests, over
    the columns ``req`` holds (equal-length arrays, named as in requests.csv): latencies finite
    and non-negative; arrival <= first step <= first token <= finish; whole token counts in [1,
    MAX_TOKENS]; no more accepted drafts than the tokens decode steps emitted (the first token
    comes from the prompt), nor than were verified."""
    for name, label in _LATENCIES:
        if name in req:
            yield ~(np.isfinite(req[name]) & (req[name] >= 0)), f"a {label} is negative or not finite"
    arrival, finish = req.get("arrival_s"), req.get("finish_s")
    if arrival is not None:
        yield ~(np.isfinite(arrival) & (arrival >= 0)), "an arrival time is negative or not finite"
    if arrival is not None and finish is not None:
        yield ~(finish >= arrival), "a request finished before it arrived"
    if "ttft_ms" in req and "e2el_ms" in req:
        queue = req.get("queue_delay_ms", 0.0)
        yield ~((queue <= req["ttft_ms"]) & (req["ttft_ms"] <= req["e2el_ms"])), (
            "a request's first step, first token and finish are out of order (arrival <= first step <= "
            "first token <= finish)")
    if "first_token_s" in req and arrival is not None and finish is not None:
        first = req["first_token_s"]
        yield ~((arrival <= first) & (first <= finish)), "a first token is before its arrival or after its finish"
    for name in ("prompt_tokens", "output_tokens"):
        if name in req:
            count = req[name]
            yield ~((count >= 1) & (count <= MAX_TOKENS) & (count == np.floor(count))), (
                f"{name} is not a whole number in [1, {MAX_TOKENS}]")
    if "accepted_tokens" in req and "output_tokens" in req:
        yield ~(req["accepted_tokens"] <= req["output_tokens"] - 1), (
            "a request counted more accepted drafts than the tokens its decode steps emitted")
    if "accepted_tokens" in req and "verified_drafts" in req:
        yield ~(req["accepted_tokens"] <= req["verified_drafts"]), "a request accepted more drafts than it verified"


def check_run(result) -> None:
    """Raise InternalError naming the first invariant a :class:`RunResult` breaks.

    Every request arrived is completed or rejected; completed ones keep :func:`request_faults`
    (TPOT is NaN exactly for one-token outputs); a completed request's prompt + output fits what
    its replica serves; the tokens emitted are the tokens asked; no step holds more KV than the
    cache.
    """
    col = result.collector
    req, steps = col.requests, col.steps
    _need(req.n + col.rejected == result.num_arrived,
          f"{req.n} completed + {col.rejected} rejected != {result.num_arrived} requests arrived")
    for bad, what in request_faults({name: req[name] for name in req.cols}):
        _need(not bad.any(), what)
    tpot, out = req["tpot_ms"], req["output_tokens"]
    one = out == 1
    _need(_all(np.isnan(tpot) == one), "TPOT is NaN for a request of more than one token, or set for one token")
    _need(_all(tpot[~one] >= 0), f"a TPOT is negative: {_worst(tpot[~one])}")
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
