"""Load sweeps of the fidelity suite: three kinds of traffic at five loads around saturation.

A *family* is one kind of traffic: chat-like prompts (``sw-chat``), long prompts of several
thousand tokens (``sw-long``) and multi-turn sessions over shared system prompts served with
the prefix cache on (``sw-sess``). Each is served at :data:`LEVELS` times its saturation rate
(:attr:`Family.saturation_rps`: the highest request rate any of the three methods sustains
under either batching, as the simulator estimates it, :func:`estimate_saturation`), under both
batchings, for no speculation, MTP-3 and DSpark. A level is the request rate of its trace's
window: for sessions, whose turns build up after the sessions start, the session rate whose
window holds that many requests. The methods and the two batchings of a level serve the same
arrivals, so they compare at equal load. A level's trace holds the requests of the family's
:attr:`Family.span_s` seconds at its rate: short enough that a whole sweep fits a device call,
long enough that the loads past saturation fill the running set and queue (the light levels,
which queue nothing, over a shorter span: :data:`LIGHT_SPAN`).

A *sweep* (:class:`Sweep`) is one family under one batching at every level: the unit a
budgeted run keeps whole (:mod:`~dspark_sim.validation.budget`). The cases are ordinary fidelity
cases (:func:`~dspark_sim.validation.cases.make_cases` writes them, into their own directory):
``sw-chat-090`` is the chat family at 0.9 times saturation under ``prefill_first``,
``sw-chat-090-mixed`` the same arrivals under ``mixed``.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dspark_sim.errors import InputError
from dspark_sim.validation.cases import SESSIONS

LEVELS = (0.3, 0.6, 0.9, 1.2, 1.5)  # times the family's saturation rate
LIGHT, LIGHT_SPAN = 0.75, 0.6  # levels below LIGHT arrive over LIGHT_SPAN of the family's span
BATCHINGS = ("mixed", "prefill_first")
MIXED = "-mixed"


@dataclass(frozen=True, slots=True)
class Family:
    """One kind of traffic. ``saturation_rps``: the request rate at which the fastest method
    stops keeping up (:func:`estimate_saturation`); ``span_s``: seconds of arrivals at every
    level; ``prompt_mean``: mean prompt tokens (synthetic); ``turn_gap_s``: mean gap between a
    session's turns (sessions)."""

    name: str
    source: str
    span_s: float
    saturation_rps: float
    seed: int
    prompt_mean: int = 768
    turn_gap_s: float = 0.0

    def workload(self) -> dict:
        """The sessions workload (in place of the fixed cases' :data:`SESSIONS`)."""
        return {**SESSIONS, "sessions": {**SESSIONS["sessions"], "turn_gap_s": self.turn_gap_s}}


# saturation_rps: python benchmarks/fidelity.py saturation (the simulator on the shipped H200
# profile, the highest of the three methods and two batchings, rounded; see estimate_saturation)
FAMILIES = (
    Family("sw-chat", "synthetic", 4.6, 38.0, 31),
    Family("sw-sess", "sessions", 4.6, 28.0, 32, turn_gap_s=0.3),
    Family("sw-long", "synthetic", 5.0, 8.8, 33, prompt_mean=4000),
)
ORDER = (("sw-chat", "mixed"), ("sw-chat", "prefill_first"), ("sw-sess", "mixed"),
         ("sw-sess", "prefill_first"), ("sw-long", "mixed"), ("sw-long", "prefill_first"))


@dataclass(frozen=True, slots=True)
class Sweep:
    """One family under one batching at every level: ``traces`` are its case names (without a
    method), lowest load first."""

    family: str
    batching: str
    traces: tuple[str, ...]

    @property
    def name(self) -> str:
        return f"{self.family}:{self.batching}"


def family(name: str) -> Family:
    for f in FAMILIES:
        if f.name == name:
            return f
    raise InputError(None, "family", name, f"expected one of {[f.name for f in FAMILIES]}")


def trace_name(fam: Family, level: float, batching: str) -> str:
    """The case name (without a method) of ``fam`` at ``level`` under ``batching``."""
    return f"{fam.name}-{round(level * 100):03d}" + (MIXED if batching == "mixed" else "")


def level_of(name: str) -> tuple[str, float, str]:
    """``(family, level, batching)`` of a sweep case name such as ``sw-chat-090-mixed``."""
    base, batching = (name[:-len(MIXED)], "mixed") if name.endswith(MIXED) else (name, "prefill_first")
    fam, _, level = base.rpartition("-")
    return fam, int(level) / 100, batching


def trace_table(families=FAMILIES) -> dict:
    """Every sweep case as :data:`~dspark_sim.validation.cases.TRACES` entries, in :data:`ORDER`."""
    table = {}
    for fam_name, batching in ORDER:
        fam = next((f for f in families if f.name == fam_name), None)
        if fam is None:
            continue
        for level in LEVELS:
            span = fam.span_s * (LIGHT_SPAN if level < LIGHT else 1.0)
            rate = source_rate(fam, level * fam.saturation_rps, span)
            load = (rate, fam.seed, fam.workload() if fam.source == "sessions" else fam.prompt_mean)
            table[trace_name(fam, level, batching)] = (fam.source, arrivals_within(fam, rate, span), load, batching)
    return table


def source_rate(fam: Family, rps: float, span_s: float) -> float:
    """The rate of the family's arrival process (sessions/s for sessions) whose first ``span_s``
    seconds hold ``rps`` requests a second."""
    if fam.source != "sessions":
        return rps
    want, lo, hi = rps * span_s, rps / 64, rps  # a session makes at least one request
    for _ in range(30):  # bisection on the session rate (the count grows with it)
        mid = (lo * hi) ** 0.5
        lo, hi = (mid, hi) if arrivals_within(fam, mid, span_s) < want else (lo, mid)
    return round(hi, 4)


def arrivals_within(fam: Family, rate: float, span_s: float) -> int:
    """How many requests the family's trace at ``rate`` holds for a window of ``span_s``: a
    Poisson process's ``rate * span_s`` (its count in the window would vary by a fifth at the
    lightest levels), the sessions' count within the window (at least 8)."""
    if fam.source != "sessions":
        return max(8, round(rate * span_s))
    from dspark_sim.workload import SyntheticConfig, synthetic_requests

    cap = int(rate * span_s * 40) + 64  # more than the sessions' turns can make in the span
    cfg = SyntheticConfig.from_dict({"num_requests": cap, "rate_per_s": rate, **fam.workload()}, file=None)
    arrival = np.concatenate([c.arrival_s for c in synthetic_requests(cfg, fam.seed)])
    return max(8, int(np.count_nonzero(arrival < span_s)))


def sweeps(only: list[str] | None = None, batchings: list[str] | None = None) -> list[Sweep]:
    """The sweeps in :data:`ORDER`; ``only`` names families (``sw-chat``) or sweeps
    (``sw-chat:mixed``), ``batchings`` keeps those batchings."""
    known = {f.name for f in FAMILIES} | {f"{f}:{b}" for f, b in ORDER}
    for name in only or ():
        if name not in known:
            raise InputError(None, "--only", name, f"expected families or sweeps among {sorted(known)}")
    out = []
    for fam_name, batching in ORDER:
        if only and fam_name not in only and f"{fam_name}:{batching}" not in only:
            continue
        if batchings and batching not in batchings:
            continue
        fam = family(fam_name)
        out.append(Sweep(fam_name, batching, tuple(trace_name(fam, x, batching) for x in LEVELS)))
    return out


# -- where saturation lies (the simulator; CPU) ------------------------------------------
SATURATION_SPAN_S = 40.0  # a window long enough for a queue to build past saturation
GROWTH = 3.0  # sustained: no later quarter's mean TTFT beyond this factor of the first quarter's


def estimate_saturation(fam: Family, batching: str, method: str, *, precision: float = 0.03,
                        span_s: float | None = SATURATION_SPAN_S) -> float:
    """The highest request rate of the family's traffic at which the simulated decoder (the
    shipped profile, the fidelity cases' deployment) keeps up: over :data:`SATURATION_SPAN_S`
    seconds of arrivals, no quarter of the requests (in arrival order) waits for its first token
    on average more than :data:`GROWTH` times as long as the first quarter (past saturation the queue, and with
    it the time to first token, grows for as long as requests arrive; under ``mixed`` batching
    a request is scheduled at once and waits in its prefill, so the wait for a first step would
    not show it). Bisected geometrically to ``precision`` from the family's recorded rate."""
    import tempfile
    from pathlib import Path

    from dspark_sim.capacity.search import Probe, bisect_rate
    from dspark_sim.run import run_scenario
    from dspark_sim.scenario import load_scenario
    from dspark_sim.validation.cases import make_cases

    def evaluate(x: float) -> Probe:
        rps = x * fam.saturation_rps
        span = span_s or fam.span_s
        rate = source_rate(fam, rps, span)
        load = (rate, fam.seed, fam.workload() if fam.source == "sessions" else fam.prompt_mean)
        table = {"probe": (fam.source, arrivals_within(fam, rate, span), load, batching)}
        with tempfile.TemporaryDirectory() as tmp:
            make_cases(Path(tmp), Path(tmp) / "unused", table=table)
            _, result = run_scenario(load_scenario(Path(tmp) / f"probe__{method}.yaml"), None, plots=False,
                                     show_progress=False)
        req = result.collector.requests
        ttft = req.ttft_ms[np.argsort(req.arrival_s, kind="stable")]
        quarters = [q.mean() for q in np.array_split(ttft, 4) if q.size]
        return Probe(x, rps, max(quarters[1:], default=0.0) <= GROWTH * quarters[0], 1.0)
    return bisect_rate(evaluate, start=1.0, precision=precision, max_sims=12).rate_rps


# -- the cases and what serving them should take ----------------------------------------
PLAN = "plan.json"  # beside the sweep cases: estimated serving seconds of every case
WARMUP_S = {"dspark": 90.0, "mtp3": 20.0, "none": 8.0}  # decoder build and warm-up (visit16: 82, 16, 4 s)


def write_cases(cases_dir, azure_trace, families=FAMILIES) -> list:
    """Every sweep case (traces, scenarios, the SPS table) into ``cases_dir``, and :data:`PLAN`:
    each case's serving seconds as the simulator (shipped profile) estimates them, the busy time
    of its steps, which is what the decoder spends on it (it skips idle gaps)."""
    import json
    from pathlib import Path

    from dspark_sim.run import run_scenario
    from dspark_sim.scenario import load_scenario
    from dspark_sim.validation.cases import make_cases

    cases_dir = Path(cases_dir)
    paths = make_cases(cases_dir, azure_trace, table=trace_table(families))
    estimate = {}
    for path in paths:
        _, result = run_scenario(load_scenario(path), None, plots=False, show_progress=False)
        estimate[path.stem] = round(float(np.sum(result.collector.steps.step_s)), 2)
    plan = {"what": "seconds each sweep case keeps the decoder busy, as the simulator estimates them "
                    "(shipped profile): the budget of a device call (dspark_sim/validation/budget.py)",
            "made_by": "python benchmarks/fidelity.py cases --sweeps", "warmup_s": WARMUP_S,
            "levels": list(LEVELS), "families": {f.name: {"source": f.source, "span_s": f.span_s,
                                                          "saturation_rps": f.saturation_rps} for f in families},
            "estimate_s": estimate}
    (cases_dir / PLAN).write_text(json.dumps(plan, indent=1) + "\n")
    return paths


def budget(cases_dir, limit_s: float, only=None, batchings=None, methods=None):
    """The :class:`~.budget.Budget` of a run over the sweeps (:func:`sweeps`) in ``cases_dir``."""
    import json
    from pathlib import Path

    from dspark_sim.validation.budget import Budget, Unit
    from dspark_sim.validation.cases import CASE_METHODS

    plan = json.loads((Path(cases_dir) / PLAN).read_text())
    estimate = {tuple(name.split("__")): s for name, s in plan["estimate_s"].items()}
    units = [Unit(s.name, s.traces) for s in sweeps(only, batchings)]
    return Budget(units, list(methods or CASE_METHODS), estimate, plan["warmup_s"], limit_s)
