"""Median step time of a callable: device events per call, one sync at the end."""
from __future__ import annotations

import statistics
import time

import torch


def median_seconds(fn, reps: int, warmup: int = 2, between=None) -> float:
    """Median seconds of ``fn()`` over ``reps`` calls after ``warmup`` calls.

    ``between(i)`` runs before call ``i``, outside the timed region (input rotation).
    """
    for i in range(warmup):
        if between:
            between(i)
        fn()
    if not torch.cuda.is_available():
        times = []
        for i in range(reps):
            if between:
                between(i)
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return statistics.median(times)
    events = []
    for i in range(reps):
        if between:
            between(i)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        events.append((start, end))
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in events) / 1e3
