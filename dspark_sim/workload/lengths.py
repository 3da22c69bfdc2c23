"""Token-length distributions of synthetic workloads (and any count drawn the same way)."""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dspark_sim.config import Section, build, is_int, is_real
from dspark_sim.errors import InputError
from dspark_sim.userfiles import existing_file
from dspark_sim.limits import MAX_LENGTH_SIGMA, MAX_TOKENS
from dspark_sim.workload.readers import CSV_FORMATS, MOONCAKE_KEYS, read_trace

LENGTH_DISTS = ("lognormal", "empirical", "constant", "uniform")
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
            bad("dist", self.dist, f"expected one of {', '.join(LENGTH_DISTS)}")
        if not is_int(self.min_tokens) or not 1 <= self.min_tokens <= MAX_TOKENS:
            bad("min_tokens", self.min_tokens, f"must be an integer in [1, {MAX_TOKENS}]")
        top = self.max_tokens
        if top is not None and (not is_int(top) or not self.min_tokens <= top <= MAX_TOKENS):
            bad("max_tokens", self.max_tokens, f"must be an integer in [min_tokens={self.min_tokens}, {MAX_TOKENS}]")
        for name, most in (("mean", MAX_TOKENS), ("sigma", MAX_LENGTH_SIGMA)):
            value = getattr(self, name)
            if not is_real(value) or not 0 <= value <= most:
                bad(name, value, f"must be a finite number in [0, {most:g}]")
        getattr(self, f"_check_{self.dist}")()

    def _check_lognormal(self) -> None:
        if self.mean <= 0:
            bad("mean", self.mean, "a lognormal needs mean > 0")

    def _check_constant(self) -> None:
        if round(self.mean) < 1:
            bad("mean", self.mean, "a constant length must round to >= 1")

    def _check_uniform(self) -> None:
        if self.max_tokens is None:
            bad("max_tokens", None, "a uniform length needs max_tokens (it draws min_tokens..max_tokens)")

    def _check_empirical(self) -> None:
        if (self.file is None) == (not self.values):
            bad("values", list(self.values), "give exactly one of values and file")
        if self.file is not None:
            if not isinstance(self.column, str) or self.column not in TRACE_COLUMNS:
                bad("column", self.column, f"expected one of {', '.join(TRACE_COLUMNS)}")
            if self.weights:
                bad("weights", list(self.weights), "weights apply to values, not to a trace file")
            return
        if not all(is_int(v) and 1 <= v <= MAX_TOKENS for v in self.values):
            bad("values", list(self.values), f"expected integers in [1, {MAX_TOKENS}]")
        if self.weights and (len(self.weights) != len(self.values)
                             or not all(is_real(w) and w >= 0 for w in self.weights)
                             or sum(self.weights) <= 0):
            bad("weights", list(self.weights), "expected one weight >= 0 per value, summing to > 0")

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


def bad(key: str, value: object, why: str) -> None:
    """Raise the InputError of a field (the caller's ``build`` adds the file and section)."""
    raise InputError(None, key, value, why)


def _as_tuple(value, file, key: str) -> tuple:
    if not isinstance(value, (list, tuple)) or not value:
        raise InputError(file, key, value, "expected a non-empty list")
    return tuple(value)


def _trace_path(text: str, file, key: str) -> Path:
    base = Path(file).parent if file is not None else Path.cwd()
    return existing_file(base, text, file, key, "trace file not found")
