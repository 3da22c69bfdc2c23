"""The scenario's ``speculation.acceptance:`` mapping."""
from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path

from dspark_sim.acceptance.paper import DATASETS
from dspark_sim.acceptance.preset import MAX_POSITIONS
from dspark_sim.errors import InputError
from dspark_sim.names import DRAFTERS

CALIBRATIONS = ("sts", "raw")


@dataclass(frozen=True, slots=True)
class AcceptanceConfig:
    """How draft tokens are accepted and what confidence the scheduler sees; every key is optional.

    drafter/target pick the preset (target None: the scenario's model);
    calibration: "sts" (SGLang applies the STS temperatures) or "raw";
    auc: ROC-AUC by position 1, 2, ... overriding the preset's discrimination
    (the last value repeats); difficulty_sigma: overrides the per-request
    spread (this moves the accepted length off Table 1); preset_file: a
    preset.json from ``dspark-sim calibrate``; fixed_accept_prob: the simplest
    baseline, every draft accepted with this probability and reported with
    this confidence; dataset: use one Table 1 dataset's preset (e.g. gsm8k)
    for every domain.
    """

    drafter: str = "dspark"
    target: str | None = None
    calibration: str = "sts"
    auc: tuple[float, ...] | None = None
    difficulty_sigma: float | None = None
    preset_file: str | None = None
    fixed_accept_prob: float | None = None
    dataset: str | None = None
    file: str | None = None  # the scenario file, for error messages
    key: str = "speculation.acceptance"

    def __post_init__(self) -> None:
        if self.drafter not in DRAFTERS:
            self._fail("drafter", self.drafter, f"unknown drafter; known: {', '.join(DRAFTERS)}")
        if self.calibration not in CALIBRATIONS:
            self._fail("calibration", self.calibration, f"must be one of {', '.join(CALIBRATIONS)}")
        if self.auc is not None and not (
                0 < len(self.auc) <= MAX_POSITIONS and all(0.5 < a < 1 for a in self.auc)):
            self._fail("auc", self.auc, f"1..{MAX_POSITIONS} values, each in (0.5, 1)")
        if self.difficulty_sigma is not None and not 0 <= self.difficulty_sigma <= 5:
            self._fail("difficulty_sigma", self.difficulty_sigma, "must be in [0, 5]")
        if self.fixed_accept_prob is not None and not 0 <= self.fixed_accept_prob <= 1:
            self._fail("fixed_accept_prob", self.fixed_accept_prob, "must be in [0, 1]")
        if self.dataset is not None and self.dataset not in DATASETS:
            self._fail("dataset", self.dataset, f"unknown dataset; known: {', '.join(DATASETS)}")
        if self.preset_file is not None and not Path(self.preset_file).is_file():
            self._fail("preset_file", self.preset_file, "no such file")

    def _fail(self, name: str, value: object, why: str) -> None:
        raise InputError(self.file, f"{self.key}.{name}", value, why)

    @classmethod
    def from_dict(cls, d: dict | None, *, file=None, key: str = "speculation.acceptance") -> AcceptanceConfig:
        """Build from the YAML mapping; relative preset_file paths resolve against ``file``'s folder."""
        if d is not None and not isinstance(d, dict):
            raise InputError(file, key, d, "must be a mapping")
        d = dict(d or {})
        known = {f.name for f in fields(cls)} - {"file", "key"}
        for name in d:
            if name not in known:
                raise InputError(file, f"{key}.{name}", d[name], f"unknown key; known: {', '.join(sorted(known))}")
        d = {name: _coerce(name, value, file, key) for name, value in d.items()}
        if d.get("preset_file") is not None and file is not None and not Path(d["preset_file"]).is_absolute():
            d["preset_file"] = str(Path(file).parent / d["preset_file"])
        return cls(**d, file=None if file is None else str(file), key=key)


def _coerce(name: str, value: object, file, key: str) -> object:
    """YAML scalars and lists into the field's type; a wrong type is an InputError."""
    if value is None:
        return None
    try:
        if name == "auc":
            values = value if isinstance(value, (list, tuple)) else [value]
            return tuple(_number(v) for v in values)
        if name in ("difficulty_sigma", "fixed_accept_prob"):
            return _number(value)
        if not isinstance(value, str):
            raise TypeError("expected a string")
        return value
    except (TypeError, ValueError) as err:
        raise InputError(file, f"{key}.{name}", value, str(err)) from None


def _number(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError("expected a number")
    return float(value)
