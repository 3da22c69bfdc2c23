"""Serving replay with the whole block verified: what Table 1 measures, through the model's own sampler."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dspark_sim.acceptance.model import AcceptanceModel


@dataclass(frozen=True, slots=True)
class StepLog:
    """One row per request-step: request id, domain index [S]; confidences [S, block_size]; accepted drafts [S]."""

    request: np.ndarray
    domain: np.ndarray
    conf: np.ndarray
    accepted: np.ndarray

    def accept_len(self, domain: int | None = None) -> float:
        """Mean accepted length per step, bonus token included (all domains if None)."""
        rows = self.accepted if domain is None else self.accepted[self.domain == domain]
        return 1.0 + float(rows.mean())


def serve_full_blocks(model: AcceptanceModel, domain_idx: np.ndarray, output_tokens: int, block_size: int,
                      rng: np.random.Generator) -> StepLog:
    """Run every request until it has ``output_tokens`` tokens, verifying the whole block each step.

    Requests that accept less need more steps, so the log is step-weighted the
    way an engine's log (and the paper's accepted length per round) is.
    """
    domain_idx = np.asarray(domain_idx)
    difficulty = model.new_requests(domain_idx, rng)
    generated = np.zeros(len(domain_idx), dtype=np.int64)
    active = np.arange(len(domain_idx))
    parts = []
    while active.size:
        p_true, conf = model.step(difficulty[active], domain_idx[active], block_size, rng)
        accepted = model.accept(p_true, block_size, rng)
        parts.append((active, conf, accepted))
        generated[active] += accepted + 1
        active = active[generated[active] < output_tokens]
    request = np.concatenate([a for a, _, _ in parts])
    return StepLog(request, domain_idx[request], np.concatenate([c for _, c, _ in parts]),
                   np.concatenate([n for _, _, n in parts]))
