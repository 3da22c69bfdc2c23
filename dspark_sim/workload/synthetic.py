"""Synthetic workloads: Poisson, Gamma or constant arrivals and sampled token lengths.

Determinism: requests are generated in fixed blocks of ``BLOCK_ROWS``, block k
drawing from its own stream ``SeedSequence(seed, spawn_key=(k,))``, and arrival
times are one running sum carried across blocks. The output therefore depends
only on (config, seed), never on ``chunk_rows``: the same seed gives bit-identical
arrays however the stream is chunked.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dspark_sim.config import Section, build, is_int, is_real
from dspark_sim.errors import InputError
from dspark_sim.limits import (MAX_ARRIVAL_S, MAX_CV, MAX_LENGTH_SIGMA, MAX_RATE_PER_S, MAX_REQUESTS, MAX_TOKENS,
                               MIN_RATE_PER_S)
from dspark_sim.workload.chunk import RequestChunk, rechunk
from dspark_sim.workload.readers import CSV_FORMATS, MOONCAKE_KEYS, read_trace

LENGTH_DISTS = ("lognormal", "empirical", "constant", "uniform")
ARRIVALS = ("poisson", "gamma", "constant")
BLOCK_ROWS = 65536
_COMMON_KEYS = ("dist", "min_tokens", "max_tokens")
_DIST_KEYS = {"lognormal": ("mean", "sigma"), "constant": ("mean",), "uniform": (),
              "empirical": ("values", "weights", "file", "column")}
# Trace columns an empirical distribution may resample, by any of their names.
TRACE_COLUMNS = {"prompt_tokens": "prompt_tokens", "output_tokens": "output_tokens",
                 MOONCAKE_KEYS[1]: "prompt_tokens", MOONCAKE_KEYS[2]: "output_tokens",
                 **{c.prompt: "prompt_tokens" for c in CSV_FORMATS.values()},
                 **{c.output: "output_tokens" for c in CSV_FORMATS.values()}}

Sampler = Callable[[np.random.Generator, int], np.ndarray]


@dataclass(frozen=True, slots=True)
class LengthDist:
    """A distribution of token counts, rounded to integers and clamped to [min_tokens, max_tokens].

    dist "lognormal": ``mean`` is the mean of the distribution itself (not of its
        log) and ``sigma`` the standard deviation of the log, so
        mu = ln(mean) - sigma^2 / 2. Rounding and clamping shift the mean slightly.
    dist "constant": always ``round(mean)``.
    dist "uniform": integers uniform in [min_tokens, max_tokens] (both required).
    dist "empirical": resample ``values`` with ``weights`` (uniform when empty),
        or resample column ``column`` ("prompt_tokens" / "output_tokens", or the
        trace's own column name) of the trace ``file``.
    """

    dist: str
    mean: float = 0.0
    sigma: float = 0.0
    values: tuple[int, ...] = ()
    weights: tuple[float, ...] = ()
    file: Path | None = None
    column: str | None = None
    min_tokens: int = 1
    max_tokens: int | None = None

    def __post_init__(self) -> None:
        if self.dist not in LENGTH_DISTS:
            _bad("dist", self.dist, f"expected one of {', '.join(LENGTH_DISTS)}")
        if not is_int(self.min_tokens) or not 1 <= self.min_tokens <= MAX_TOKENS:
            _bad("min_tokens", self.min_tokens, f"must be an integer in [1, {MAX_TOKENS}]")
        top = self.max_tokens
        if top is not None and (not is_int(top) or not self.min_tokens <= top <= MAX_TOKENS):
            _bad("max_tokens", self.max_tokens, f"must be an integer in [min_tokens={self.min_tokens}, {MAX_TOKENS}]")
        for name, most in (("mean", MAX_TOKENS), ("sigma", MAX_LENGTH_SIGMA)):
            value = getattr(self, name)
            if not is_real(value) or not 0 <= value <= most:
                _bad(name, value, f"must be a finite number in [0, {most:g}]")
        getattr(self, f"_check_{self.dist}")()

    def _check_lognormal(self) -> None:
        if self.mean <= 0:
            _bad("mean", self.mean, "a lognormal needs mean > 0")

    def _check_constant(self) -> None:
        if round(self.mean) < 1:
            _bad("mean", self.mean, "a constant length must round to >= 1")

    def _check_uniform(self) -> None:
        if self.max_tokens is None:
            _bad("max_tokens", None, "a uniform length needs max_tokens (it draws min_tokens..max_tokens)")

    def _check_empirical(self) -> None:
        if (self.file is None) == (not self.values):
            _bad("values", list(self.values), "give exactly one of values and file")
        if self.file is not None:
            if not isinstance(self.column, str) or self.column not in TRACE_COLUMNS:
                _bad("column", self.column, f"expected one of {', '.join(TRACE_COLUMNS)}")
            if self.weights:
                _bad("weights", list(self.weights), "weights apply to values, not to a trace file")
            return
        if not all(is_int(v) and 1 <= v <= MAX_TOKENS for v in self.values):
            _bad("values", list(self.values), f"expected integers in [1, {MAX_TOKENS}]")
        if self.weights and (len(self.weights) != len(self.values)
                             or not all(is_real(w) and w >= 0 for w in self.weights)
                             or sum(self.weights) <= 0):
            _bad("weights", list(self.weights), "expected one weight >= 0 per value, summing to > 0")

    @classmethod
    def from_dict(cls, d, *, file, key) -> LengthDist:
        """Build from a YAML mapping; ``file`` relative paths resolve against the YAML's folder."""
        s = Section(d, file, key)
        dist = s.string("dist")
        if dist not in LENGTH_DISTS:
            raise InputError(file, s.path("dist"), dist, f"expected one of {', '.join(LENGTH_DISTS)}")
        allowed = _COMMON_KEYS + _DIST_KEYS[dist]
        for name in s.data:
            if name not in allowed:
                why = f"not used by dist {dist!r}" if name in cls.__dataclass_fields__ else "unknown key"
                raise InputError(file, s.path(str(name)), s.data[name], why)
        kwargs = {name: s.raw(name) for name in allowed if s.has(name)}
        for name in ("values", "weights"):
            if name in kwargs:
                kwargs[name] = _as_tuple(kwargs[name], file, s.path(name))
        if "file" in kwargs:
            kwargs["file"] = _trace_path(s.string("file"), file, s.path("file"))
        return build(cls, kwargs, file, key)

    def sampler(self) -> Sampler:
        """A function ``(rng, n) -> int64 [n]`` drawing n lengths; loads a trace file now."""
        lo, hi = self.min_tokens, self.max_tokens if self.max_tokens is not None else MAX_TOKENS

        def clamp(x: np.ndarray) -> np.ndarray:
            return np.clip(np.rint(x), lo, hi).astype(np.int64)

        if self.dist == "lognormal":
            mu = math.log(self.mean) - self.sigma ** 2 / 2
            return lambda rng, n: clamp(rng.lognormal(mu, self.sigma, n))
        if self.dist == "constant":
            return lambda rng, n: clamp(np.full(n, float(round(self.mean))))
        if self.dist == "uniform":
            return lambda rng, n: rng.integers(lo, hi, n, endpoint=True, dtype=np.int64)
        values = np.asarray(self.values, dtype=np.float64) if self.values else self._trace_values()
        p = np.asarray(self.weights, dtype=np.float64) / sum(self.weights) if self.weights else None
        return lambda rng, n: clamp(rng.choice(values, n, p=p))

    def _trace_values(self) -> np.ndarray:
        field = TRACE_COLUMNS[self.column]
        return np.concatenate([getattr(c, field) for c in read_trace(self.file)]).astype(np.float64)


@dataclass(frozen=True, slots=True, kw_only=True)
class SyntheticConfig:
    """A synthetic workload: ``num_requests`` arriving at ``rate_per_s`` on average.

    arrival "poisson": exponential gaps (coefficient of variation 1).
    arrival "gamma": Gamma gaps with coefficient of variation ``cv``:
        shape = 1 / cv^2, scale = cv^2 / rate_per_s (cv > 1 is burstier than Poisson).
    arrival "constant": gaps of exactly 1 / rate_per_s.
    ``cv`` is used only by "gamma" and must stay 1.0 otherwise.
    """

    num_requests: int
    rate_per_s: float
    arrival: str = "poisson"
    cv: float = 1.0
    prompt_tokens: LengthDist
    output_tokens: LengthDist

    def __post_init__(self) -> None:
        if not is_int(self.num_requests) or not 1 <= self.num_requests <= MAX_REQUESTS:
            _bad("num_requests", self.num_requests, f"must be an integer in [1, {MAX_REQUESTS:,}]")
        if not is_real(self.rate_per_s) or not MIN_RATE_PER_S <= self.rate_per_s <= MAX_RATE_PER_S:
            _bad("rate_per_s", self.rate_per_s, f"must be a number in [{MIN_RATE_PER_S:g}, {MAX_RATE_PER_S:g}]")
        if (self.num_requests - 1) / self.rate_per_s > MAX_ARRIVAL_S / 2:
            _bad("rate_per_s", self.rate_per_s, f"{self.num_requests} requests at this rate arrive over "
                 f"{(self.num_requests - 1) / self.rate_per_s:.3g} s, beyond half the simulated clock's "
                 f"{MAX_ARRIVAL_S:g} s")
        if self.arrival not in ARRIVALS:
            _bad("arrival", self.arrival, f"expected one of {', '.join(ARRIVALS)}")
        if not is_real(self.cv) or not 0 < self.cv <= MAX_CV:
            _bad("cv", self.cv, f"must be a number in (0, {MAX_CV:g}]")
        if self.arrival != "gamma" and self.cv != 1.0:
            _bad("cv", self.cv, f"cv applies only to arrival 'gamma', not {self.arrival!r}")
        for name in ("prompt_tokens", "output_tokens"):
            if not isinstance(getattr(self, name), LengthDist):
                _bad(name, getattr(self, name), "expected a LengthDist")

    @classmethod
    def from_dict(cls, d, *, file, key: str = "workload.synthetic") -> SyntheticConfig:
        """Build from a YAML mapping; unknown or missing keys raise InputError naming them."""
        s = Section(d, file, key)
        given = {name: s.raw(name) for name in ("num_requests", "rate_per_s", "arrival", "cv",
                                                 "prompt_tokens", "output_tokens")}
        s.done()
        kwargs = {name: value for name, value in given.items() if value is not None}
        for name in ("num_requests", "rate_per_s", "prompt_tokens", "output_tokens"):
            if name not in kwargs:
                raise InputError(file, s.path(name), None, "missing key")
        for name in ("prompt_tokens", "output_tokens"):
            kwargs[name] = LengthDist.from_dict(kwargs[name], file=file, key=s.path(name))
        return build(cls, kwargs, file, key)


def synthetic_requests(cfg: SyntheticConfig, seed: int, *, chunk_rows: int = 65536) -> Iterator[RequestChunk]:
    """Stream ``cfg.num_requests`` requests as chunks of ``chunk_rows``; the first arrives at 0 s.

    Same (cfg, seed) gives bit-identical arrays for any ``chunk_rows``.
    """
    if not is_int(seed) or seed < 0:
        raise InputError(None, "seed", seed, "must be an integer >= 0")
    if not is_int(chunk_rows) or chunk_rows < 1:
        raise InputError(None, "chunk_rows", chunk_rows, "must be an integer >= 1")
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


# -- helpers ------------------------------------------------------------------------
def _bad(key: str, value: object, why: str) -> None:
    raise InputError(None, key, value, why)


def _as_tuple(value, file, key: str) -> tuple:
    if not isinstance(value, (list, tuple)) or not value:
        raise InputError(file, key, value, "expected a non-empty list")
    return tuple(value)


def _trace_path(text: str, file, key: str) -> Path:
    base = Path(file).parent if file is not None else Path.cwd()
    path = (base / text).resolve()
    if not path.is_file():
        raise InputError(file, key, text, "trace file not found")
    return path
