"""Synthetic acceptance for timing random-weight models (SGLang's
``SGLANG_SIMULATE_ACC_LEN``, vLLM's ``rejection_sample_method: synthetic``).

Confidences and accept decisions come from the simulator's acceptance model, so
the decoder's step sizes follow a real drafter's while its kernels run at the
real model's shapes. Tokens still flow through the real kernels.
"""
from __future__ import annotations

import numpy as np


class Synthetic:
    """Per-request difficulty, per-step ``(p_true, conf)`` and accept counts."""

    def __init__(self, model_name: str, drafter: str, seed: int, acceptance=None):
        from dspark_sim.acceptance import AcceptanceConfig, AcceptanceModel

        if acceptance is None:
            acceptance = {}
        if isinstance(acceptance, dict):
            acceptance = AcceptanceConfig.from_dict({"drafter": drafter, **acceptance})
        self.calibrated = acceptance.calibration == "sts"
        self.model = AcceptanceModel(acceptance, model_name)
        self.rng = np.random.default_rng(seed)

    def admit(self, seq) -> None:
        """Draw ``seq``'s difficulty for its whole life."""
        seq.difficulty = float(self.model.new_requests(np.array([seq.domain]), self.rng)[0])

    def step(self, seqs, block_size: int) -> tuple[np.ndarray, np.ndarray]:
        """True conditional acceptance and reported confidence, both ``[R, block_size]``."""
        difficulty = np.array([s.difficulty for s in seqs], np.float64)
        domain = np.array([s.domain for s in seqs], np.int64)
        p_true, conf = self.model.step(difficulty, domain, block_size, self.rng)
        return p_true, np.clip(conf, 1e-6, 1 - 1e-6)

    def accept(self, p_true: np.ndarray, num_drafts: np.ndarray) -> np.ndarray:
        """Accepted drafts per request ``[R]`` (sequential Bernoulli up to ``num_drafts``)."""
        return np.asarray(self.model.accept(p_true, num_drafts, self.rng), np.int64)
