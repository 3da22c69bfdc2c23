"""The search space: which knobs each speculation method tunes, and their ranges.

One study tunes one method. Every method shares the deployment knobs; each adds
its own (docs/tuning.md lists them all). Spaces are define-by-run: a knob that
only matters under another choice is only sampled under it (``lag_steps`` only
for the production scheduler, a graph-tier ladder only where padding happens),
and ranges may depend on earlier draws (``max_verify_len`` <= ``block_size + 1``, the window).

A space file (``--space FILE``) overrides any knob: a scalar fixes it, a list
makes it categorical, ``{low, high, log}`` makes it a range::

    deployment: {max_running_requests: {low: 32, high: 256, log: true}}
    dspark: {block_size: 7, scheduler: [production]}
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dspark_sim.config import Section, check_number, is_int, is_real, load_yaml
from dspark_sim.errors import InputError
from dspark_sim.limits import MAX_RUNNING_REQUESTS
from dspark_sim.scenario import BATCHING
from dspark_sim.speculation.config import MAX_BLOCK_SIZE, SCHEDULERS

METHODS = ("dspark", "none", "static", "dflash", "schedule", "threshold")
MAX_DRAFTS = MAX_BLOCK_SIZE


@dataclass(frozen=True, slots=True)
class Range:
    """A numeric range, inclusive; integer when both ends are integers."""

    low: float
    high: float
    log: bool = False

    @property
    def is_int(self) -> bool:
        return isinstance(self.low, int) and isinstance(self.high, int)


@dataclass(frozen=True, slots=True)
class Choice:
    """A categorical knob (one value = fixed)."""

    values: tuple


Knob = Range | Choice

# Graph-tier ladders (verify tokens a captured CUDA graph covers), by name.
TIER_LADDERS = ("none", "pow2", "step16", "step64")

DEFAULT_SPACE: dict[str, dict[str, Knob]] = {
    "deployment": {
        # down to 1: on prefill-heavy traffic a tight TPOT tail is met only by a small cap
        "max_running_requests": Range(1, 512, log=True),
        "chunked_prefill_tokens": Range(256, 8192, log=True),
        "max_batched_tokens": Range(512, 8192, log=True),
        "batching": Choice(("mixed", "prefill_first")),
    },
    "dspark": {
        "block_size": Range(3, 8),  # capped at the drafter's trained block
        "scheduler": Choice(("production", "algorithm1")),
        "lag_steps": Range(1, 4),  # SGLang clamps the relay lag to >= 1
        "min_verify_len": Range(1, 3),
        "max_verify_len": Range(2, 9),
        "survival_eps": Range(1e-8, 1e-2, log=True),
        "graph_tiers": Choice(TIER_LADDERS),
    },
    "threshold": {
        "block_size": Range(3, 8),
        "threshold": Range(0.05, 0.95),
        "max_verify_len": Range(2, 9),
    },
    "static": {"block_size": Range(1, 4)},
    "dflash": {"block_size": Range(3, 7)},
    "schedule": {"block_size": Range(0, 4), "bounds": Choice(((8, 32, 128),))},
    "none": {},
}
# A held knob that follows the block size: the verify length block_size + 1 (the full window).
FULL_WINDOW = "block+1"
# A held knob left at the scenario file's value (not sampled, not overridden).
SCENARIO_VALUE = "<scenario>"


# What a space file may give each knob: (low, high) of an integer or real knob, or the
# tuple of its choices; the scenario accepts nothing outside (scenario.py, speculation/config.py).
_DRAFTS, _VERIFY = (1, MAX_DRAFTS), (1, MAX_DRAFTS + 1)
LEGAL: dict[str, dict[str, tuple]] = {
    "deployment": {"max_running_requests": (1, MAX_RUNNING_REQUESTS), "chunked_prefill_tokens": (1, 1 << 20),
                   "max_batched_tokens": (1, 1 << 20), "batching": BATCHING},
    "dspark": {"block_size": _DRAFTS, "scheduler": SCHEDULERS, "lag_steps": (0, 16), "min_verify_len": _VERIFY,
               "max_verify_len": _VERIFY, "survival_eps": (0.0, 1.0), "graph_tiers": TIER_LADDERS},
    "threshold": {"block_size": _DRAFTS, "threshold": (0.0, 1.0), "max_verify_len": _VERIFY},
    "static": {"block_size": _DRAFTS},
    "dflash": {"block_size": _DRAFTS},
    "schedule": {"block_size": (0, MAX_DRAFTS), "bounds": None},  # None: increasing batch-size bounds
    "none": {},
}


@dataclass(frozen=True, slots=True)
class SearchSpace:
    """Knobs by section (``deployment`` and one per method); see :data:`DEFAULT_SPACE`."""

    sections: dict[str, dict[str, Knob]] = field(default_factory=lambda: DEFAULT_SPACE)

    def knob(self, section: str, name: str) -> Knob:
        return self.sections[section][name]

    def restricted(self, held: dict[str, dict], max_block: int) -> SearchSpace:
        """This space with ``held`` knobs fixed ({section: {knob: value}}) and every block size
        (or chain length) capped at ``max_block``, the drafter's trained block."""
        out = {}
        for section, knobs in self.sections.items():
            knobs = dict(knobs)
            for name, value in held.get(section, {}).items():
                if value == SCENARIO_VALUE:
                    knobs.pop(name, None)
                else:
                    knobs[name] = Choice((value,))
            if isinstance(knobs.get("block_size"), Range):
                knobs["block_size"] = _capped(knobs["block_size"], max_block)
            out[section] = knobs
        return SearchSpace(out)


def load_space(path: str | Path | None) -> SearchSpace:
    """The default space, with the overrides of the YAML file ``path`` (if any) applied."""
    sections = {name: dict(knobs) for name, knobs in DEFAULT_SPACE.items()}
    if path is None:
        return SearchSpace(sections)
    top = Section(load_yaml(path), path, "")
    for name in sections:
        sub = top.section(name)
        for key in list(sub.data):
            if key not in sections[name]:
                known = ", ".join(sections[name]) or "none"
                raise InputError(path, sub.path(key), sub.data[key], f"unknown knob for {name} (its knobs: {known})")
            knob = _knob(sub.raw(key), path, sub.path(key), sections[name][key])
            _check_legal(knob, LEGAL[name][key], path, sub.path(key), sub.raw(key))
            sections[name][key] = knob
        sub.done()
    top.done()
    return SearchSpace(sections)


def _capped(knob: Range, high: int) -> Range:
    """``knob`` with its upper end at most ``high`` (and its lower end not above that)."""
    hi = min(knob.high, high)
    return Range(min(knob.low, hi), hi, knob.log)


def _knob(value: Any, file, key: str, default: Knob) -> Knob:
    """Parse one override: scalar (fixed), list (categorical) or {low, high, log} (range)."""
    if isinstance(value, dict):
        s = Section(value, file, key)
        low, high = s.raw("low"), s.raw("high")
        log = s.boolean("log", False)
        s.done()
        for end, v in (("low", low), ("high", high)):
            check_number(v, file, f"{key}.{end}")
        if isinstance(default, Range) and default.is_int and not (isinstance(low, int) and isinstance(high, int)):
            raise InputError(file, key, value, "this knob is an integer: give integer low and high")
        if high < low or (log and low <= 0):
            raise InputError(file, key, value, "need low <= high (and low > 0 for log)")
        return Range(low, high, log)
    values = tuple(tuple(v) if isinstance(v, list) else v for v in (value if isinstance(value, list) else [value]))
    if not values:
        raise InputError(file, key, value, "give at least one value")
    return Choice(values)


def _check_legal(knob: Knob, legal: tuple | None, file, key: str, raw: Any) -> None:
    """Every value ``knob`` can draw is one the scenario accepts, else one InputError naming it."""
    if legal is None:  # schedule bounds: each a list of increasing batch sizes
        for bounds in knob.values if isinstance(knob, Choice) else [raw]:
            if not (isinstance(bounds, tuple) and bounds and all(is_int(b) and 1 <= b <= MAX_RUNNING_REQUESTS
                                                                 for b in bounds)
                    and list(bounds) == sorted(set(bounds))):
                raise InputError(file, key, raw, f"expected lists of increasing batch sizes in "
                                 f"[1, {MAX_RUNNING_REQUESTS}], e.g. [[8, 32, 128]]")
        return
    if isinstance(legal[0], str):
        bad = [v for v in (knob.values if isinstance(knob, Choice) else [raw]) if v not in legal]
        if bad:
            raise InputError(file, key, bad[0], f"expected one of {', '.join(legal)}")
        return
    low, high = legal
    whole = isinstance(low, int)
    values = knob.values if isinstance(knob, Choice) else (knob.low, knob.high)
    for v in values:
        if not (is_int(v) if whole else is_real(v)) or not low <= v <= high:
            raise InputError(file, key, v, f"expected {'an integer' if whole else 'a number'} in [{low}, {high}]")


def tail_probe(space: SearchSpace) -> dict:
    """Parameters of the first trial a TPOT-bound study runs: the smallest request cap and the
    largest prefill chunk the space allows (others sampled as usual).

    Few running requests share a step with a prefill chunk, and a large chunk needs few
    such steps, so this is where a TPOT tail is smallest; when even it misses the SLO, the
    report's nearest feasible SLO starts from it."""
    dep = space.sections["deployment"]
    out = {}
    for name, pick in (("max_running_requests", min), ("chunked_prefill_tokens", max)):
        knob = dep.get(name)
        if isinstance(knob, Range):
            out[name] = pick(knob.low, knob.high)
        elif isinstance(knob, Choice) and len(knob.values) > 1 and \
                all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in knob.values):
            out[name] = pick(knob.values)
    return out


# -- sampling -----------------------------------------------------------------
def draw(trial, name: str, knob: Knob, low: float | None = None, high: float | None = None):
    """Sample ``knob`` as parameter ``name``; ``low``/``high`` narrow a range (define-by-run)."""
    if isinstance(knob, Choice):
        if len(knob.values) == 1:
            return knob.values[0]
        if all(v is None or isinstance(v, (str, int, float, bool)) for v in knob.values):
            return trial.suggest_categorical(name, list(knob.values))
        # Optuna stores only scalars: tuples (schedule bounds) are drawn by index
        return knob.values[trial.suggest_categorical(name, list(range(len(knob.values))))]
    lo = knob.low if low is None else max(knob.low, low)
    hi = knob.high if high is None else min(knob.high, high)
    if hi <= lo:
        return type(knob.low)(lo) if knob.is_int else lo
    if knob.is_int:
        return trial.suggest_int(name, int(lo), int(hi), log=knob.log)
    return trial.suggest_float(name, float(lo), float(hi), log=knob.log)


def suggest(trial, method: str, space: SearchSpace) -> dict:
    """One configuration for ``method``, sampled define-by-run.

    Returns ``{"deployment": {...}, "speculation": {...}}``: scenario keys and
    values (``dspark_sim.scenario``), ready for :func:`dspark_sim.tuner.scenarios.configure`.
    """
    dep = space.sections["deployment"]
    deployment = {name: draw(trial, name, knob) for name, knob in dep.items()}
    speculation = _SPECULATION[method](trial, space.sections[method])
    return {"deployment": deployment, "speculation": speculation}


def _dspark(trial, knobs: dict[str, Knob]) -> dict:
    block_size = draw(trial, "block_size", knobs["block_size"], high=MAX_DRAFTS)
    scheduler = draw(trial, "scheduler", knobs["scheduler"])
    spec = {"method": "dspark", "drafter": "dspark", "block_size": block_size, "scheduler": scheduler}
    spec.update(_verify_lens(trial, knobs, block_size))
    spec["survival_eps"] = draw(trial, "survival_eps", knobs["survival_eps"])
    if scheduler == "production":  # Algorithm 1 has no lag and never pads
        spec["lag_steps"] = draw(trial, "lag_steps", knobs["lag_steps"])
        ladder = draw(trial, "graph_tiers", knobs["graph_tiers"])
        if ladder != "none":
            spec["graph_tiers"] = ladder
            spec["pad_to_graph_tier"] = True
    return spec


def _verify_lens(trial, knobs: dict[str, Knob], block_size: int) -> dict:
    """Min and max verify length (anchor counted), each within the window [1, block_size + 1],
    min <= max.

    A knob held at ``None`` is left to the scenario default (max: block_size + 1); one held
    at :data:`FULL_WINDOW` is block_size + 1 (every draft verified)."""
    out = {}
    lo = 1
    for name in ("min_verify_len", "max_verify_len"):
        if name not in knobs:
            continue
        knob = knobs[name]
        if isinstance(knob, Choice) and len(knob.values) == 1 and knob.values[0] in (None, FULL_WINDOW):
            if knob.values[0] == FULL_WINDOW:
                out[name] = lo = block_size + 1
            continue
        value = draw(trial, name, knob, low=lo if name == "max_verify_len" else None, high=block_size + 1)
        out[name] = value
        lo = value if name == "min_verify_len" else lo
    return out


def _threshold(trial, knobs: dict[str, Knob]) -> dict:
    block_size = draw(trial, "block_size", knobs["block_size"], high=MAX_DRAFTS)
    spec = {"method": "threshold", "drafter": "dspark", "block_size": block_size,
            "threshold": draw(trial, "threshold", knobs["threshold"])}
    spec.update(_verify_lens(trial, knobs, block_size))
    return spec


def _static(trial, knobs: dict[str, Knob]) -> dict:
    """A chain drafter verifying all its drafts (its kind comes from the held ``drafter`` knob)."""
    block_size = draw(trial, "block_size", knobs["block_size"], low=1, high=MAX_DRAFTS)
    return {"method": "static", "drafter": _drafter(knobs, "mtp"), "block_size": block_size}


def _dflash(trial, knobs: dict[str, Knob]) -> dict:
    """DFlash: a block drafter whose whole block is verified every step."""
    block_size = draw(trial, "block_size", knobs["block_size"], low=1, high=MAX_DRAFTS)
    return {"method": "static", "drafter": "dflash", "block_size": block_size}


def _drafter(knobs: dict[str, Knob], default: str) -> str:
    knob = knobs.get("drafter")
    return knob.values[0] if isinstance(knob, Choice) else default


def _schedule(trial, knobs: dict[str, Knob]) -> dict:
    """A block size per batch-size bucket; drafts never grow with the batch (cumulative minimum)."""
    bounds = draw(trial, "bounds", knobs["bounds"])
    sizes, cap = [], MAX_DRAFTS
    for i in range(len(bounds) + 1):
        cap = min(cap, draw(trial, f"block_size_{i}", knobs["block_size"], low=0, high=MAX_DRAFTS))
        sizes.append(cap)
    if sizes[0] == 0:  # a schedule that never drafts is the no-speculation baseline
        sizes[0] = 1
    rules = [{"max_batch_size": b, "block_size": size} for b, size in zip((*bounds, None), sizes)]
    return {"method": "schedule", "drafter": _drafter(knobs, "mtp"), "block_size": max(sizes), "schedule": rules}


def _none(trial, knobs: dict[str, Knob]) -> dict:
    return {"method": "none"}


_SPECULATION = {"dspark": _dspark, "threshold": _threshold, "static": _static, "dflash": _dflash,
                "schedule": _schedule, "none": _none}


def tier_ladder(name: str, max_tokens: int) -> list[int]:
    """Captured verify-token tiers of a named ladder, up to ``max_tokens``."""
    if name == "pow2":
        tiers = [1 << i for i in range(max_tokens.bit_length()) if 1 << i <= max_tokens]
    elif name in ("step16", "step64"):
        step = int(name[4:])
        tiers = [1, 2, 4, 8, *range(step, max_tokens + 1, step)]
    else:
        raise ValueError(f"unknown graph-tier ladder {name!r}")
    return sorted(set(t for t in tiers if t <= max_tokens))
