"""The engine's front-end process: request intake and output streaming on one server.

A production engine's API server takes in requests (HTTP, chat template, tokenizer) and, in
the same process, streams every request's output back (detokenizing, one message per request
per step that gave it tokens): vLLM's OpenAI server with its ``AsyncLLM`` output handler,
SGLang's tokenizer manager (docs/engine_defaults.md cites the released code). Both kinds of
work share the process, so while a large batch streams, requests wait longer to be taken in.

The model: one server per replica (a deployment's front ends pooled: service times divided by
its replicas) serves a request's intake in ``intake_s`` and each streamed message in
``stream_s``. Requests are taken in one at a time in arrival order; before each, the server
streams the messages of the steps that ended since it last took one in (FIFO), less what it
streamed while idle. Messages are counted when their step ends (replicas register them when
they plan it, with its end time), so step-by-step and skip-ahead runs count alike. Tokens
reach the scheduler's clock when their step ends: the streaming's own delay to the client is
not modelled.
"""
from __future__ import annotations

import numpy as np


class FrontEnd:
    """The front-end server a replica's requests pass (see the module docstring)."""

    def __init__(self, intake_s: float, stream_s: float, replicas: int = 1):
        self.intake_s = intake_s / replicas
        self.stream_s = stream_s / replicas
        self.free_s = 0.0  # when the intake in service ends
        self.closed = False  # every request is in: streaming delays no one any more
        self._pending: list[tuple[np.ndarray, np.ndarray]] = []  # (step end times, messages) not yet served

    @property
    def active(self) -> bool:
        return bool(self.intake_s or self.stream_s)

    def streamed(self, end_s, messages) -> None:
        """Steps ending at ``end_s`` (a time or an array of them) stream ``messages`` (as many)."""
        if self.stream_s and not self.closed:
            self._pending.append((np.atleast_1d(np.asarray(end_s, dtype=float)),
                                  np.atleast_1d(np.asarray(messages, dtype=np.int64))))

    def _served_messages(self, now_s: float) -> int:
        """Messages of steps ended by ``now_s`` not counted before (the rest stay pending)."""
        count, keep = 0, []
        for ends, msgs in self._pending:
            done = ends <= now_s
            count += int(msgs[done].sum())
            if not done.all():
                keep.append((ends[~done], msgs[~done]))
        self._pending = keep
        return count

    def take_in(self, now_s: float) -> float:
        """When a request that reached the front end at ``now_s`` (or waited for it until then)
        reaches the scheduler."""
        backlog = self.stream_s * self._served_messages(now_s) if self.stream_s else 0.0
        idle = max(0.0, now_s - self.free_s)
        self.free_s = max(now_s, self.free_s) + max(0.0, backlog - idle) + self.intake_s
        return self.free_s


__all__ = ["FrontEnd"]
