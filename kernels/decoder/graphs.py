"""CUDA graphs at padded tiers, captured on first use and replayed after.

A step function whose shapes depend only on its tier (its key) is captured once
per key with private copies of its inputs; later calls copy their inputs into
those copies and replay. All graphs share one memory pool: replays never
overlap, and every graph keeps its outputs alive so no later capture reuses them.
"""
from __future__ import annotations

import torch

from dspark_sim.kernels.decoder.batch import Batch


# Verify token tiers: (up to this many tokens, pad to a multiple of this), then one step above.
TOKEN_TIERS = ((8, 1), (64, 8), (256, 32))
TOKEN_STEP_ABOVE = 128


def token_tier(n: int) -> int:
    """Padded token count for ``n`` tokens: exact to 8, then steps of 8, 32, 128."""
    for limit, step in TOKEN_TIERS:
        if n <= limit:
            return -(-n // step) * step
    return -(-n // TOKEN_STEP_ABOVE) * TOKEN_STEP_ABOVE


def request_tier(n: int, cap: int) -> int:
    """Padded request count: the next power of two, at most ``cap`` (then exact)."""
    p = 1
    while p < n:
        p *= 2
    return min(p, max(cap, n))


def _clone(x):
    if isinstance(x, torch.Tensor):
        return x.clone()
    if isinstance(x, Batch):
        fields = {k: getattr(x, k).clone() for k in ("input_ids", "positions", "token_rows",
                                                      "rows", "q_start", "q_len", "kv_len")}
        return Batch(**fields, page_table=x.page_table, page_size=x.page_size)
    if isinstance(x, (list, tuple)):
        return type(x)(_clone(v) for v in x)
    return x


def _copy(dst, src) -> None:
    if isinstance(dst, torch.Tensor):
        dst.copy_(src, non_blocking=True)
    elif isinstance(dst, Batch):
        dst.copy_(src)
    elif isinstance(dst, (list, tuple)):
        for d, s in zip(dst, src):
            _copy(d, s)


class Graphs:
    """Run ``fn(*args)`` through a CUDA graph per ``key`` (eagerly when disabled)."""

    def __init__(self, enabled: bool):
        self.enabled = enabled and torch.cuda.is_available()
        self.pool = torch.cuda.graph_pool_handle() if self.enabled else None
        self.entries: dict = {}
        self.last = None  # (fn, args) of the latest call, eager; the entry, with graphs
        self.captures = 0  # graphs captured so far, recaptures after a clear() included

    def __call__(self, key, fn, *args):
        if not self.enabled:
            self.last = (fn, args)
            return fn(*args)
        entry = self.entries.get(key)
        if entry is None:
            try:
                entry = self._capture(fn, args)
            except torch.OutOfMemoryError:
                # every graph keeps its outputs: when they fill the memory left beside the KV
                # cache, drop them all (the working set is recaptured on use) and retry once
                self.clear()
                torch.cuda.empty_cache()
                entry = self._capture(fn, args)
            self.entries[key] = entry
        graph, static, out = self.last = entry
        _copy(static, args)
        graph.replay()
        return out

    def replay_last(self) -> None:
        """Run the latest call again on the same inputs (profiling)."""
        if self.enabled:
            self.last[0].replay()
        else:
            self.last[0](*self.last[1])

    def clear(self) -> None:
        """Drop every captured graph (their pool memory returns to the allocator)."""
        self.entries.clear()
        self.last = None
        if self.enabled:  # a pool whose graphs are all gone cannot take a new capture
            torch.cuda.synchronize()
            self.pool = torch.cuda.graph_pool_handle()

    def _capture(self, fn, args):
        self.captures += 1
        static = _clone(args)
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            fn(*static)  # compiles Triton kernels and warms cuBLAS outside the capture
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool):
            out = fn(*static)
        return graph, static, out
