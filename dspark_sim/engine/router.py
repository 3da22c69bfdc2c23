"""Routers that spread arriving requests over replicas."""
from __future__ import annotations


class RoundRobin:
    """Replica i, i+1, ... in turn."""

    def __init__(self, replicas):
        self.replicas, self.next = replicas, 0

    def route(self, request: dict) -> None:
        self.replicas[self.next].submit(request)
        self.next = (self.next + 1) % len(self.replicas)


class LeastOutstanding:
    """The replica with the fewest waiting plus running requests (lowest index on ties)."""

    def __init__(self, replicas):
        self.replicas = replicas

    def route(self, request: dict) -> None:
        min(self.replicas, key=lambda r: r.outstanding).submit(request)


def make_router(name: str, replicas):
    """Router by scenario name (``round_robin`` or ``least_outstanding``)."""
    return {"round_robin": RoundRobin, "least_outstanding": LeastOutstanding}[name](replicas)
