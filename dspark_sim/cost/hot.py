"""Steps on a GPU held at its power limit: prompt steps, and the decode steps after them.

A prompt chunk of a few hundred tokens or more keeps the tensor cores busy: its time follows
the SM clock. The profiler times prompt steps after a second of idle (``--prefill-idle 1``),
the GPU cool. A saturated server runs them back to back; the board reaches its power limit,
the driver lowers the SM clock, and the same steps run a few percent slower (measured on the
profile's own prefill host, ``profiles/h200/prefill_clocks.json``, and on another GPU with
served-like mixed steps; boards differ, and the fit keeps the mean over the GPUs,
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

Decode steps after prompt steps do not: a decode step right after a second of prompt steps back
to back runs slower than one after a second of idle, the clock not yet back
(``benchmarks/served_steps.py --part after``, fitted by :mod:`dspark_sim.profiling.hot`). The
term (:class:`DecodeHot`): a step without prompt chunks, its GPU seconds (target and drafter)
``ratio`` x ``(duty - hot_duty0) / (1 - hot_duty0)`` longer (0 up to ``hot_duty0``), ``ratio`` the
measured one at a duty of 1 for the step's drafter kind and decoding requests (interpolated,
clamped; the mean over the GPUs timed, after prompt steps on one and after mixed steps on another). The threshold is the prompt steps' term's: prompt steps idled to a duty of a quarter
to a half ran no faster than at the profiler's half, so below it the board is not at its limit;
the profile times decode steps cool.
"""
from __future__ import annotations

import math
from collections import deque
from itertools import islice

import numpy as np

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
        return min(1.0, _busy(spans, now_s, lo) / self.window_s)

    def spans(self) -> tuple[tuple[float, float], ...]:
        """The steps added and not yet forgotten, (start, end) in order."""
        return tuple(self._spans)

    def last_end(self) -> float:
        """When the last step added ended (-inf: none)."""
        return self._spans[-1][1] if self._spans else -math.inf


def _busy(spans, now_s: float, lo: float) -> float:
    """Seconds of ``spans`` ((start, end) pairs) inside ``[lo, now_s]``, summed in their order."""
    busy = 0.0
    for start, end in spans:  # max(0, min(end, now_s) - max(start, lo)), without the calls' overhead
        span = (end if end < now_s else now_s) - (start if start > lo else lo)
        if span > 0.0:
            busy += span
    return busy


class DecodeHot:
    """Decode steps' power-limit term (see the module docstring): ``knots`` decoding requests,
    ``ratios`` per drafter kind (:data:`KINDS`) the slowdown at a duty of 1 at each knot."""

    KINDS = ("none", "chain", "block")

    def __init__(self, knots: tuple[float, ...], ratios: tuple[tuple[float, ...], ...], duty0: float = 0.0):
        self.knots, self.ratios = np.asarray(knots, float), [np.asarray(r, float) for r in ratios]
        self.duty0 = duty0

    @classmethod
    def of(cls, target) -> DecodeHot | None:
        """The term of a profile's target fit, past the prompt steps' ``hot_duty0``; None where it has none."""
        return cls(target.hot_decode_reqs, target.hot_decode, target.hot_duty0) if target.hot_decode_reqs else None

    def excess(self, duty: float) -> float:
        """The share of the ratio a step at ``duty`` takes: 0 up to ``duty0``, 1 at a duty of 1."""
        return (duty - self.duty0) / (1.0 - self.duty0) if duty > self.duty0 else 0.0

    def scaled_gpu(self, gpu_s, reqs, kind: str | None):
        """The step's GPU seconds times the ratio at a duty of 1: numbers or arrays, the same
        operations (:meth:`seconds` multiplies it by the duty)."""
        return gpu_s * np.interp(reqs, self.knots, self.ratios[self.KINDS.index(kind or "none")])

    def seconds(self, parts: dict, work) -> float:
        """The seconds a decode step (a :class:`~dspark_sim.cost.base.StepWork` whose parts, by
        :meth:`~dspark_sim.cost.profile.ProfileCost.breakdown`, are ``parts``) runs longer at its duty."""
        kind = work.draft.kind if work.draft is not None and work.draft.block_size else None
        return float(self.scaled_gpu(gpu_seconds(parts), work.decode_reqs, kind)) * self.excess(work.prefill_duty)


GPU_PARTS = ("overhead_s", "linear_s", "per_req_s", "attn_s", "comm_s", "draft_s")


def gpu_seconds(parts: dict):
    """A step's GPU seconds (target and drafter) from its parts, summed in one order."""
    total = parts[GPU_PARTS[0]]
    for name in GPU_PARTS[1:]:
        total = total + parts[name]
    return total


def stretch_times(clock_s: float, step_s: np.ndarray, parts: dict, works, hot: DecodeHot | None,
                  duty: PrefillDuty) -> tuple[np.ndarray, np.ndarray]:
    """Start times [K + 1] and seconds [K] of a stretch of K decode steps from ``clock_s`` whose
    seconds without the term are ``step_s`` (``parts``: their :meth:`breakdown_array`, ``works``
    their work): with the decode steps' power-limit term where the profile has one and the duty
    at the stretch's start is past its threshold, each step at the duty at its start, as step by
    step prices it."""
    # the duty only falls over a stretch: past the threshold at none of its steps if not at its first
    if hot is None or not hot.excess(duty.at(clock_s)):
        return np.concatenate(([clock_s], step_s)).cumsum(), step_s  # sequential sums, as step by step
    kind = works.draft_kind if np.any(works.block_size) else None
    scaled = np.broadcast_to(hot.scaled_gpu(gpu_seconds(parts), works.decode_reqs, kind), step_s.shape)
    times, seconds = decode_hot_times(clock_s, step_s, scaled, duty, hot.excess)
    return np.array(times), np.array(seconds)


def decode_hot_times(clock_s: float, step_s, scaled, duty: PrefillDuty, excess) -> tuple[list[float], list[float]]:
    """Start times and seconds of consecutive decode steps from ``clock_s``, each ``step_s[k]`` plus
    ``scaled[k]`` (:meth:`DecodeHot.scaled_gpu`) times ``excess`` of the duty at its start
    (:meth:`DecodeHot.excess`), as step by step prices them one at a time (no prompt step among
    them: the duty only falls, and once ``excess`` is 0 it stays 0). The duty is
    :meth:`PrefillDuty.at`'s, its sums in its order, over the spans still in the window."""
    spans, window = duty.spans(), duty.window_s
    bases, extras = step_s.tolist(), scaled.tolist()
    times, seconds, t, first = [clock_s], [], clock_s, 0
    cool_from = duty.last_end() + window  # from then on the duty is 0 (and adds nothing)
    for k, base in enumerate(bases):
        x = 0.0
        if t < cool_from:
            lo = t - window
            while spans[first][1] <= lo:  # out of the window: adds nothing (at() forgets it)
                first += 1
            x = excess(min(1.0, _busy(islice(spans, first, None), t, lo) / window))
        if x == 0.0:  # the rest at their own price (base + extra x 0.0 is base)
            for base in bases[k:]:
                seconds.append(base)
                t = t + base
                times.append(t)
            break
        s = base + extras[k] * x
        seconds.append(s)
        t = t + s
        times.append(t)
    return times, seconds


def hot_scale(hot_ratio: float, duty0: float, duty: float, prefill_tokens: int, batch_tokens: int) -> float:
    """The factor on a step's linear seconds: 1 + ``hot_ratio`` x the duty past
    ``duty0`` (as a share of what lies past it) x the step's prompt share of its tokens."""
    if not (hot_ratio and duty > duty0 and prefill_tokens):
        return 1.0
    return 1.0 + hot_ratio * (duty - duty0) / (1.0 - duty0) * prefill_tokens / batch_tokens


def duty_terms(cost) -> tuple[float, bool]:
    """How a cost model takes the prefill duty: over which window (0: it takes none) and whether
    its steps without prompt chunks take it too (it has the decode steps' term)."""
    return getattr(cost, "hot_window_s", 0.0), getattr(cost, "decode_hot", None) is not None


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
    """The run provenance's ``power_limit`` term (prompt steps) and ``decode_power_limit`` term of a
    profile whose ``target`` (a TargetFit) has them (empty without): measured on ``base``, or carried
    unchanged to a profile projected from it."""
    out = _decode_term(target, projected_from, base) if target.hot_decode_reqs else {}
    if not target.hot_ratio:
        return out
    return {**_prompt_term(target, projected_from, base), **out}


def _decode_term(target, projected_from: str | None, base: str) -> dict:
    what = (f"a decode step's GPU seconds up to {100 * max(map(max, target.hot_decode)):.1f} % longer at a prefill "
            f"duty of 1 (by drafter kind and requests {', '.join(f'{r:g}' for r in target.hot_decode_reqs)}), "
            f"linear in the duty past {target.hot_duty0:g}")
    if projected_from:
        return {"decode_power_limit": {"kind": "projected", "detail": f"{what}: measured on {projected_from}, "
                                       "carried unchanged", "caveat": "decode steps' power-limit slowdown carried "
                                       f"unchanged from {projected_from}"}}
    return {"decode_power_limit": {"kind": "measured", "detail": f"{what}: decode steps timed after a second of "
                                   f"prompt (or mixed) steps against after a second idle on {base} GPUs, the mean over "
                                   f"them (profiles/{base}/raw/after_<model>.json, after_mixed_<model>.json)"}}


def _prompt_term(target, projected_from: str | None, base: str) -> dict:
    what = (f"the prompt share of a step's linear layers {100 * target.hot_ratio:.1f} % slower at a prefill "
            f"duty of 1, past {target.hot_duty0:g}, over {target.hot_window_s:g} s")
    if projected_from:
        return {"power_limit": {"kind": "projected", "detail": f"{what}: measured on {projected_from}, carried "
                                f"unchanged", "caveat": f"prompt steps' power-limit slowdown carried unchanged "
                                f"from {projected_from}"}}
    return {"power_limit": {"kind": "measured", "detail": f"{what}: prompt steps timed back to back against as "
                            f"profiled, and mixed steps after a second of their kind against after a second idle, on "
                            f"{base} GPUs, the mean over them (profiles/{base}/prefill_clocks.json, "
                            f"raw/after_mixed_<model>.json)"}}
