"""Speculation policies: how many drafts each running request verifies this step.

Each policy maps the confidences the drafter reports (or nothing) to verify
lengths that count the anchor, so ``sum(verify_len)`` is the verify tokens of
the step. The engine draws true acceptance separately; policies never see it.
:meth:`Policy.plan_many` plans K steps of the same requests at once (what
:meth:`Policy.plan` would give step after step), and :meth:`Policy.commit` then
keeps what the steps taken leave for later ones (the production scheduler's lag).
"""
from __future__ import annotations

from collections import deque

import numpy as np

from dspark_sim.scenario import Speculation
from dspark_sim.speculation import dspark
from dspark_sim.speculation.dspark import SpsFn, VerifyLimits


class Policy:
    """Base: no speculation. Subclasses override :meth:`plan`."""

    def __init__(self, spec: Speculation):
        self.spec = spec
        self.draft_kind = spec.draft_kind
        self.block_size = spec.block_size if spec.method != "none" else 0

    def block_size_for(self, num_reqs: int) -> int:
        """Drafts produced per request this step (the drafter's work)."""
        return self.block_size

    def plan(self, conf: np.ndarray | None, num_reqs: int) -> tuple[np.ndarray, int]:
        """Verify lengths [R] (anchor counted) and the budget K (extra tokens)."""
        return np.ones(num_reqs, dtype=np.int64), 0

    def plan_many(self, conf: np.ndarray | None, steps: int, num_reqs: int) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`plan` of ``steps`` steps of the same R requests (conf [K, R, block_size] or None):
        verify lengths int64 [K, R] and budgets int64 [K], step k's what the k-th :meth:`plan`
        call would return. Changes nothing: :meth:`commit` says how many steps were taken."""
        verify_len, budget = self.plan(None, num_reqs)
        return np.broadcast_to(verify_len, (steps, num_reqs)), np.full(steps, budget, dtype=np.int64)

    def plan_segment(self, conf: np.ndarray, steps: int, num_reqs: int,
                     head: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, object]:
        """:meth:`plan_many` and the :meth:`checkpoint` after it, from which :meth:`commit` keeps the
        steps taken. One step is planned by :meth:`plan`, as step by step (cheaper), which keeps
        the step at once: the checkpoint is taken before it. ``head``: the confidences
        [R', block_size] of a step before these, of R' rows (an overlapping engine's ghost rows'
        step: the R requests' rows first), planned and kept by :meth:`plan` before them; then the
        verify lengths are [1 + steps, R'] (0 past R after the first) and the budgets [1 + steps],
        and the checkpoint, after the head, counts the steps after it."""
        if head is not None:
            verify0, budget0 = self.plan(head, head.shape[0])
            verify_len = np.zeros((1 + steps, head.shape[0]), dtype=np.int64)
            verify_len[0] = verify0
            budget = np.empty(1 + steps, dtype=np.int64)
            budget[0] = budget0
            if steps:  # (by plan_many even for one step: the step after a stretch may take its plan)
                verify_len[1:, :num_reqs], budget[1:] = self.plan_many(conf, steps, num_reqs)
            return verify_len, budget, self.checkpoint()
        if steps > 1:
            verify_len, budget = self.plan_many(conf, steps, num_reqs)
            return verify_len, budget, self.checkpoint()
        state = self.checkpoint()
        verify_len, budget = self.plan(conf[0], num_reqs)
        return verify_len[None], np.array([budget], dtype=np.int64), state

    def commit(self, taken: int) -> None:
        """The first ``taken`` steps of the last :meth:`plan_many` ran (state for later steps)."""

    def checkpoint(self):
        """The state :meth:`commit` reads and changes, for :meth:`restore` (None: none)."""
        return None

    def planned(self):
        """What the last :meth:`plan_many` left for :meth:`commit` (None: nothing), for
        :meth:`take_planned`."""
        return None

    def take_planned(self, planned, k: int) -> None:
        """Step ``k`` of the :meth:`plan_many` that left ``planned`` runs now, right after the
        steps committed (a step a stretch drew past its end): keep what :meth:`plan` of it keeps."""

    def restore(self, state) -> None:
        """Back to a :meth:`checkpoint` (taken after a :meth:`plan_many`, before its commit, or
        before the :meth:`plan` of a one-step segment, :meth:`plan_segment`)."""


class StaticPolicy(Policy):
    """Verify every draft every step (MTP-k, EAGLE or DFlash chains)."""

    def plan(self, conf, num_reqs):
        k = min(self.block_size, self.spec.verify_cap - 1)
        return np.full(num_reqs, 1 + k, dtype=np.int64), k * num_reqs


class SchedulePolicy(Policy):
    """The block size by batch-size range (SGLang --speculative-adaptive, TRT-LLM draft_len_schedule)."""

    def block_size_for(self, num_reqs):
        for rule in self.spec.schedule:
            if rule.max_batch_size is None or num_reqs <= rule.max_batch_size:
                return rule.block_size
        return 0

    def plan(self, conf, num_reqs):
        k = self.block_size_for(num_reqs)
        return np.full(num_reqs, 1 + k, dtype=np.int64), k * num_reqs


class ThresholdPolicy(Policy):
    """Verify while prefix survival >= threshold, within min/max verify length."""

    def plan(self, conf, num_reqs):
        drafts = self._drafts(conf)
        return 1 + drafts, int(drafts.sum())

    def plan_many(self, conf, steps, num_reqs):
        drafts = self._drafts(conf)
        return 1 + drafts, drafts.sum(axis=-1)

    def _drafts(self, conf: np.ndarray) -> np.ndarray:
        spec = self.spec
        drafts = (dspark.survival_of(conf) >= spec.threshold).sum(axis=-1)
        return np.clip(drafts, spec.min_verify_len - 1, spec.verify_cap - 1)


class DSparkPolicy(Policy):
    """DSpark's confidence scheduler: Algorithm 1 or the production variant."""

    def __init__(self, spec: Speculation, sps: SpsFn, max_batch_tokens: int):
        super().__init__(spec)
        self.sps = dspark.SpsRows(sps, max_batch_tokens)
        self.limits = VerifyLimits(spec.min_verify_len - 1, spec.verify_cap - 1,
                                   spec.survival_eps, max_batch_tokens)
        self._lagged: deque[dspark.Candidates] = deque(maxlen=spec.lag_steps)
        # beside each lagged step: (requests, its own budget) where a stretch computed it
        self._lagged_best: deque[tuple[int, int] | None] = deque(maxlen=spec.lag_steps)
        self._ranked: dspark.Ranked | None = None
        self._best: np.ndarray | None = None

    @property
    def _tiers(self) -> tuple[int, ...]:
        return self.spec.graph_tiers if self.spec.pad_to_graph_tier else ()

    def plan(self, conf, num_reqs):
        survival = dspark.survival_of(conf)
        if self.spec.scheduler == "algorithm1":
            return dspark.algorithm1(survival, self.sps, self.limits)
        # the budget comes from confidences lag_steps steps ago (fewer while warming up)
        lagged = self._lagged[0] if self._lagged else None
        cands = dspark.candidates(survival, self.limits)
        if self.spec.lag_steps:
            self._lagged.append(cands)
            self._lagged_best.append(None)
        return dspark.production(cands, lagged, self.sps, self.limits, self._tiers)

    def plan_many(self, conf, steps, num_reqs):
        survival = dspark.survival_of(conf)
        if self.spec.scheduler == "algorithm1":
            return dspark.algorithm1_many(survival, self.sps, self.limits)
        # The lag does not forbid planning ahead: confidences never depend on acceptance, so
        # step k's budget reads the candidates of step k - lag_steps, drawn in this same call
        # (or kept from before it).
        self._ranked = dspark.ranked(survival, self.limits)
        verify_len, budget, self._best = dspark.production_many(
            self._ranked, list(self._lagged), self.spec.lag_steps, self.sps, self.limits, self._tiers,
            list(self._lagged_best))
        return verify_len, budget

    def commit(self, taken):
        if self._ranked is not None and self.spec.lag_steps:
            num_reqs = self._ranked.forced_reqs.size
            for k in range(max(0, taken - self.spec.lag_steps), taken):
                self._lagged.append(self._ranked.at(k))
                self._lagged_best.append((num_reqs, int(self._best[k])))
        self._ranked = self._best = None

    def checkpoint(self):
        return tuple(self._lagged), tuple(self._lagged_best), self._ranked, self._best

    def planned(self):
        return self._ranked, self._best

    def take_planned(self, planned, k):
        ranked, best = planned
        if ranked is not None and self.spec.lag_steps:
            self._lagged.append(ranked.at(k))
            self._lagged_best.append((ranked.forced_reqs.size, int(best[k])))

    def restore(self, state) -> None:
        lagged, lagged_best, self._ranked, self._best = state
        self._lagged = deque(lagged, maxlen=self.spec.lag_steps)
        self._lagged_best = deque(lagged_best, maxlen=self.spec.lag_steps)


def make_policy(spec: Speculation, sps: SpsFn | None, max_batch_tokens: int) -> Policy:
    """The policy object for ``spec.method``."""
    if spec.method == "none":
        return Policy(spec)
    if spec.method == "static":
        return StaticPolicy(spec)
    if spec.method == "schedule":
        return SchedulePolicy(spec)
    if spec.method == "threshold":
        return ThresholdPolicy(spec)
    if spec.method == "dspark":
        return DSparkPolicy(spec, sps, max_batch_tokens)
    raise ValueError(f"unknown speculation method {spec.method!r}")
