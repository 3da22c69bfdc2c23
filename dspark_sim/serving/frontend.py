"""The engine's front-end process: request intake and output streaming on one server.

A production engine's API server takes in requests (HTTP, chat template, tokenizer) and, in
the same process, streams every request's output back (detokenizing, one message per request
per step that gave it tokens): vLLM's OpenAI server with its ``AsyncLLM`` output handler,
SGLang's tokenizer manager, trtllm-serve's chat stream generators (docs/engine_defaults.md
cites the released code). Both kinds of work share one event loop, so a request waits behind
the streaming of the steps before it to be taken in, and a step's tokens wait behind the
intake of the requests that came before they were ready, and behind the steps before them,
to reach the client.

The model: one server per replica (a deployment's front ends pooled: service times divided by
its replicas, and by the front-end processes each replica runs, ``processes``) serving, first
come first served, a request's intake (``intake_s``, from its arrival) and each step's streamed
messages (``stream_s`` each, from the step's end); at equal times a step's messages go first,
then steps by replica. An engine that takes requests in off its streaming loop (``shared``
False: vLLM tokenizes on its renderer's worker thread) runs the intake on a server of its own,
first come first served among requests, beside the streaming rather than queued with it. A request reaches the scheduler when
its intake ends (:meth:`FrontEnd.take_in`); a step's tokens reach the client when its messages
are done (:meth:`FrontEnd.delivered`), never before the step ends.

Replicas register a step's messages when they plan it, with its end time, so step-by-step and
skip-ahead runs register alike. The queue is worked out up to a request's arrival when it is
taken in: every step that ended by then is registered, and nothing after it can change the
intakes and deliveries before it. The deliveries of the steps after the last arrival are
worked out when the run ends (:meth:`FrontEnd.settle`); the run's record waits for them
(:class:`~dspark_sim.metrics.collector.Collector`). Each stretch of work between two
arrivals is worked out in one vectorised pass; the stretches are the same in both modes, so
their numbers are too.
"""
from __future__ import annotations

import math

import numpy as np

from dspark_sim.metrics.columns import Growing


class FrontEnd:
    """The front-end server a replica's requests and tokens pass (see the module docstring)."""

    def __init__(self, intake_s: float, stream_s: float, replicas: int = 1, *, processes: int = 1,
                 shared: bool = True):
        self.intake_s = intake_s / (replicas * processes)
        self.stream_s = stream_s / (replicas * processes)
        self.shared = shared
        self.free_s = 0.0  # when the work worked out so far ends
        self.intake_free_s = 0.0  # when the intake server is free (not shared)
        self.settled_s = -math.inf  # every step ending by then has its delivery
        self._pending: list[tuple[np.ndarray, np.ndarray, int]] = []  # (step ends, messages, replica)
        self._next_end_s = math.inf  # the earliest step end pending
        # per replica: the step ends worked out, in order, and when their tokens reach the client
        self._steps = [Growing({"end": float, "delivered": float}) for _ in range(replicas)]

    @property
    def active(self) -> bool:
        return bool(self.intake_s or self.stream_s)

    def streamed(self, end_s, messages, replica: int = 0) -> None:
        """Steps of ``replica`` ending at ``end_s`` (a time, or an array of them in order) stream
        ``messages`` (a count, or an array of as many)."""
        ends = np.atleast_1d(np.asarray(end_s, dtype=float))
        self._pending.append((ends, np.atleast_1d(np.asarray(messages, dtype=np.int64)), replica))
        self._next_end_s = min(self._next_end_s, float(ends[0]))

    def take_in(self, arrival_s: float) -> float:
        """When a request that reached the front end at ``arrival_s`` (requests come in arrival
        order) reaches the scheduler: after the steps that ended by then have streamed."""
        self.settle(arrival_s)
        if not self.shared:  # its own server, beside the streaming
            self.intake_free_s = max(arrival_s, self.intake_free_s) + self.intake_s
            return self.intake_free_s
        self.free_s = max(arrival_s, self.free_s) + self.intake_s
        return self.free_s

    def settle(self, until_s: float = math.inf) -> None:
        """Work out the deliveries of the steps that end by ``until_s`` (no request arrives
        before it that has not been taken in)."""
        self.settled_s = max(self.settled_s, until_s)
        if until_s < self._next_end_s or not self._pending:  # no step ends by then
            return
        pending, self._pending = self._pending, []
        parts = []
        for e, m, r in pending:  # each block's ends are in order: split it where until_s falls
            cut = int(np.searchsorted(e, until_s, side="right"))
            if cut:
                parts.append((e[:cut], m[:cut], r))
            if cut < e.size:
                self._pending.append((e[cut:], m[cut:], r))
        self._next_end_s = min((float(e[0]) for e, _, _ in self._pending), default=math.inf)
        if len(parts) == 1:
            ends, msgs, r = parts[0]
            reps = np.full(ends.size, r, dtype=np.int64)
        else:
            ends = np.concatenate([e for e, _, _ in parts])
            msgs = np.concatenate([m for _, m, _ in parts])
            reps = np.concatenate([np.full(e.size, r, dtype=np.int64) for e, _, r in parts])
        order = np.lexsort((reps, ends))  # by end time, then replica (stable: then registration)
        ends, service = ends[order], msgs[order] * self.stream_s
        # first come first served from free_s: job j ends at max(t_i + s_i + ... + s_j, free_s + s_1 + ... + s_j)
        done = np.cumsum(service)
        before = done - service
        done += np.maximum(self.free_s, np.maximum.accumulate(ends - before))
        np.maximum(done, ends, out=done)  # never before the step ends (a rounding could say so)
        self.free_s = float(done[-1]) if done.size else self.free_s
        reps = reps[order]
        for r in np.unique(reps).tolist():
            mine = reps == r
            self._steps[r].extend(end=ends[mine], delivered=done[mine])

    def delivered(self, replica: int, end_s):
        """When the tokens of ``replica``'s steps ending at ``end_s`` (a time or an array of
        them, each a step that streamed, worked out by :meth:`settle`) reach the client."""
        ends, times = self._steps[replica]["end"], self._steps[replica]["delivered"]
        if not isinstance(end_s, np.ndarray):
            i = int(ends.searchsorted(end_s))
            if i == ends.size or ends[i] != end_s:
                raise KeyError(f"replica {replica}: no streamed step ends at {end_s}")
            return float(times[i])
        at = ends.searchsorted(end_s)
        np.minimum(at, ends.size - 1, out=at)
        if not (ends[at] == end_s).all():
            raise KeyError(f"replica {replica}: a time in {end_s} is no streamed step's end")
        return times[at]


__all__ = ["FrontEnd"]
