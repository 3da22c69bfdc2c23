"""When the overlapped loop's host plans a step and reads a step's tokens.

The decoder's loop (``kernels/decoder/engine.py`` ``serve``) plans step n+1, launches it, and
only then reads step n's tokens; once it has read them it plans step n+2. Launching an eager
step (prompt chunks past the CUDA graphs' tokens, kernel by kernel) takes the host tens of
milliseconds. With ``P(n)`` the time step n is planned, ``L(n)`` its launch and ``E(n)`` its
end on the GPU:

    plan of step n+1 = read of step n-1 = max(E(n-1), min(P(n) + L(n), E(n)))

A request that arrives while the host launches step n joins step n+1, and a token of step n-1
reaches its request only once step n is launched. The GPU runs an eager step's kernels as the
host launches them, so the launch ends no later than the step (the decoder's records show no
idle GPU after short eager steps): the steps keep their GPU times. :class:`Launches` keeps that
timeline for a replica.

The eager launch is the profile's (``TargetFit.launch_eager_s``, the median of the mixed-step
probe's eager steps). A step replayed from CUDA graphs launches in a few milliseconds, less than
any step it follows: that launch is left out, so a plan after a graph step is taken at the step's start and a token read
after it at its step's end, as without the term (which also keeps skip-ahead's decode stretches
exact). A cost model without the term, or a loop that does not overlap, plans at each step's
start and reads a token at its step's end everywhere.
"""
from __future__ import annotations

import numpy as np


class Launches:
    """One replica's host timeline of plans and reads (see the module docstring)."""

    def __init__(self, cost, overlap: bool):
        self.launch_s = getattr(cost, "launch_s", None) if overlap else None
        self.fresh: np.ndarray | None = None  # the request ids whose first token the last step gave

    def plan(self, plan_s: float, start_s: float, end_s: float, work) -> float:
        """When the step after the one from ``start_s`` to ``end_s`` (``work``, planned at ``plan_s``)
        is planned: once this one is launched, and the one before it has ended."""
        if self.launch_s is None:
            return start_s
        return max(start_s, min(plan_s + self.launch_s(work), end_s))

    def first_tokens(self, rids: np.ndarray) -> None:
        """The step that ended gave these requests their first token."""
        if self.launch_s is not None and rids.size:
            self.fresh = rids.copy()

    def read(self, running, at_s: float) -> None:
        """The host reads the tokens of the step that ended last at ``at_s``: the requests it gave
        a first token (those still running) get it then."""
        fresh, self.fresh = self.fresh, None
        if fresh is None:
            return
        c, n = running.cols, running.n
        if not n:
            return
        rid = c.rid[:n]
        # rows hold their requests in admission order, mostly that of their ids: a binary search
        # finds each fresh id's row (ids are unique, so a match is its row), else one comparison
        # with every row does (np.isin costs more on a few ids)
        rows = np.minimum(rid.searchsorted(fresh), n - 1)
        if not (rid.take(rows) == fresh).all():
            rows = np.flatnonzero((rid == fresh[:, None]).any(axis=0))
        if rows.size:
            c.first_token_s[rows] = np.maximum(c.first_token_s[rows], at_s)

    def idle(self) -> None:
        """The loop went idle: the last step's tokens were read at its end."""
        self.fresh = None
