"""Acceptance presets: the fitted numbers, their JSON form, and lookup by drafter/target/domain.

A preset holds, for one (drafter, target, domain or dataset), everything the
generative model of shared/DSPARK.md section 8 needs:
  logit p_{r,k} = mu_k + d_r + step_sigma g + position_sigma h_k,
      d_r ~ N(0, difficulty_sigma) per request, g ~ N(0, 1) per step (whole
      block), h_k ~ N(0, 1) per step and position;
  raw confidence logit z_k = conf_slope_k logit p_k + conf_bias_k + conf_noise_k n_k;
  STS confidence sigmoid(z_k / sts_temperatures_k), raw confidence sigmoid(z_k).
Positions past the fitted seven are extrapolated on load (see ``extend``).
"""
from __future__ import annotations

import re
import warnings
from dataclasses import asdict, dataclass, fields, replace
from functools import lru_cache
from pathlib import Path

import numpy as np

from dspark_sim.acceptance.paper import DATASETS
from dspark_sim.errors import InputError
from dspark_sim.userfiles import read_json
from dspark_sim.names import DOMAINS, DRAFTERS

MAX_POSITIONS = 16  # the largest block size a scenario may ask for
BUILTIN_PATH = Path(__file__).with_name("presets.json")
_VECTORS = ("mu", "conf_slope", "conf_bias", "conf_noise", "sts_temperatures")


@dataclass(frozen=True, slots=True)
class AcceptancePreset:
    """Fitted acceptance and confidence parameters; per-position tuples all have the same length."""

    drafter: str
    target: str
    domain: str
    mu: tuple[float, ...]
    difficulty_sigma: float
    step_sigma: float
    conf_slope: tuple[float, ...]
    conf_bias: tuple[float, ...]
    conf_noise: tuple[float, ...]
    sts_temperatures: tuple[float, ...]
    position_sigma: float = 0.0
    dataset: str | None = None

    def __post_init__(self) -> None:
        n = len(self.mu)
        if n < 1 or any(len(getattr(self, name)) != n for name in _VECTORS):
            raise ValueError(f"preset {self.label}: per-position tuples differ in length")
        if min(self.difficulty_sigma, self.step_sigma, self.position_sigma) < 0:
            raise ValueError(f"preset {self.label}: negative sigma")
        if min(self.conf_noise) < 0 or min(self.sts_temperatures) <= 0:
            raise ValueError(f"preset {self.label}: conf_noise must be >= 0 and temperatures > 0")

    @property
    def label(self) -> str:
        return f"{self.drafter}/{self.target}/{self.dataset or self.domain}"

    def to_json(self) -> dict:
        """The preset as a JSON-ready dict (tuples become lists)."""
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}

    @classmethod
    def from_json(cls, d: dict) -> AcceptancePreset:
        """Inverse of ``to_json``; unknown keys (such as a fit report) are ignored."""
        kwargs = {f.name: d[f.name] for f in fields(cls) if f.name in d}
        for name in _VECTORS:
            kwargs[name] = tuple(float(v) for v in kwargs[name])
        return cls(**kwargs)


def extend(preset: AcceptancePreset, positions: int = MAX_POSITIONS) -> AcceptancePreset:
    """The preset with ``positions`` entries per tuple.

    Past the fitted positions mu keeps falling by the last decay step, taken as
    the mean step over the last four fitted positions (fitting noise makes a
    single step erratic) and never a rise: Fig. 2 gives no evidence that
    acceptance keeps rising past position 7. The head parameters repeat the
    last fitted position.
    """
    n = len(preset.mu)
    if n >= positions:
        return preset
    mu = np.asarray(preset.mu)
    step = min(0.0, (mu[-1] - mu[max(0, n - 4)]) / max(1, min(3, n - 1)))
    extra = mu[-1] + step * np.arange(1, positions - n + 1)
    pad = {name: tuple(getattr(preset, name)) + (getattr(preset, name)[-1],) * (positions - n)
           for name in _VECTORS[1:]}
    return replace(preset, mu=tuple(mu.tolist() + extra.tolist()), **pad)


class PresetTable:
    """A list of presets, as read from presets.json or a file ``dspark-sim calibrate`` wrote."""

    def __init__(self, presets: list[AcceptancePreset], source: str):
        self.presets = presets
        self.source = source

    @classmethod
    def load(cls, path: str | Path, *, file=None, key: str = "preset_file") -> PresetTable:
        """Read a preset JSON file; any problem is an InputError naming ``path``."""
        if not Path(path).exists():
            raise InputError(file, key, str(path), "cannot read: file not found")
        doc = read_json(path)
        try:
            presets = [AcceptancePreset.from_json(p) for p in doc["presets"]]
        except (ValueError, KeyError, TypeError) as err:
            raise InputError(path, "presets", None, f"not a preset file: {err}") from None
        if not presets:
            raise InputError(path, "presets", [], "holds no presets")
        return cls(presets, str(path))

    def resolve_target(self, drafter: str, target: str, *, file=None, key: str = "speculation.drafter") -> str:
        """The preset target ``find`` uses for ``target``: itself when this table has a preset
        for it, else the nearest (see :func:`nearest_target`)."""
        mine = [p for p in self.presets if p.drafter == drafter]
        if not mine:
            known = sorted({p.drafter for p in self.presets})
            raise InputError(file, key, drafter, f"no preset for this drafter in {self.source}; known: {', '.join(known)}")
        name = normalize_target(target)
        targets = list(dict.fromkeys(p.target for p in mine))
        return name if name in targets else nearest_target(name, targets)

    def find(self, drafter: str, target: str, domain: str, *, file=None,
             key: str = "speculation.drafter") -> AcceptancePreset:
        """The preset for ``drafter`` and ``domain`` (a domain or a Table 1 dataset) nearest ``target``.

        A target without a preset resolves to the nearest one of the same
        family by size (else the nearest size, else the largest model) and
        warns naming the substitution.
        """
        if domain not in DOMAINS and domain not in DATASETS:
            raise InputError(file, key, domain, f"unknown domain; known: {', '.join(DOMAINS + tuple(DATASETS))}")
        chosen = self.resolve_target(drafter, target, file=file, key=key)
        if chosen != normalize_target(target):
            warnings.warn(f"no {drafter} acceptance preset for {target!r}; using {chosen!r}", stacklevel=3)
        mine = [p for p in self.presets if p.drafter == drafter]
        dataset = domain if domain in DATASETS else None
        for p in mine:
            if p.target == chosen and p.dataset == dataset and (dataset or p.domain == domain):
                return extend(p)
        raise InputError(file, key, domain, f"{self.source} has no {drafter}/{chosen} preset for it")


@lru_cache(maxsize=1)
def builtin() -> PresetTable:
    """The presets shipped with the package (:mod:`.builtin` fits them)."""
    return PresetTable.load(BUILTIN_PATH)


def get_preset(drafter: str, target: str, domain: str, *, file=None,
               key: str = "speculation.drafter") -> AcceptancePreset:
    """The built-in preset for ``drafter`` on ``target`` in ``domain`` (or a Table 1 dataset), block sizes up to 16."""
    if drafter not in DRAFTERS:
        raise InputError(file, key, drafter, f"unknown drafter; known: {', '.join(DRAFTERS)}")
    return builtin().find(drafter, target, domain, file=file, key=key)


def normalize_target(name: str) -> str:
    """'Qwen/Qwen3-8B' -> 'qwen3-8b'."""
    return str(name).strip().rsplit("/", 1)[-1].lower()


def nearest_target(name: str, targets: list[str]) -> str:
    """Same family (leading letters) by nearest size, else nearest size, else the largest."""
    family = _family(name)
    pool = [t for t in targets if _family(t) == family] or targets
    size = _size_b(name)
    sized = [t for t in pool if _size_b(t) is not None]
    if size is None or not sized:
        return max(pool, key=lambda t: _size_b(t) or 0.0)
    return min(sized, key=lambda t: abs(np.log(_size_b(t) / size)))


def _family(name: str) -> str:
    match = re.match(r"[a-z]+", name)
    return match.group(0) if match else name


def _size_b(name: str) -> float | None:
    match = re.search(r"(\d+(?:\.\d+)?)b(?![a-z])", name)
    return float(match.group(1)) if match else None
