"""Routers that spread arriving requests over replicas."""
from __future__ import annotations

from dspark_sim.serving.request import Request


class RoundRobin:
    """Replica i, i+1, ... in turn."""

    def __init__(self, replicas):
        self.replicas, self.next = replicas, 0

    def route(self, request: Request) -> None:
        self.replicas[self.next].submit(request)
        self.next = (self.next + 1) % len(self.replicas)


class LeastOutstanding:
    """The replica with the fewest waiting plus running requests (lowest index on ties)."""

    def __init__(self, replicas):
        self.replicas = replicas

    def route(self, request: Request) -> None:
        min(self.replicas, key=lambda r: r.outstanding).submit(request)


class CacheAware:
    """SGLang's model gateway ``cache_aware`` policy, reading the replicas' own prefix caches.

    While the replicas' loads (waiting plus running requests) are imbalanced, both
    ``max - min > BALANCE_ABS`` and ``max > BALANCE_REL * min``, the least loaded replica
    takes the request. Otherwise the replica holding the longest cached prefix of its prompt
    takes it when that covers more than ``THRESHOLD`` of the prompt; else the replica with the
    fewest cached tokens (the most room). Ties go to the less loaded, then the lower index.
    The defaults are the gateway's (``sglang_router`` ``RouterArgs``: 0.3, 64, 1.5); the
    gateway matches against its own approximate tree of what it routed, or against the
    workers' KV events, the exact state used here.
    """

    THRESHOLD, BALANCE_ABS, BALANCE_REL = 0.3, 64, 1.5

    def __init__(self, replicas):
        self.replicas = replicas

    def route(self, request: Request) -> None:
        loads = [r.outstanding for r in self.replicas]
        lo, hi = min(loads), max(loads)
        order = range(len(self.replicas))
        if hi - lo > self.BALANCE_ABS and hi > self.BALANCE_REL * lo:
            self.replicas[min(order, key=lambda i: (loads[i], i))].submit(request)
            return
        ids = request.hash_ids
        caches = [r.prefix for r in self.replicas]
        matched = [c.matched_tokens(ids) if ids else 0 for c in caches]
        best = min(order, key=lambda i: (-matched[i], loads[i], i))
        if matched[best] <= self.THRESHOLD * request.prompt_tokens:
            size = [c.tree_tokens for c in caches]
            best = min(order, key=lambda i: (size[i], loads[i], i))
        self.replicas[best].submit(request)


def make_router(name: str, replicas):
    """Router by scenario name (``round_robin``, ``least_outstanding`` or ``cache_aware``)."""
    return {"round_robin": RoundRobin, "least_outstanding": LeastOutstanding,
            "cache_aware": CacheAware}[name](replicas)
