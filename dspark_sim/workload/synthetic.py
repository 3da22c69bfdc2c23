"""Synthetic workloads: Poisson, Gamma or constant arrivals and sampled token lengths.

Determinism: requests are generated in fixed blocks of ``BLOCK_ROWS``, block k
drawing from its own stream ``SeedSequence(seed, spawn_key=(k,))``, and arrival
times are one running sum carried across blocks. The output therefore depends
only on (config, seed), never on ``chunk_rows``: the same seed gives bit-identical
arrays however the stream is chunked.
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from dspark_sim.config import Section, build, is_int, is_real
from dspark_sim.errors import InputError
from dspark_sim.limits import MAX_ARRIVAL_S, MAX_CV, MAX_RATE_PER_S, MAX_REQUESTS, MIN_RATE_PER_S
from dspark_sim.workload.chunk import RequestChunk, rechunk
from dspark_sim.workload.lengths import LengthDist, Sampler, bad
from dspark_sim.workload.sessions import SessionsConfig, session_blocks

# "gamma": the Gamma distribution of the gaps between arrivals, not the paper's gamma (the
# drafter's block size, which the project calls block_size)
ARRIVALS = ("poisson", "gamma", "constant")
BLOCK_ROWS = 65536

__all__ = ["ARRIVALS", "BLOCK_ROWS", "MAX_REQUESTS", "LengthDist", "SyntheticConfig", "synthetic_requests"]


@dataclass(frozen=True, slots=True, kw_only=True)
class SyntheticConfig:
    """A synthetic workload: ``num_requests`` arriving at ``rate_per_s`` on average.

    arrival "poisson": exponential gaps (coefficient of variation 1).
    arrival "gamma": Gamma gaps with coefficient of variation ``cv``:
        shape = 1 / cv^2, scale = cv^2 / rate_per_s (cv > 1 is burstier than Poisson).
    arrival "constant": gaps of exactly 1 / rate_per_s.
    ``cv`` is used only by "gamma" and must stay 1.0 otherwise.
    ``sessions``: requests come in sessions (:mod:`.sessions`) whose starts arrive as above;
    ``prompt_tokens`` is then what each turn appends to its session's history.
    """

    num_requests: int
    rate_per_s: float
    arrival: str = "poisson"
    cv: float = 1.0
    prompt_tokens: LengthDist
    output_tokens: LengthDist
    sessions: SessionsConfig | None = None

    def __post_init__(self) -> None:
        if not is_int(self.num_requests) or not 1 <= self.num_requests <= MAX_REQUESTS:
            bad("num_requests", self.num_requests, f"must be an integer in [1, {MAX_REQUESTS:,}]")
        if not is_real(self.rate_per_s) or not MIN_RATE_PER_S <= self.rate_per_s <= MAX_RATE_PER_S:
            bad("rate_per_s", self.rate_per_s, f"must be a number in [{MIN_RATE_PER_S:g}, {MAX_RATE_PER_S:g}]")
        if (self.num_requests - 1) / self.rate_per_s > MAX_ARRIVAL_S / 2:
            bad("rate_per_s", self.rate_per_s, f"{self.num_requests} requests at this rate arrive over "
                 f"{(self.num_requests - 1) / self.rate_per_s:.3g} s, beyond half the simulated clock's "
                 f"{MAX_ARRIVAL_S:g} s")
        if self.arrival not in ARRIVALS:
            bad("arrival", self.arrival, f"expected one of {', '.join(ARRIVALS)}")
        if not is_real(self.cv) or not 0 < self.cv <= MAX_CV:
            bad("cv", self.cv, f"must be a number in (0, {MAX_CV:g}]")
        if self.arrival != "gamma" and self.cv != 1.0:
            bad("cv", self.cv, f"cv applies only to arrival 'gamma', not {self.arrival!r}")
        for name in ("prompt_tokens", "output_tokens"):
            if not isinstance(getattr(self, name), LengthDist):
                bad(name, getattr(self, name), "expected a LengthDist")
        if self.sessions is not None and not isinstance(self.sessions, SessionsConfig):
            bad("sessions", self.sessions, "expected a mapping")

    @classmethod
    def from_dict(cls, d, *, file, key: str = "workload.synthetic") -> SyntheticConfig:
        """Build from a YAML mapping; unknown or missing keys raise InputError naming them."""
        s = Section(d, file, key)
        given = {name: s.raw(name) for name in ("num_requests", "rate_per_s", "arrival", "cv",
                                                 "prompt_tokens", "output_tokens", "sessions")}
        s.done()
        kwargs = {name: value for name, value in given.items() if value is not None}
        for name in ("num_requests", "rate_per_s", "prompt_tokens", "output_tokens"):
            if name not in kwargs:
                raise InputError(file, s.path(name), None, "missing key")
        for name in ("prompt_tokens", "output_tokens"):
            kwargs[name] = LengthDist.from_dict(kwargs[name], file=file, key=s.path(name))
        if "sessions" in kwargs:
            kwargs["sessions"] = SessionsConfig.from_dict(kwargs["sessions"], file=file, key=s.path("sessions"))
        return build(cls, kwargs, file, key)


def synthetic_requests(cfg: SyntheticConfig, seed: int, *, chunk_rows: int = 65536,
                       hash_block_tokens: int = 512) -> Iterator[RequestChunk]:
    """Stream ``cfg.num_requests`` requests as chunks of ``chunk_rows``; the first arrives at 0 s.
    Sessions' requests carry prefix ``hash_ids`` of ``hash_block_tokens`` blocks.

    Same (cfg, seed) gives bit-identical arrays for any ``chunk_rows``.
    """
    if not is_int(seed) or seed < 0:
        raise InputError(None, "seed", seed, "must be an integer >= 0")
    if not is_int(chunk_rows) or chunk_rows < 1:
        raise InputError(None, "chunk_rows", chunk_rows, "must be an integer >= 1")
    if cfg.sessions is not None:
        return rechunk(session_blocks(cfg, seed, hash_block_tokens, lambda rng, n: _gaps_s(cfg, rng, n)), chunk_rows)
    samplers = (cfg.prompt_tokens.sampler(), cfg.output_tokens.sampler())
    return rechunk(_blocks(cfg, seed, *samplers), chunk_rows)


def _blocks(cfg: SyntheticConfig, seed: int, prompt: Sampler, output: Sampler) -> Iterator[RequestChunk]:
    clock_s = 0.0
    for k, start in enumerate(range(0, cfg.num_requests, BLOCK_ROWS)):
        n = min(BLOCK_ROWS, cfg.num_requests - start)
        rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(k,)))
        gaps_s = _gaps_s(cfg, rng, n)
        if k == 0:
            gaps_s[0] = 0.0  # the stream starts with its first request
        # Prepending the carried clock keeps one left-to-right running sum across blocks.
        arrival_s = np.cumsum(np.concatenate(([clock_s], gaps_s)))[1:]
        clock_s = float(arrival_s[-1])
        if clock_s > MAX_ARRIVAL_S:  # bursty Gamma gaps can outrun the mean rate
            late = start + int(np.argmax(arrival_s > MAX_ARRIVAL_S))
            raise InputError(None, "workload.synthetic.rate_per_s", cfg.rate_per_s,
                             f"request {late} arrives at {float(arrival_s[late - start]):.3g} s, beyond the "
                             f"simulated clock's {MAX_ARRIVAL_S:g} s")
        yield RequestChunk(arrival_s, prompt(rng, n), output(rng, n))


def _gaps_s(cfg: SyntheticConfig, rng: np.random.Generator, n: int) -> np.ndarray:
    mean_s = 1.0 / cfg.rate_per_s
    if cfg.arrival == "poisson":
        return rng.exponential(mean_s, n)
    if cfg.arrival == "gamma":
        return rng.gamma(1.0 / cfg.cv ** 2, cfg.cv ** 2 * mean_s, n)
    return np.full(n, mean_s)
