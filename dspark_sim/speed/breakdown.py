"""Where the simulator's time goes: the phases of a run (``PHASES``: the functions whose time
is each phase's), a run with every phase's functions wrapped by a timer, and its table and page.

A phase's time is what is spent inside its functions and not inside another phase's (a phase's
function called from another phase counts to the inner one), so the phases sum to the run; what
runs outside all of them (simpy's event loop, the run's own frame) is :data:`REST`.
"""
from __future__ import annotations

import importlib
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from dspark_sim.metrics.run_summary import RunSummary
from dspark_sim.speed.cases import CASES, Case, sliced


REST = "simpy and the rest"


# phase -> the functions whose time (less nested phases') is the phase's: "module:Class.attr"
PHASES = {
    "arrival and admission": ("dspark_sim.serving.simulator:_arrivals", "dspark_sim.serving.replica:Replica.submit",
                              "dspark_sim.serving.replica:Replica._admit_planned",
                              "dspark_sim.serving.replica:Replica._admit"),
    "step-by-step steps (prefill)": ("dspark_sim.serving.replica:Replica._plan",
                                     "dspark_sim.serving.replica:Replica._finish",
                                     "dspark_sim.serving.replica:Replica._stream"),
    "stretch planning": ("dspark_sim.serving.replica:Replica._stretch",),
    "segment bookkeeping": ("dspark_sim.serving.stretch:Segments.add", "dspark_sim.serving.stretch:Segments.decode",
                            "dspark_sim.serving.stretch:Segments.budget", "dspark_sim.serving.stretch:Segments.matrices",
                            "dspark_sim.serving.stretch:Segments.keep", "dspark_sim.serving.draw:Draw.keep"),
    "acceptance draws, policy planning": ("dspark_sim.serving.draw:Draw.__init__",),
    "pricing (cost model)": ("dspark_sim.cost.profile:ProfileCost.breakdown_array",),
    "applying stretches": ("dspark_sim.serving.replica:Replica._apply_stretch",
                           "dspark_sim.serving.replica:Replica._retire"),
    "per-request records": tuple(f"dspark_sim.metrics.collector:Collector.{m}" for m in
                                 ("advance", "on_reject", "on_gaps", "on_stretch", "on_step", "on_finish")),
    "steps.csv, requests.csv writing": tuple(f"dspark_sim.metrics.record:RecordWriter.{m}" for m in
                                             ("request", "requests", "step", "steps", "_flush", "close")),
    "step loop (replica)": ("dspark_sim.serving.replica:Replica._loop",),
    "setup and summary": ("dspark_sim.serving.simulator:build_context", "dspark_sim.serving.simulator:check_run",
                          "dspark_sim.metrics.summary:summarize", "dspark_sim.run:write_provenance"),
}


NAMES = list(PHASES) + [REST]


# events counted by calls: stretches, step-by-step steps, segment draws
EVENTS = {"stretches": "dspark_sim.serving.replica:Replica._apply_stretch",
          "steps": "dspark_sim.serving.replica:Replica._plan", "draws": "dspark_sim.serving.draw:Draw.__init__"}


DEFAULT_CASES = ("chat-none", "chat-dspark", "code-none", "code-dspark")


@dataclass
class Clock:
    """Exclusive seconds and calls per phase; a stack of the phases entered."""

    seconds: list = field(default_factory=lambda: [0.0] * len(NAMES))
    calls: dict = field(default_factory=dict)
    stack: list = field(default_factory=list)
    last: float = 0.0

    def enter(self, phase: int, target: str) -> None:
        now = time.perf_counter()
        self.seconds[self.stack[-1] if self.stack else -1] += now - self.last
        self.stack.append(phase)
        self.last = now
        self.calls[target] = self.calls.get(target, 0) + 1

    def leave(self) -> None:
        now = time.perf_counter()
        self.seconds[self.stack.pop()] += now - self.last
        self.last = now


def resolve(target: str):
    """(owner, attribute name, function) of ``module:Class.attr``; a name that no longer exists fails."""
    module, path = target.split(":")
    owner = importlib.import_module(module)
    *parents, attr = path.split(".")
    for name in parents:
        owner = getattr(owner, name)
    return owner, attr, owner.__dict__[attr] if isinstance(owner, type) else getattr(owner, attr)


def _wrapped(fn, clock: Clock, phase: int, target: str):
    import functools
    import inspect

    if inspect.isgeneratorfunction(fn):  # time each resumption (simpy sends and throws into it)
        @functools.wraps(fn)
        def gen(*args, **kwargs):
            inner, value, error = fn(*args, **kwargs), None, None
            while True:
                clock.enter(phase, target)
                try:
                    out = inner.send(value) if error is None else inner.throw(error)
                except StopIteration as stop:
                    clock.leave()
                    return stop.value
                except BaseException:
                    clock.leave()
                    raise
                clock.leave()
                value, error = None, None
                try:
                    value = yield out
                except BaseException as e:  # noqa: BLE001 - passed on into the wrapped generator
                    error = e
        return gen

    @functools.wraps(fn)
    def call(*args, **kwargs):
        clock.enter(phase, target)
        try:
            return fn(*args, **kwargs)
        finally:
            clock.leave()
    return call


def run(case: Case, tmp: Path) -> RunSummary:
    """One run of ``case`` as ``dspark-sim run`` makes it (run record written, no plots)."""
    from dspark_sim.run import run_scenario
    from dspark_sim.scenario import load_scenario

    path = tmp / f"{case.name}.yaml"
    path.write_text(yaml.safe_dump(case.scenario))
    summary, _ = run_scenario(load_scenario(str(path)), tmp / f"out-{time.monotonic_ns()}", plots=False,
                              show_progress=False)
    return summary


def profile(case: Case, tmp: Path) -> dict:
    """Run ``case`` with every phase's functions timed: seconds per phase (summing to the run),
    calls per event kind, the run's wall seconds measured around it, requests completed."""
    clock = Clock()
    patched = []
    try:
        for phase, targets in enumerate(PHASES.values()):
            for target in targets:
                owner, attr, fn = resolve(target)
                patched.append((owner, attr, fn))
                timed = property(_wrapped(fn.fget, clock, phase, target)) if isinstance(fn, property) \
                    else _wrapped(fn, clock, phase, target)
                setattr(owner, attr, timed)
        started = clock.last = time.perf_counter()
        summary = run(case, tmp)
        ended = time.perf_counter()
        clock.seconds[-1] += ended - clock.last
    finally:
        for owner, attr, fn in reversed(patched):
            setattr(owner, attr, fn)
    return {"seconds": dict(zip(NAMES, clock.seconds)), "wall_s": ended - started,
            "events": {k: clock.calls.get(t, 0) for k, t in EVENTS.items()},
            "wrapped_calls": sum(clock.calls.values()), "requests": summary.completed}


def whole_requests(case: Case, run_requests: int) -> int:
    """Requests of the whole case (its target's), where ``run_requests`` ran a slice or all of it."""
    synthetic = case.scenario["workload"].get("synthetic")
    return synthetic["num_requests"] if synthetic else run_requests


def measure(name: str, requests: int, tmp: Path) -> dict:
    """A row: the case plain (after a warm-up), then profiled, with the budget its target implies."""
    case = CASES[name]
    timed = sliced(case, requests) or case
    run(sliced(case, 50) or timed, tmp)  # imports and caches: the plain run is warm, as the profiled one
    started = time.perf_counter()
    plain = run(timed, tmp)
    plain_s = time.perf_counter() - started
    load_before = os.getloadavg()[0]
    prof = profile(timed, tmp)
    whole = whole_requests(case, plain.completed)
    return {"case": name, "label": timed.label, "target_s": case.target_s, "whole_requests": whole,
            "budget_us_per_request": case.target_s / whole * 1e6, "plain_wall_s": plain_s,
            "load_before": load_before, "load_after": os.getloadavg()[0]} | prof


def table(row: dict) -> list[str]:
    """One case's lines: head, a line per phase, total."""
    n, ev = row["requests"], row["events"]
    events = ev["stretches"] + ev["steps"]
    total = sum(row["seconds"].values())
    lines = [(f"{row['label']}: {n:,} requests; a request: {ev['stretches'] / n:.2f} stretches, "
              f"{ev['steps'] / n:.2f} step-by-step steps, {ev['draws'] / n:.2f} segment draws; "
              f"run {row['wall_s']:.2f} s profiled, {row['plain_wall_s']:.2f} s plain; load "
              f"{row['load_before']:.1f}-{row['load_after']:.1f}"),
             (f"budget: {row['budget_us_per_request']:.0f} us a request ({row['target_s']:g} s target / "
              f"{row['whole_requests']:,} requests of the whole case)"),
             f"  {'phase':<36}{'us/req':>9}{'us/event':>10}{'share':>8}{'x budget':>10}"]
    budget = row["budget_us_per_request"]
    for name, s in list(row["seconds"].items()) + [("total", total)]:
        us = s / n * 1e6
        lines.append(f"  {name:<36}{us:>9.1f}{s / events * 1e6:>10.1f}{s / total:>8.1%}{us / budget:>10.2f}")
    return lines


def markdown(data: dict) -> str:
    """docs/bench/sim_breakdown.md from its JSON."""
    made = (f"Made by `{data['command']}` at commit {data['commit']} on {data['date']} ({data['cpu']}, "
            f"{data['cores']} cores, python {data['python']}, one core). Measured, one run each.")
    how = ("Each case runs once plain and once with the functions of each phase timed "
           "(`benchmarks/sim_breakdown.py` names them): a phase's time is spent in its functions and not in "
           "another phase's called from them, so the phases sum to the profiled run; `simpy and the rest` is "
           "what runs outside all of them. `us/event` divides by the stretches and step-by-step steps. The "
           "budget is the case's target in `bench_sim.py` over the requests of the whole case (`x budget`: a "
           "phase's microseconds a request over it); a synthetic case (the chat hour, the million requests) runs "
           "as a slice of its first requests, the row's count, whose requests cost about what the whole case's "
           "do, its traffic being steady. "
           "`load` is the 1-minute load average before and after the profiled run: the machine is shared, "
           "and times are longer where it passes the two cores.")
    source = (f" The figures are in `{data['file']}`; this page is made from it "
              "(`python benchmarks/doc_blocks.py write`).")
    body = "\n\n".join("\n".join(table(r)) for r in data["rows"])
    return f"{made} {how}{source}\n\n```\n{body}\n```\n"
