"""The random part of a segment of a drafting stretch (:mod:`.stretch`): K steps of the same
requests drawn, planned and accepted at once, and the step after a stretch drawn with it.

A segment takes the random words its K steps would draw one after another in one call, so the
stream stays that of step-by-step mode. An overlapping engine's step after a finish decodes
ghost rows beside the requests left (:mod:`.inflight`): that step is a segment's first, its
words and plan those of more rows than the steps after it (one draw, one acceptance call
still). The random stream runs in a cycle (PCG64): steps drawn and not taken go back by one
``advance``.
"""
from __future__ import annotations

import numpy as np

from dspark_sim.serving.inflight import Ghosts

PERIOD = 1 << 128  # of PCG64, numpy's default bit generator (a replica's)


class Draw:
    """The random part of K steps of R requests: verify lengths, budgets and accepted drafts. With
    ``ghosts``, the first step decodes the ghost rows beside the requests: their confidences are
    drawn and planned after the requests', as that step's decode rows (serving/inflight.py), and
    accept nothing; the steps after it draw for the R requests alone."""

    def __init__(self, rep, steps: int, n: int, block_size: int, difficulty, domain, ghosts: Ghosts | None = None):
        self.rep, self.steps = rep, steps
        acc, policy = rep.ctx.acceptance, rep.policy
        self.noise = noise = acc.step_words(n, block_size)
        self.per_step = noise + n * block_size
        self.head = 1 if ghosts else 0  # steps (the first) that draw for the ghost rows too
        if not ghosts:
            self.extra = 0
            words = rep.rng.bit_generator.random_raw(steps * self.per_step).reshape(steps, self.per_step)
            p_true, conf = acc.steps(difficulty, domain, block_size, words[:, :noise])
            self.verify_len, self.budget, self.state = policy.plan_segment(conf, steps, n)
            self.p_true, self.ghost_verify, uniforms = p_true, None, words[:, noise:]
        else:
            difficulty, domain = np.concatenate((difficulty, ghosts.difficulty)), np.concatenate((domain, ghosts.domain))
            head_noise = acc.step_words(n + len(ghosts), block_size)
            self.extra = head_noise - noise  # words the first step draws beyond a later one
            raw = rep.rng.bit_generator.random_raw(self.extra + steps * self.per_step)
            first, later = raw[:head_noise], raw[head_noise + n * block_size:].reshape(steps - 1, self.per_step)
            p_true, conf = acc.steps_after(difficulty, domain, block_size, first, later[:, :noise], n)
            self.head_state = policy.checkpoint()
            verify_len, self.budget, self.state = policy.plan_segment(conf[1:, :n], steps - 1, n, conf[0])
            self.p_true, self.verify_len = p_true[:, :n], verify_len[:, :n]
            self.ghost_verify = verify_len[:, n:].sum(axis=1)
            uniforms = np.concatenate((raw[None, head_noise:head_noise + n * block_size], later[:, noise:]))
        self.planned = policy.planned()
        self.accepted = acc.accept_words(self.p_true, self.verify_len - 1, uniforms)

    def words(self, steps: int) -> int:
        """Random words the first ``steps`` steps draw."""
        return steps * self.per_step + (self.extra if steps else 0)

    def keep(self, taken: int) -> None:
        """Only the first ``taken`` (at least one) steps run: the policy keeps their state, the random
        stream goes back to where they leave it (from where the draw left it)."""
        self.rep.policy.commit(taken - self.head)
        if taken < self.steps:  # PCG64 runs in a cycle of 2**128 words: this goes back
            self.rep.rng.bit_generator.advance(PERIOD - (self.steps - taken) * self.per_step)

    def rewind(self, taken: int) -> None:
        """The policy back to where the first ``taken`` steps leave it, from anywhere after the draw."""
        policy = self.rep.policy
        if taken < self.head:
            policy.restore(self.head_state)
        else:
            policy.restore(self.state)
            policy.commit(taken - self.head)


class Ahead:
    """The step right after a stretch, drawn and planned with its last segment: the replica's next
    step takes it instead of drawing it again where the same requests decode in it (mostly an
    arrival's prefill step), with the numbers step by step gives it."""

    def __init__(self, rids: np.ndarray, draw: Draw, row: int):
        self.rids, self.draw, self.row = rids, draw, row

    def fits(self, rids: np.ndarray) -> bool:
        """Whether the requests ``rids`` decode in that step, in this order."""
        return rids.size == self.rids.size and bool((rids == self.rids).all())

    def take(self, rep) -> tuple[np.ndarray, np.ndarray, int]:
        """(p_true [R, block_size], verify lengths [R], budget) of the step, which runs now: the
        policy keeps what planning it keeps, the stream passes the noise its draw takes."""
        d, k = self.draw, self.row
        rep.policy.take_planned(d.planned, k - d.head)
        rep.rng.bit_generator.advance(d.noise)
        return d.p_true[k], d.verify_len[k], int(d.budget[k])

    def accept(self, rep) -> np.ndarray:
        """Drafts each request accepts in the step (the stream passes the uniforms it takes)."""
        d, k = self.draw, self.row
        rep.rng.bit_generator.advance(d.per_step - d.noise)
        return d.accepted[k]
