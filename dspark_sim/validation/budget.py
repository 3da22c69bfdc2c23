"""A device call's time, spent on whole units: which sweeps a budgeted fidelity run serves.

The decoder is built once per method (its warm-up compiles and captures every step shape),
so a run serves every selected case of one method before the next. A unit (a load sweep:
one trace family under one batching at every level) is worth something only when every
method served all of it. :class:`Budget` decides, before each unit of each method, whether
the time left covers that unit for this method *and* for every method after it (which then
owe it too), from estimated seconds per case (the simulator's busy time, written beside the
cases by ``python benchmarks/fidelity.py cases --sweeps``) scaled by how the cases served so
far compared with their estimates. A method serves only the units every earlier method
finished. A run cut short therefore leaves whole units and no scattered points, unless the
estimates were far off.
"""
from __future__ import annotations

from dataclasses import dataclass, field

OVERHEAD_S = 1.0  # per case outside the serving loop: the scenario, the trace's tokens, the record
MARGIN = 1.1  # estimates are the simulator's, optimistic at saturation: room for that


@dataclass(frozen=True, slots=True)
class Unit:
    """Cases (trace names, without the method) that are worth serving only together."""

    name: str
    traces: tuple[str, ...]


@dataclass
class Budget:
    """Time left for ``units`` x ``methods`` (methods in serving order) within ``limit_s``.

    ``estimate_s[(trace, method)]``: expected serving seconds of a case; ``warmup_s[method]``:
    the expected build and warm-up of a method's decoder. Call :meth:`allows` before a unit,
    :meth:`served` after each case, :meth:`finished` after a unit."""

    units: list[Unit]
    methods: list[str]
    estimate_s: dict
    warmup_s: dict
    limit_s: float
    overhead_s: float = OVERHEAD_S
    margin: float = MARGIN
    done: dict = field(default_factory=dict)  # method -> names of the units it finished
    _actual: float = 0.0
    _estimated: float = 0.0

    def _case_s(self, trace: str, method: str) -> float:
        return self.estimate_s.get((trace, method), 0.0) * self.margin * self.scale + self.overhead_s

    @property
    def scale(self) -> float:
        """How much longer the cases served so far took than estimated (never below 1)."""
        return max(1.0, self._actual / self._estimated) if self._estimated > 0 else 1.0

    def unit_s(self, unit: Unit, method: str) -> float:
        return sum(self._case_s(t, method) for t in unit.traces)

    def estimate(self) -> float:
        """Expected seconds of the whole run, every method's warm-up included."""
        return sum(self.warmup_s.get(m, 0.0) + sum(self.unit_s(u, m) for u in self.units) for m in self.methods)

    def eligible(self, method: str) -> list[Unit]:
        """The units ``method`` may serve: those every earlier method finished (all of them
        for the first, each then admitted by :meth:`allows`)."""
        k = self.methods.index(method)
        if k == 0:
            return list(self.units)
        before = self.done.get(self.methods[k - 1], [])
        return [u for u in self.units if u.name in before]

    def allows(self, method: str, unit: Unit, elapsed_s: float) -> bool:
        """Whether ``method`` may start ``unit`` at ``elapsed_s``: it and every later method
        (their warm-ups, the units they owe with this one) still fit."""
        k = self.methods.index(method)
        owed = [u for u in self.units if u.name in self.done.get(method, [])] + [unit]
        need = self.unit_s(unit, method)
        for later in self.methods[k + 1:]:
            need += self.warmup_s.get(later, 0.0) + sum(self.unit_s(u, later) for u in owed)
        return elapsed_s + need <= self.limit_s

    def served(self, trace: str, method: str, wall_s: float) -> None:
        """A case took ``wall_s`` serving seconds."""
        est = self.estimate_s.get((trace, method))
        if est:
            self._actual += wall_s
            self._estimated += est

    def finished(self, method: str, unit: Unit) -> None:
        self.done.setdefault(method, []).append(unit.name)
