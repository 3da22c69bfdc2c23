"""When the arrivals reach the replicas, and the simpy events that takes.

One event per arrival (``exact``) lands simpy's clock on each arrival in turn, a timeout of
``arrival - now`` from the last landing. With skip-ahead, the requests that arrive while every
replica is inside a step (before the end it waits for, :attr:`Replica.busy_until_s`) are
released at once, each with the landing that timeout would give it: nothing else runs in
between, so the replicas see what one event per arrival shows them, and only the first
arrival at or after a replica's next event takes an event.
"""
from __future__ import annotations

import math

import simpy

from dspark_sim.serving.stretch import delay_to


class Release:
    """The arrival clock of one simulation: ``now_s``, the landing of the last arrival released."""

    def __init__(self, env: simpy.Environment, replicas, together: bool):
        self.env, self.replicas, self.together = env, replicas, together
        self.now_s = env.now
        self.busy_s = -math.inf  # every replica is inside a step until then (-inf: one may act now)
        self._passed: list[tuple[float, float]] = []  # (delay, landing) of those released since the last event

    def waited(self) -> None:
        """The process waited on something else (a client's free slot, the front end): the clock is simpy's."""
        self.now_s = self.env.now

    def reach(self, enter_s: float):
        """Take the clock to ``enter_s`` (a generator of the events that takes, none where it is
        past or the replicas cannot act before it)."""
        delay = enter_s - self.now_s
        if delay <= 0:
            return
        self.now_s += delay  # where simpy's clock lands after a timeout of delay
        self._passed.append((delay, self.now_s))
        if self.now_s < self.busy_s:
            return
        yield from land_on(self.env, self._passed)
        self._passed.clear()
        if self.together:
            self.busy_s = min(r.busy_until_s for r in self.replicas)


def land_on(env: simpy.Environment, passed: list[tuple[float, float]]):
    """Take simpy's clock to the last landing of ``passed`` (the (delay, landing) of each arrival
    since the clock's last event, each landing the one before plus its delay) exactly: in one
    timeout where one lands there, else through the latest landing one reaches, then delay by
    delay (a timeout from an earlier time may land an ulp off)."""
    start = len(passed) - 1
    while start >= 0 and env.now + delay_to(env.now, passed[start][1]) != passed[start][1]:
        start -= 1
    if start >= 0:
        yield env.timeout(delay_to(env.now, passed[start][1]))
    for delay, _ in passed[start + 1:]:
        yield env.timeout(delay)
