"""SGLang's DSpark cost tables: SPS(B), read and written exactly as the engine reads them.

SGLang (``python/sglang/srt/speculative/dspark_components/dspark_sps_table.py``,
also ``dspark_sps.py``) keeps the step rate of the target in one of two JSON
structs, chosen by ``--speculative-dspark-sps-table-path``:

* ``SpsCostTable``: ``sample_batch_tokens`` (strictly increasing ints),
  ``sample_steps_per_sec`` (same length), ``max_batch_tokens`` (>= the last
  probe). Lookup is the *floor probe*: the rate of the largest probe <= B;
  below the first probe the first rate, above the last probe (even past
  ``max_batch_tokens``, which the lookup never reads) the last rate.
* ``SpsAdditiveCostTable`` (told apart by the key ``bias_seconds``): step
  seconds = ``bias_seconds + interp(bs_probes, alpha_seconds, R) +
  interp(m_probes, theta_seconds, R + budget)``, linear interpolation clamped
  at both ends; ``R + budget`` is B, the verify tokens of the step.

Our dataclasses apply SGLang's checks (and, stricter, reject non-finite
numbers and a step rate <= 0) and name the file, key and value on failure.
"""
from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from dspark_sim.cost.base import CostModel, DraftWork, StepWork
from dspark_sim.cost.jsonio import read_json, with_file, write_json_atomic
from dspark_sim.cost.shapes import interp_clamped
from dspark_sim.errors import InputError

# The planner's request axis (DSPARK.md section 3: R up to a few hundred).
DEFAULT_MAX_NUM_REQS = 256


def default_probes(max_batch_tokens: int) -> list[int]:
    """SGLang's probe sweep (``build_batch_size_sweep``), ending at ``max_batch_tokens``.

    1, 2, 4, 8, 12..124 step 4, 128..240 step 16, 256..992 step 32,
    1024..1920 step 128, then step 256; the maximum is appended if the sweep
    misses it.
    """
    if isinstance(max_batch_tokens, bool) or not isinstance(max_batch_tokens, int) \
            or max_batch_tokens < 1:
        raise InputError(None, "max_batch_tokens", max_batch_tokens, "must be an integer >= 1")
    raw = [1, 2, 4, 8, *range(12, 128, 4), *range(128, 256, 16), *range(256, 1024, 32),
           *range(1024, 2048, 128), *range(2048, max_batch_tokens + 1, 256)]
    sweep = sorted({v for v in raw if v <= max_batch_tokens})
    if sweep[-1] != max_batch_tokens:
        sweep.append(max_batch_tokens)
    return sweep


# -- validation shared by both tables -------------------------------------------
def _int_list(d: dict, key: str) -> tuple[int, ...]:
    value = d.get(key)
    if not isinstance(value, list) or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise InputError(None, key, value, "must be a JSON list of integers")
    return tuple(value)


def _float_list(d: dict, key: str) -> tuple[float, ...]:
    value = d.get(key)
    if not isinstance(value, list) or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) for v in value):
        raise InputError(None, key, value, "must be a JSON list of numbers")
    return tuple(float(v) for v in value)


def _number(d: dict, key: str, kind: type) -> float | int:
    value = d.get(key)
    ok = (int,) if kind is int else (int, float)
    if isinstance(value, bool) or not isinstance(value, ok):
        raise InputError(None, key, value, f"must be a JSON {'integer' if kind is int else 'number'}")
    return kind(value)


def _check_axis(probes_key: str, probes: tuple[int, ...], values_key: str,
                values: tuple[float, ...]) -> None:
    if not probes:
        raise InputError(None, probes_key, list(probes), "needs at least one probe")
    if any(b <= a for a, b in zip(probes, probes[1:])):
        raise InputError(None, probes_key, list(probes), "must be strictly increasing")
    if len(probes) != len(values):
        raise InputError(None, values_key, len(values),
                         f"must have the length of {probes_key} ({len(probes)})")
    for i, v in enumerate(values):
        if not math.isfinite(v):
            raise InputError(None, f"{values_key}[{i}]", v, "must be finite")


# -- the floor-probe table --------------------------------------------------------
@dataclass(frozen=True)
class SpsCostTable:
    """SGLang ``SpsCostTable``: target steps per second at probed verify-token counts."""

    sample_batch_tokens: tuple[int, ...]
    sample_steps_per_sec: tuple[float, ...]
    max_batch_tokens: int
    _probes: np.ndarray = field(init=False, repr=False, compare=False)
    _sps: np.ndarray = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "sample_batch_tokens", tuple(int(b) for b in self.sample_batch_tokens))
        object.__setattr__(self, "sample_steps_per_sec",
                           tuple(float(s) for s in self.sample_steps_per_sec))
        _check_axis("sample_batch_tokens", self.sample_batch_tokens,
                    "sample_steps_per_sec", self.sample_steps_per_sec)
        for i, s in enumerate(self.sample_steps_per_sec):
            if s <= 0:
                raise InputError(None, f"sample_steps_per_sec[{i}]", s, "a step rate must be > 0")
        if self.max_batch_tokens < self.sample_batch_tokens[-1]:
            raise InputError(None, "max_batch_tokens", self.max_batch_tokens,
                             f"must be >= the largest probe {self.sample_batch_tokens[-1]}")
        object.__setattr__(self, "_probes", np.asarray(self.sample_batch_tokens, dtype=np.int64))
        object.__setattr__(self, "_sps", np.asarray(self.sample_steps_per_sec, dtype=np.float64))

    def steps_per_sec(self, batch_tokens: int, num_reqs: int | None = None) -> float:
        """Steps per second at ``batch_tokens`` verify tokens: the floor probe's rate.

        ``num_reqs`` is accepted for a common signature and ignored (the table is 1-D).
        """
        idx = bisect.bisect_right(self.sample_batch_tokens, batch_tokens) - 1
        return self.sample_steps_per_sec[min(max(idx, 0), len(self.sample_batch_tokens) - 1)]

    def steps_per_sec_array(self, batch_tokens: np.ndarray, num_reqs: int | None = None) -> np.ndarray:
        """Vectorised :meth:`steps_per_sec`: ``batch_tokens`` int array [N] -> float64 [N]."""
        idx = np.searchsorted(self._probes, batch_tokens, side="right") - 1
        return self._sps[np.clip(idx, 0, len(self._probes) - 1)]

    def step_s(self, num_reqs: int, batch_tokens: int) -> float:
        """Seconds of one step (the reciprocal of the rate)."""
        return 1.0 / self.steps_per_sec(batch_tokens)

    def to_json_dict(self) -> dict:
        """The JSON object SGLang decodes, keys in its field order."""
        return {"sample_batch_tokens": list(self.sample_batch_tokens),
                "sample_steps_per_sec": list(self.sample_steps_per_sec),
                "max_batch_tokens": self.max_batch_tokens}

    @classmethod
    def from_json_dict(cls, d: dict, *, file=None) -> SpsCostTable:
        """Build from a decoded JSON object; :class:`InputError` names file, key and value."""
        try:
            if not isinstance(d, dict):
                raise InputError(None, None, type(d).__name__, "must be a JSON object")
            return cls(_int_list(d, "sample_batch_tokens"), _float_list(d, "sample_steps_per_sec"),
                       _number(d, "max_batch_tokens", int))
        except InputError as err:
            raise with_file(err, file) from None

    def save(self, path: str | Path) -> None:
        """Write the table as SGLang JSON (atomically)."""
        write_json_atomic(path, self.to_json_dict())


# -- the additive table ------------------------------------------------------------
@dataclass(frozen=True)
class SpsAdditiveCostTable:
    """SGLang ``SpsAdditiveCostTable``: step seconds = bias + alpha(R) + theta(B).

    alpha is indexed by the request count R (``bs_probes``), theta by the
    verify tokens B = R + budget (``m_probes``); both interpolate linearly and
    hold flat outside their probes.
    """

    bias_seconds: float
    bs_probes: tuple[int, ...]
    alpha_seconds: tuple[float, ...]
    m_probes: tuple[int, ...]
    theta_seconds: tuple[float, ...]
    max_batch_tokens: int | None = None  # our extension: caps the admissible B (SGLang ignores the key)
    _arrays: tuple = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        for key, kind in (("bs_probes", int), ("alpha_seconds", float),
                          ("m_probes", int), ("theta_seconds", float)):
            object.__setattr__(self, key, tuple(kind(v) for v in getattr(self, key)))
        _check_axis("bs_probes", self.bs_probes, "alpha_seconds", self.alpha_seconds)
        _check_axis("m_probes", self.m_probes, "theta_seconds", self.theta_seconds)
        if not (math.isfinite(self.bias_seconds) and self.bias_seconds > 0):
            raise InputError(None, "bias_seconds", self.bias_seconds, "must be > 0")
        if self.max_batch_tokens is not None and self.max_batch_tokens < 1:
            raise InputError(None, "max_batch_tokens", self.max_batch_tokens, "must be >= 1")
        object.__setattr__(self, "_arrays", tuple(np.asarray(getattr(self, k), dtype=np.float64)
                                                  for k in ("m_probes", "theta_seconds")))

    def step_s(self, num_reqs: int, batch_tokens: int) -> float:
        """Seconds of one step with ``num_reqs`` requests verifying ``batch_tokens`` tokens."""
        return (self.bias_seconds + interp_clamped(self.bs_probes, self.alpha_seconds, num_reqs)
                + interp_clamped(self.m_probes, self.theta_seconds, batch_tokens))

    def steps_per_sec(self, batch_tokens: int, num_reqs: int | None = None) -> float:
        """Steps per second; ``num_reqs`` is required (alpha depends on it)."""
        if num_reqs is None:
            raise ValueError("SpsAdditiveCostTable.steps_per_sec needs num_reqs")
        return 1.0 / self.step_s(num_reqs, batch_tokens)

    def steps_per_sec_array(self, batch_tokens: np.ndarray, num_reqs: int) -> np.ndarray:
        """Vectorised :meth:`steps_per_sec` at one R: ``batch_tokens`` [N] -> float64 [N]."""
        m, theta = self._arrays
        fixed = self.bias_seconds + interp_clamped(self.bs_probes, self.alpha_seconds, num_reqs)
        return 1.0 / (fixed + np.interp(batch_tokens, m, theta))

    def to_json_dict(self) -> dict:
        """The JSON object SGLang decodes, keys in its field order."""
        d = {"bias_seconds": self.bias_seconds, "bs_probes": list(self.bs_probes),
             "alpha_seconds": list(self.alpha_seconds), "m_probes": list(self.m_probes),
             "theta_seconds": list(self.theta_seconds)}
        if self.max_batch_tokens is not None:
            d["max_batch_tokens"] = self.max_batch_tokens
        return d

    @classmethod
    def from_json_dict(cls, d: dict, *, file=None) -> SpsAdditiveCostTable:
        """Build from a decoded JSON object; :class:`InputError` names file, key and value."""
        try:
            if not isinstance(d, dict):
                raise InputError(None, None, type(d).__name__, "must be a JSON object")
            cap = None if d.get("max_batch_tokens") is None else _number(d, "max_batch_tokens", int)
            return cls(_number(d, "bias_seconds", float), _int_list(d, "bs_probes"),
                       _float_list(d, "alpha_seconds"), _int_list(d, "m_probes"),
                       _float_list(d, "theta_seconds"), cap)
        except InputError as err:
            raise with_file(err, file) from None

    def save(self, path: str | Path) -> None:
        """Write the table as SGLang JSON (atomically)."""
        write_json_atomic(path, self.to_json_dict())


SpsTable = SpsCostTable | SpsAdditiveCostTable


def sps_table_from_json_dict(data: object, *, file=None) -> SpsTable:
    """Either SGLang table from its decoded JSON; the additive one is recognised by the key
    ``bias_seconds``. The one reader of the format: everything else builds on its tables."""
    if isinstance(data, dict) and "bias_seconds" in data:
        return SpsAdditiveCostTable.from_json_dict(data, file=file)
    return SpsCostTable.from_json_dict(data, file=file)


def load_sps_table(path: str | Path) -> SpsTable:
    """Read either SGLang table from a JSON file (:func:`sps_table_from_json_dict`)."""
    return sps_table_from_json_dict(read_json(path), file=path)


# -- tables derived from a cost model -----------------------------------------------
def sps_from_cost_model(cost: CostModel, *, num_reqs_probes=None, context_tokens_per_req: int = 2048,
                        max_batch_tokens: int = 8192, additive: bool = False,
                        verify_tokens_per_req: float = 4.0, draft_kind: str | None = None,
                        block_size: int = 7) -> SpsTable:
    """Probe ``cost.step_s`` and return the table SGLang would read.

    Every request holds ``context_tokens_per_req`` of KV; ``draft_kind``
    (``"block"``/``"chain"``, ``block_size`` positions) adds the drafter that
    runs for all R requests before the budget is chosen.

    Floor table: probe B over :func:`default_probes`, with
    R = clamp(round(B / verify_tokens_per_req), 1, 256) requests (a 1-D table
    must assume some R per B). Additive table, anchored so it is exact for any
    cost of the form b + a(R) + t(B): bias = T(1, 1),
    alpha(R) = T(R, R) - T(1, R), theta(B) = T(1, B) - T(1, 1), with R over
    ``num_reqs_probes`` (default: the sweep up to 256) and B over the sweep.
    """
    def step_s(num_reqs: int, tokens: int) -> float:
        ctx = num_reqs * context_tokens_per_req
        draft = DraftWork(draft_kind, num_reqs, block_size, ctx) if draft_kind else None
        return cost.step_s(StepWork(decode_reqs=num_reqs, verify_tokens=tokens,
                                    decode_context_tokens=ctx, draft=draft))

    m_probes = default_probes(max_batch_tokens)
    if not additive:
        reqs = [min(DEFAULT_MAX_NUM_REQS, max(1, round(b / verify_tokens_per_req))) for b in m_probes]
        sps = [1.0 / step_s(min(r, b), b) for r, b in zip(reqs, m_probes)]
        return SpsCostTable(tuple(m_probes), tuple(sps), max_batch_tokens)
    bs_probes = sorted(num_reqs_probes) if num_reqs_probes is not None \
        else default_probes(min(DEFAULT_MAX_NUM_REQS, max_batch_tokens))
    base = step_s(1, 1)
    alpha = [step_s(r, r) - step_s(1, r) for r in bs_probes]
    theta = [step_s(1, m) - base for m in m_probes]
    return SpsAdditiveCostTable(base, tuple(bs_probes), tuple(alpha), tuple(m_probes), tuple(theta))
