"""The service-level objective: one type for the scenario, ``capacity`` and ``dspark-tune``.

A request is *good* when its TTFT <= ``ttft_ms``, its TPOT <= ``tpot_ms`` (single-token
outputs pass) and, when ``max_queue_ms`` is given, it waited at most that long before its
first step. A run meets the SLO by its ``rule``: "attainment", at least ``attainment`` of
the arrived requests are good; "p99", the p99 of each bounded latency is within its bound.
``tok_per_s_user`` bounds the mean tokens per second a user sees (the tuner's alternative
to a TPOT bound). Each command reads the objectives it supports (docs/capacity.md,
docs/tuning.md); a scenario file's ``slo:`` gives ``ttft_ms`` and ``tpot_ms``.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dspark_sim.config import Section, build, check_choice, check_real, require
from dspark_sim.limits import MAX_LATENCY_MS, MAX_TOK_PER_S_USER

RULES = ("attainment", "p99")
YAML_KEYS = ("ttft_ms", "tpot_ms")  # what a scenario file's ``slo:`` may give


@dataclass(frozen=True, slots=True)
class Slo:
    """Latency objectives and the rule a run must meet them by (see the module docstring)."""

    ttft_ms: float | None = None
    tpot_ms: float | None = None
    tok_per_s_user: float | None = None
    max_queue_ms: float | None = None
    attainment: float = 0.9
    rule: str = "attainment"

    def __post_init__(self) -> None:
        for name in ("ttft_ms", "tpot_ms", "tok_per_s_user", "max_queue_ms"):
            most = MAX_TOK_PER_S_USER if name == "tok_per_s_user" else MAX_LATENCY_MS
            check_real(getattr(self, name), name, 0, most, strict_min=True, optional=True)
        check_real(self.attainment, "attainment", 0, 1, strict_min=True)
        check_choice(self.rule, "rule", RULES)
        require(self.tpot_ms is None or self.tok_per_s_user is None, "tok_per_s_user", self.tok_per_s_user,
                "give at most one of tpot_ms and tok_per_s_user")

    @classmethod
    def from_dict(cls, raw, *, file=None, key: str = "slo") -> Slo:
        """Build from a scenario file's ``slo:`` mapping (``ttft_ms``, ``tpot_ms``)."""
        s = Section(raw, file, key)
        kwargs = {name: s.raw(name) for name in YAML_KEYS}
        s.done()
        return build(cls, kwargs, file, key)

    @property
    def given(self) -> bool:
        """Whether any per-request latency bound is set."""
        return self.ttft_ms is not None or self.tpot_ms is not None

    def good(self, requests) -> np.ndarray:
        """Which requests meet every bound given; ``requests``: a
        :class:`~dspark_sim.metrics.record.RequestColumns` holding ttft_ms, tpot_ms (and
        queue_delay_ms when ``max_queue_ms`` is set), float arrays [n]; bool [n]."""
        ok = np.ones(requests.ttft_ms.size, dtype=bool)
        if self.ttft_ms is not None:
            ok &= requests.ttft_ms <= self.ttft_ms
        if self.tpot_ms is not None:
            tpot = requests.tpot_ms
            ok &= np.isnan(tpot) | (tpot <= self.tpot_ms)
        if self.max_queue_ms is not None:
            ok &= requests.queue_delay_ms <= self.max_queue_ms
        return ok
