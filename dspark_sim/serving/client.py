"""A benchmark client that keeps at most a fixed number of requests in flight.

``workload.max_concurrency`` models the clients the engines' published runs use
(``sglang.bench_serving --max-concurrency``, ``vllm bench serve --max-concurrency``): each
request is sent at its own arrival time (all at once without a rate) or, when that many are in
flight, as soon as one of them is done. A request's TTFT then runs from when it was sent, as the
client measures it. A request is done when it finishes or is rejected; the client counts its
finish when the engine's last step for it ends (the streaming of that last message, a fraction
of a millisecond, is not waited for).

While the client holds a request back, any step's end may free a slot: the replicas then run
step by step (the arrival process sets the next arrival to now, which no stretch of steps may
pass), so the skip-ahead and step-by-step runs stay the same.
"""
from __future__ import annotations

import simpy


class ClosedLoop:
    """The in-flight count of a client limited to ``limit`` requests (see the module docstring)."""

    def __init__(self, env: simpy.Environment, limit: int):
        self.env, self.limit = env, limit
        self.in_flight = 0
        self.sent_s = 0.0  # when the last request was sent
        self._freed = env.event()
        self._waited = False

    @property
    def full(self) -> bool:
        return self.in_flight >= self.limit

    def sent(self, arrival_s: float) -> float:
        """Send the next request, due at ``arrival_s``: when it is due, or when the one before it
        was sent (the client sends in order) or, after a wait for a free slot, now. Its send time."""
        self.in_flight += 1
        if self._waited:
            self.sent_s = max(self.sent_s, self.env.now)
            self._waited = False
        self.sent_s = max(self.sent_s, arrival_s)
        return self.sent_s

    def done(self, count: int) -> None:
        """``count`` requests finished or were rejected: their slots are free again."""
        self.in_flight -= count
        if not self._freed.triggered:
            self._freed.succeed()

    def freed(self) -> simpy.Event:
        """An event that fires when a request in flight is done."""
        self._waited = True
        if self._freed.triggered:
            self._freed = self.env.event()
        return self._freed


__all__ = ["ClosedLoop"]
