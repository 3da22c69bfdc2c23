"""The scenario's ``speculation:`` section: the method, its knobs, and the drafter's acceptance."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from dspark_sim.acceptance.config import AcceptanceConfig
from dspark_sim.catalog.drafters import absolute_checkpoint, check_checkpoint
from dspark_sim.config import (Section, build, check_bool, check_choice, check_int, check_real, is_int, located,
                               require)
from dspark_sim.errors import InputError
from dspark_sim.userfiles import existing_file
from dspark_sim.names import BLOCK_DRAFTERS, DRAFTERS, METHODS

SCHEDULERS = ("production", "algorithm1")
MAX_BLOCK_SIZE = 16  # the verify tile of the kernels holds 16 tokens
# Defaults that depend on the method: DSpark's block of 7 (the paper's Qwen3 runs), MTP-3 chains.
CONFIDENCE_METHODS = ("dspark", "threshold")


@dataclass(frozen=True, slots=True)
class ScheduleRule:
    """Draft ``block_size`` tokens a request while the batch has at most ``max_batch_size`` requests."""

    max_batch_size: int | None
    block_size: int

    def __post_init__(self) -> None:
        check_int(self.max_batch_size, "max_batch_size", 1, optional=True)
        check_int(self.block_size, "block_size", 0, MAX_BLOCK_SIZE)

    @classmethod
    def from_dict(cls, raw, *, file=None, key: str) -> ScheduleRule:
        """One ``{max_batch_size, block_size}`` entry (``num_draft_tokens`` is the older name)."""
        s = Section(raw, file, key)
        size, alias = s.raw("block_size"), s.raw("num_draft_tokens")
        kwargs = {"max_batch_size": s.raw("max_batch_size"), "block_size": size if size is not None else alias or 0}
        s.done()
        return build(cls, kwargs, file, key)


@dataclass(frozen=True, slots=True)
class Speculation:
    """Speculative decoding method and its knobs (DSPARK.md section 3)."""

    method: str = "none"
    drafter: str = "dspark"
    block_size: int = 7  # tokens drafted per request per step
    scheduler: str = "production"
    lag_steps: int = 2
    min_verify_len: int = 1  # counts the anchor
    max_verify_len: int | None = None  # counts the anchor; None = block_size + 1
    survival_eps: float = 1e-6
    threshold: float = 0.5
    schedule: tuple[ScheduleRule, ...] = ()
    graph_tiers: tuple[int, ...] = ()
    pad_to_graph_tier: bool = False
    sps_table: Path | None = None
    sts: Path | None = None  # SGLang STS JSON; its temperatures replace the preset's
    acceptance: AcceptanceConfig = field(default_factory=AcceptanceConfig)
    # the drafter's weights an engine loads: a Hugging Face id (org/name) or an absolute path;
    # the simulator does not read it, exports name it (dspark_sim.catalog.drafters)
    drafter_checkpoint: str | None = None

    def __post_init__(self) -> None:
        check_choice(self.method, "method", METHODS)
        check_choice(self.drafter, "drafter", DRAFTERS)
        check_int(self.block_size, "block_size", 1, MAX_BLOCK_SIZE)
        check_choice(self.scheduler, "scheduler", SCHEDULERS)
        check_int(self.lag_steps, "lag_steps", 0, 16)
        check_int(self.min_verify_len, "min_verify_len", 1, MAX_BLOCK_SIZE + 1)
        check_int(self.max_verify_len, "max_verify_len", 1, MAX_BLOCK_SIZE + 1, optional=True)
        require(self.max_verify_len is None or self.max_verify_len >= self.min_verify_len, "max_verify_len",
                self.max_verify_len, "must be >= min_verify_len")
        check_real(self.survival_eps, "survival_eps", 0, 1)
        check_real(self.threshold, "threshold", 0, 1)
        self._check_schedule()
        require(isinstance(self.graph_tiers, tuple) and all(is_int(t) and t > 0 for t in self.graph_tiers),
                "graph_tiers", self.graph_tiers, "expected a list of positive token counts")
        require(list(self.graph_tiers) == sorted(set(self.graph_tiers)), "graph_tiers", list(self.graph_tiers),
                "tiers must strictly increase")
        check_bool(self.pad_to_graph_tier, "pad_to_graph_tier")
        require(not self.pad_to_graph_tier or bool(self.graph_tiers), "graph_tiers", None,
                "pad_to_graph_tier needs graph_tiers")
        for name in ("sps_table", "sts"):
            path = getattr(self, name)
            require(path is None or Path(path).is_file(), name, None if path is None else str(path), "file not found")
        require(isinstance(self.acceptance, AcceptanceConfig), "acceptance", self.acceptance, "expected a mapping")
        if self.drafter_checkpoint is not None:
            check_checkpoint(self.drafter_checkpoint, "drafter_checkpoint")

    def _check_schedule(self) -> None:
        require(isinstance(self.schedule, tuple) and all(isinstance(r, ScheduleRule) for r in self.schedule),
                "schedule", self.schedule, "expected a list of {max_batch_size, block_size}")
        bounds = [r.max_batch_size for r in self.schedule if r.max_batch_size is not None]
        require(bounds == sorted(bounds) and len(set(bounds)) == len(bounds), "schedule", bounds,
                "max_batch_size must strictly increase")
        require(self.method != "schedule" or bool(self.schedule), "schedule", None,
                "method schedule needs a schedule list")

    @property
    def draft_kind(self) -> str | None:
        """``"block"`` or ``"chain"`` by the drafter; None without speculation."""
        if self.method == "none":
            return None
        return "block" if self.drafter in BLOCK_DRAFTERS else "chain"

    @property
    def window(self) -> int:
        """A request's whole verify window: the anchor plus ``block_size`` drafts, ``block_size + 1``
        tokens (1 without speculation)."""
        return 1 if self.method == "none" else self.block_size + 1

    @property
    def verify_cap(self) -> int:
        """Most tokens one request puts into a verify step (anchor counted): 1 without
        speculation, a schedule's largest block plus one, else the :attr:`window` capped at
        ``max_verify_len``."""
        if self.method == "none":
            return 1
        if self.method == "schedule":
            return 1 + max((r.block_size for r in self.schedule), default=0)
        return min(self.window, self.max_verify_len) if self.max_verify_len else self.window

    @classmethod
    def from_dict(cls, raw, *, file=None, key: str = "speculation", base: Path | None = None) -> Speculation:
        """Build from a scenario's ``speculation:`` mapping; paths resolve against ``base``.

        The block size defaults to 7 for ``dspark`` and ``threshold`` and to 3 otherwise
        (``num_draft_tokens`` is its older name); the drafter to ``dspark`` for those methods,
        else ``mtp`` (or the acceptance's drafter when that is given). A ``drafter_checkpoint``
        path is made absolute against ``base``; a Hugging Face id is kept as given.
        """
        s = Section(raw, file, key)
        base = base if base is not None else Path.cwd()
        with located(file, key):
            method = s.raw("method", "none")
            check_choice(method, "method", METHODS)
            check_choice(s.raw("drafter"), "drafter", DRAFTERS, optional=True)
        confident = method in CONFIDENCE_METHODS
        size = _block_size(s, 7 if confident else 3)
        acceptance = s.raw("acceptance", {})
        if not isinstance(acceptance, dict):
            raise InputError(file, s.path("acceptance"), acceptance, "expected a mapping")
        drafter = s.raw("drafter") or acceptance.get("drafter") or ("dspark" if confident else "mtp")
        acceptance = AcceptanceConfig.from_dict({"drafter": drafter, **acceptance}, file=file,
                                                key=s.path("acceptance"))
        schedule = s.raw("schedule", [])
        if not isinstance(schedule, list):
            raise InputError(file, s.path("schedule"), schedule, "expected a list of {max_batch_size, block_size}")
        tiers = s.raw("graph_tiers", [])
        kwargs = {name: s.raw(name) for name in ("scheduler", "lag_steps", "min_verify_len", "max_verify_len",
                                                 "survival_eps", "threshold", "pad_to_graph_tier")}
        kwargs = {k: v for k, v in kwargs.items() if v is not None}
        kwargs.update(method=method, drafter=drafter, block_size=size, acceptance=acceptance,
                      schedule=tuple(ScheduleRule.from_dict(r, file=file, key=f"{s.path('schedule')}[{i}]")
                                     for i, r in enumerate(schedule)),
                      graph_tiers=tuple(tiers) if isinstance(tiers, list) else tiers,
                      sps_table=file_path(s, "sps_table", base), sts=file_path(s, "sts", base),
                      drafter_checkpoint=absolute_checkpoint(s.raw("drafter_checkpoint"), base))
        s.done()
        return build(cls, kwargs, file, key)


def _block_size(s: Section, default: int) -> int:
    size, alias = s.raw("block_size"), s.raw("num_draft_tokens")
    if size is not None and alias is not None and size != alias:
        raise InputError(s.file, s.path("num_draft_tokens"), alias, "conflicts with block_size; give one")
    if size is None and alias is not None:
        with located(s.file, s.key):
            check_int(alias, "num_draft_tokens", 1, MAX_BLOCK_SIZE)
    return size if size is not None else alias if alias is not None else default


def file_path(s: Section, name: str, base: Path) -> Path | None:
    """The existing file a section key names, resolved against ``base`` (None when the key is absent)."""
    value = s.raw(name)
    if value is None:
        return None
    if not isinstance(value, str):
        raise InputError(s.file, s.path(name), value, "expected a string")
    return existing_file(base, value, s.file, s.path(name))
