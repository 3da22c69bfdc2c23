"""What the step in flight still holds while an overlapping engine plans the next one.

An engine that overlaps its steps (the decoder's serving loop, SGLang's overlap scheduler,
vLLM's asynchronous scheduling) plans step n+1 while step n runs, from the state step n-1
left: it reads which requests step n finished only after launching step n+1. Two things
follow, both seen step by step when the decoder's own loop and the simulator serve the same
arrivals at the same step prices (:mod:`dspark_sim.validation.lockstep`, docs/validation.md):

- a request that step n finished keeps its place among the running requests, and its KV,
  through the plan of step n+1: a waiting request takes the place in step n+2, not n+1;
- a request the plan could not know was finishing (it had two or more tokens left when step
  n was planned, and step n's drafts may or may not have taken them all) is decoded again in
  step n+1, a row whose tokens are dropped: its drafts and verify tokens cost, it emits nothing.

A request that surely finishes in step n (one token left) is left out of step n+1's plan, as
the decoder's scheduler leaves it out (``Sequence.pending_min``). An engine that waits for each
step before planning the next holds nothing (:class:`Landed`).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dspark_sim.serving.batch import TableColumns


@dataclass(frozen=True, slots=True)
class Ghosts:
    """Requests that the step in flight finished without the next plan knowing: their KV tokens,
    difficulty and domain (the acceptance model draws their drafts' confidences), ``[G]`` each."""

    kv_tokens: np.ndarray
    difficulty: np.ndarray
    domain: np.ndarray

    def __len__(self) -> int:
        return self.kv_tokens.size


class InFlight:
    """The places, KV and ghost rows the step in flight holds (see the module docstring)."""

    overlapped = True

    def __init__(self):
        self.slots = self.kv_tokens = 0
        self.ghosts: Ghosts | None = None

    def retired(self, count: int, kv_tokens: int) -> None:
        """Requests that the step just ended finished: held through the next plan."""
        self.slots += count
        self.kv_tokens += kv_tokens

    def planned(self) -> None:
        """The next step is planned: what the step before it held is free for the plan after it."""
        self.slots = self.kv_tokens = 0

    def finished(self, cols: TableColumns, rows: np.ndarray, left_before: np.ndarray, kv_tokens: np.ndarray) -> None:
        """Requests ``rows`` (indices into the running table's columns ``cols``) finished in the
        step just ended, having had ``left_before`` tokens left when it was planned and holding
        ``kv_tokens``: those with two or more left are decoded again in the next step."""
        unsure = left_before >= 2
        if unsure.any():
            rows = rows[unsure]
            self.ghosts = Ghosts(kv_tokens[unsure], cols.difficulty[rows], cols.domain[rows])  # (copies: rows indexes)

    def take_ghosts(self) -> Ghosts | None:
        """The ghost rows of the step being planned, once (a later step does not see them)."""
        ghosts, self.ghosts = self.ghosts, None
        return ghosts


class Landed(InFlight):
    """An engine that reads each step before planning the next: it holds nothing."""

    overlapped = False

    def retired(self, count: int, kv_tokens: int) -> None:
        pass

    def finished(self, cols: TableColumns, rows: np.ndarray, left_before: np.ndarray, kv_tokens: np.ndarray) -> None:
        pass


def in_flight(overlap: bool) -> InFlight:
    """What a replica's steps hold while the next is planned: :class:`InFlight` for an
    overlapping engine, else :class:`Landed`."""
    return InFlight() if overlap else Landed()


@dataclass(frozen=True, slots=True)
class DecodeRows:
    """A step's decode rows, its decoding requests then the ghosts beside them: how many, the
    drafts a row gets, the verify tokens of all, the decoding requests' ``p_true [R, drafts]`` and
    ``verify_len [R]`` (None without drafts), the DSpark budget, the KV tokens of every row."""

    count: int
    drafts: int
    verify_tokens: int
    p_true: np.ndarray | None
    verify_len: np.ndarray | None
    budget: int
    kv_tokens: np.ndarray


def decode_rows(rep, cols: TableColumns, dec, kv_tokens: np.ndarray, ghosts: Ghosts | None) -> DecodeRows:
    """The decode rows of replica ``rep``'s step: the running requests ``dec`` (indices or a slice
    into ``cols``, holding ``kv_tokens``) and ``ghosts`` (None: none). The drafts' confidences
    of all are drawn together (a DSpark budget counts the ghosts), the tokens of the ghosts dropped."""
    num_dec = kv_tokens.size
    if ghosts:
        kv_tokens = np.concatenate((kv_tokens, ghosts.kv_tokens))
    count = kv_tokens.size
    drafts = rep.policy.block_size_for(count) if num_dec else 0
    if not drafts:
        return DecodeRows(count, 0, count, None, None, 0, kv_tokens)
    difficulty, domain = cols.difficulty[dec], cols.domain[dec]
    if ghosts:
        difficulty, domain = np.concatenate((difficulty, ghosts.difficulty)), np.concatenate((domain, ghosts.domain))
    p_true, conf = rep.ctx.acceptance.step(difficulty, domain, drafts, rep.rng)
    verify_len, budget = rep.policy.plan(conf, count)
    return DecodeRows(count, drafts, int(verify_len.sum()), p_true[:num_dec], verify_len[:num_dec], budget, kv_tokens)


def planned_rows(rep, cols: TableColumns, dec, num_dec: int, kv_tokens: np.ndarray, ghosts: Ghosts | None, ahead):
    """``(the decode rows of replica rep's step, the drawn step it took or None)``: ``ahead``, the
    step drawn with the stretch before (:class:`~dspark_sim.serving.draw.Ahead`), where the same
    requests decode in it and no ghost row joins them; else :func:`decode_rows` draws them now.
    ``cols``: the running table's columns (``rid``, ``difficulty`` and ``domain`` read)."""
    drafts = rep.policy.block_size_for(num_dec) if num_dec else 0
    if drafts and not ghosts and ahead is not None and ahead.fits(cols.rid[dec]):
        p_true, verify_len, budget = ahead.take(rep)
        return DecodeRows(num_dec, drafts, int(verify_len.sum()), p_true, verify_len, budget, kv_tokens), ahead
    return decode_rows(rep, cols, dec, kv_tokens, ghosts if num_dec else None), None
