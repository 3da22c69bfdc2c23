"""Prompt steps on a GPU held at its power limit.

A prompt chunk of a few hundred tokens or more keeps the tensor cores busy: its time follows
the SM clock. The profiler times prompt steps after a second of idle (``--prefill-idle 1``),
the GPU cool. A saturated server runs them back to back; the board reaches its power limit,
the driver lowers the SM clock, and the same steps run a few percent slower (measured on the
profile's own prefill host: ``profiles/h200/prefill_clocks.json``, fitted by
:mod:`dspark_sim.profiling.hot`). A second of idle gives the cool price back.

The term: the prompt share of a step's linear layers (its prompt tokens over all its tokens)
runs ``hot_ratio`` x ``(duty - hot_duty0) / (1 - hot_duty0)`` slower (clamped to 0-1),
``duty`` the share of the last ``hot_window_s`` seconds the GPU spent in steps with prompt
chunks (:class:`PrefillDuty`) and ``hot_duty0`` the share at which the profile timed them (the
profiler idles ``prefill_idle`` times each call's seconds after it: 1 / (1 + prefill_idle); a
lower share, a third or a quarter, ran no faster).
The attention keeps its price: prompt steps after 10-32 thousand cached tokens, whose time is
mostly attention, ran no slower at a high duty than at a low one in served runs on a host the
profile never saw (docs/validation.md). Decode steps held for seconds keep their price too
(docs/profiles.md, "Steps held for seconds").
"""
from __future__ import annotations

from collections import deque

# The window the duty is taken over, seconds; not fitted: the SM clock falls within the first
# call of a long prompt step held back to back (profiles/h200/sustained_clocks.json) and a
# second of idle gives the cool price back (profiles/h200/prefill_clocks.json), so the power
# controller answers within about a second. 0.5 s or 2 s move the load sweeps' errors by a
# few tenths of a percent.
WINDOW_S = 1.0


class PrefillDuty:
    """The spans of a GPU's recent steps with prompt chunks, and the share of a window they
    fill. Asked at start times that never go back (a replica's steps, a run's rows)."""

    __slots__ = ("window_s", "_spans")

    def __init__(self, window_s: float):
        self.window_s = window_s
        self._spans: deque[tuple[float, float]] = deque()

    def add(self, start_s: float, end_s: float) -> None:
        """A step with prompt chunks ran from ``start_s`` to ``end_s``."""
        if self.window_s > 0.0:
            self._spans.append((start_s, end_s))

    def at(self, now_s: float) -> float:
        """The share of ``[now_s - window_s, now_s]`` spent in the steps added, from 0 to 1."""
        spans = self._spans
        if not spans:
            return 0.0
        lo = now_s - self.window_s
        while spans and spans[0][1] <= lo:
            spans.popleft()
        busy = 0.0
        for start, end in spans:  # max(0, min(end, now_s) - max(start, lo)), without the calls' overhead
            span = (end if end < now_s else now_s) - (start if start > lo else lo)
            if span > 0.0:
                busy += span
        return min(1.0, busy / self.window_s)


def hot_scale(hot_ratio: float, duty0: float, duty: float, prefill_tokens: int, batch_tokens: int) -> float:
    """The factor on a step's linear seconds: 1 + ``hot_ratio`` x the duty past
    ``duty0`` (as a share of what lies past it) x the step's prompt share of its tokens."""
    if not (hot_ratio and duty > duty0 and prefill_tokens):
        return 1.0
    return 1.0 + hot_ratio * (duty - duty0) / (1.0 - duty0) * prefill_tokens / batch_tokens


def duty_column(start_s, step_s, prefill_tokens, window_s: float, every: bool = False) -> list[float]:
    """Per row of a run's steps (start, seconds, prompt tokens, in start order): the prefill
    duty before it, as the simulator takes it (:class:`PrefillDuty`); 0 for a step without
    prompt chunks unless ``every``."""
    duty, out = PrefillDuty(window_s), []
    for start, seconds, tokens in zip(start_s, step_s, prefill_tokens):
        out.append(duty.at(float(start)) if tokens or every else 0.0)
        if tokens:
            duty.add(float(start), float(start) + float(seconds))
    return out


def provenance_term(target, projected_from: str | None, base: str) -> dict:
    """The run provenance's ``power_limit`` term of a profile whose ``target`` (a TargetFit) has one
    (empty without): measured on ``base``, or carried unchanged to a profile projected from it."""
    if not target.hot_ratio:
        return {}
    what = (f"the prompt share of a step's linear layers {100 * target.hot_ratio:.1f} % slower at a prefill "
            f"duty of 1, past {target.hot_duty0:g}, over {target.hot_window_s:g} s")
    if projected_from:
        return {"power_limit": {"kind": "projected", "detail": f"{what}: measured on {projected_from}, carried "
                                f"unchanged", "caveat": f"prompt steps' power-limit slowdown carried unchanged "
                                f"from {projected_from}"}}
    return {"power_limit": {"kind": "measured", "detail": f"{what}: prompt steps timed back to back against as "
                            f"profiled on {base} (profiles/{base}/prefill_clocks.json)"}}
