"""A drafter's fitted step (:class:`DraftFit`): its terms checked on construction and evaluated
on Python floats or arrays, as :mod:`dspark_sim.cost.terms` does the target's."""
from __future__ import annotations

from dataclasses import dataclass, replace

from dspark_sim.cost.shapes import Ops, held, roof, scaled_terms
from dspark_sim.cost.term_checks import check_knots, check_terms, fail

DRAFT_KINDS = ("block", "chain")
DRAFT_BOUNDS = {"bias_s": "fixed", "launch_s": "fixed", "weights_s": "memory",
                "flop_s_per_token": "compute", "mem_s_per_token": "memory",
                "kv_s_per_token": "memory"}


@dataclass(frozen=True)
class DraftFit:
    """Fitted drafter step over R requests and block size g (summed context S).

    block: bias_s + launch_s*g + lin(R'*g) + kv_s_per_token*S
    chain: bias_s + g*(launch_s + lin(R') + kv_s_per_token*S)
    lin(u) = (roof(weights_s, flop_s_per_token, u, sharpness) + mem_s_per_token*u)*(1 + ratio(u))

    R' = R, or with ``request_tiers`` the request tier the drafter's CUDA graph runs over
    (the next power of two of R: the measured decoder pads its request table to it,
    kernels/decoder/graphs.py ``request_tier``). The padding rows hold no context (S is the
    requests' own).

    The profiler times the drafter alone, its graph replayed back to back. Inside a served step,
    right after the target's forward, the same drafter runs longer: with ``step_knots`` (requests)
    the whole drafter step takes ``1 + step_ratio(R)`` (interpolated, clamped) times the above,
    fitted on whole decode steps timed as served (:mod:`dspark_sim.profiling.draft_step`).
    """

    kind: str
    bias_s: float
    launch_s: float
    weights_s: float
    flop_s_per_token: float
    mem_s_per_token: float
    sharpness: float
    kv_s_per_token: float
    knots: tuple[float, ...] = ()
    ratio: tuple[float, ...] = ()
    request_tiers: bool = False
    step_knots: tuple[float, ...] = ()
    step_ratio: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        if self.kind not in DRAFT_KINDS:
            fail("kind", self.kind, f"must be one of {DRAFT_KINDS}")
        if not isinstance(self.request_tiers, bool):
            fail("request_tiers", self.request_tiers, "must be true or false")
        check_terms(self, DRAFT_BOUNDS)
        check_knots("knots", self.knots, "ratio", self.ratio)
        check_knots("step_knots", self.step_knots, "step_ratio", self.step_ratio)
        for name in ("ratio", "step_ratio"):
            if any(r <= -1 for r in getattr(self, name)):
                fail(name, list(getattr(self, name)), "ratios must be > -1 (a positive factor)")
        object.__setattr__(self, "_fixed", {})  # (R, g) -> fixed_s; not a field (nor in the file)

    def seconds(self, reqs, block_size, ctx, ops: Ops, fixed=None):
        """Draft seconds; floats or arrays, ``ops`` to match. ``fixed``: :meth:`fixed_s` of these
        requests and block size, when known."""
        if fixed is None:
            fixed = self.fixed_s(reqs, block_size, ops)
        if self.kind == "block":
            alone = fixed + self.kv_s_per_token * ctx
        else:
            alone = self.bias_s + block_size * (fixed + self.kv_s_per_token * ctx)
        if not self.step_knots:
            return alone
        return alone * (1.0 + ops.interp(self.step_knots, self.step_ratio, reqs))

    def fixed_s(self, reqs, block_size, ops: Ops):
        """The part of :meth:`seconds` before its context term: bias_s + launch_s*g + lin(R*g)
        (block) or launch_s + lin(R) (chain), R at its request tier with ``request_tiers``."""
        return held(self._fixed, self._fixed_s, reqs, block_size, ops)

    def _fixed_s(self, reqs, block_size, ops: Ops):
        if self.request_tiers:
            reqs = ops.pow2(reqs)
        units = reqs * block_size if self.kind == "block" else reqs
        lin = roof(self.weights_s, self.flop_s_per_token, units, self.sharpness, ops.power) \
            + self.mem_s_per_token * units
        if self.knots:
            lin = lin * (1.0 + ops.interp(self.knots, self.ratio, units))
        if self.kind == "block":
            return self.bias_s + self.launch_s * block_size + lin
        return self.launch_s + lin

    def alone(self) -> DraftFit:
        """The drafter step as the profiler times it: without the in-step ratio."""
        return replace(self, step_knots=(), step_ratio=())

    def detail(self, how: str) -> str:
        """``how`` the drafter was timed, and its in-step ratio where it has one (a run's provenance)."""
        if not self.step_knots:
            return how
        span = ", ".join(f"{100 * r:+.1f} % at {k:g}" for k, r in zip(self.step_knots, self.step_ratio))
        return (f"{how}; inside a served step, after the target's forward, the drafter step runs longer than "
                f"timed alone: {span} requests (interpolated, clamped; fitted on whole decode steps)")

    def scaled(self, ratio: dict) -> DraftFit:
        """Terms scaled by ``ratio`` = {"memory": x, "compute": y}."""
        return scaled_terms(self, DRAFT_BOUNDS, ratio)
