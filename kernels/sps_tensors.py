"""SPS cost tables as device tensors, for the schedule_verify kernel.

Two forms, mirroring SGLang's ``dspark_sps_table.py`` JSON files:

* :class:`SpsTensors` - ``SpsCostTable``: steps per second at sampled batch-token
  counts, looked up at the floor probe (a B below the first probe uses the first).
* :class:`AdditiveSpsTensors` - ``SpsAdditiveCostTable`` (recognised by the key
  ``bias_seconds``): step seconds = bias + interp(bs_probes, alpha, R)
  + interp(m_probes, theta, R + K), linear, clamped at both ends.

Both are built from the validated tables of :mod:`dspark_sim.cost.sps`, the one reader
of the format (``from_table``, or ``from_json_dict`` through it); the dataclasses themselves
only check shapes and dtypes, so building one never syncs the device.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from dspark_sim.cost.sps import SpsAdditiveCostTable, SpsCostTable, SpsTable, sps_table_from_json_dict

__all__ = ["SpsTensors", "AdditiveSpsTensors", "sps_tensors", "sps_from_json_dict"]


def _check_vector(name: str, t: torch.Tensor, dtype: torch.dtype) -> None:
    if t.dim() != 1 or t.numel() == 0 or t.dtype != dtype:
        raise ValueError(f"{name}: want a non-empty 1-D {dtype} tensor, got {t.dtype} {tuple(t.shape)}")


@dataclass(frozen=True)
class SpsTensors:
    """Floor-probe SPS table. probes: int32 [P] strictly increasing batch tokens;
    steps_per_sec: fp32 [P]; max_batch_tokens: batch tokens above it are inadmissible."""

    probes: torch.Tensor
    steps_per_sec: torch.Tensor
    max_batch_tokens: int

    def __post_init__(self) -> None:
        _check_vector("probes", self.probes, torch.int32)
        _check_vector("steps_per_sec", self.steps_per_sec, torch.float32)
        if self.probes.shape != self.steps_per_sec.shape:
            raise ValueError("probes and steps_per_sec differ in length")
        if self.probes.device != self.steps_per_sec.device:
            raise ValueError("probes and steps_per_sec live on different devices")
        if self.max_batch_tokens < 1:
            raise ValueError(f"max_batch_tokens must be >= 1, got {self.max_batch_tokens}")

    @classmethod
    def from_table(cls, table: SpsCostTable, device: torch.device | str = "cpu") -> "SpsTensors":
        """The tensors of a validated SGLang ``SpsCostTable``."""
        return cls(
            torch.tensor(table.sample_batch_tokens, dtype=torch.int32, device=device),
            torch.tensor(table.sample_steps_per_sec, dtype=torch.float32, device=device),
            table.max_batch_tokens,
        )

    @classmethod
    def from_json_dict(cls, d: dict, device: torch.device | str = "cpu") -> "SpsTensors":
        """Build from SGLang's SpsCostTable keys (sample_batch_tokens, sample_steps_per_sec,
        max_batch_tokens), validated by :class:`dspark_sim.cost.sps.SpsCostTable`."""
        return cls.from_table(SpsCostTable.from_json_dict(d), device)

    def to_json_dict(self) -> dict:
        return {
            "sample_batch_tokens": self.probes.tolist(),
            "sample_steps_per_sec": self.steps_per_sec.tolist(),
            "max_batch_tokens": self.max_batch_tokens,
        }

    def to(self, device: torch.device | str) -> "SpsTensors":
        return SpsTensors(self.probes.to(device), self.steps_per_sec.to(device), self.max_batch_tokens)


@dataclass(frozen=True)
class AdditiveSpsTensors:
    """Additive step-time model. bs_probes int32 [Pa] with alpha_s fp32 [Pa]
    (seconds by number of requests), m_probes int32 [Pm] with theta_s fp32 [Pm]
    (seconds by batch tokens R + K). max_batch_tokens (optional, our extension)
    caps the admissible batch tokens; SGLang's file has no such key."""

    bias_s: float
    bs_probes: torch.Tensor
    alpha_s: torch.Tensor
    m_probes: torch.Tensor
    theta_s: torch.Tensor
    max_batch_tokens: int | None = None

    def __post_init__(self) -> None:
        if not self.bias_s > 0:
            raise ValueError(f"bias_s must be > 0, got {self.bias_s}")
        _check_vector("bs_probes", self.bs_probes, torch.int32)
        _check_vector("alpha_s", self.alpha_s, torch.float32)
        _check_vector("m_probes", self.m_probes, torch.int32)
        _check_vector("theta_s", self.theta_s, torch.float32)
        if self.bs_probes.shape != self.alpha_s.shape or self.m_probes.shape != self.theta_s.shape:
            raise ValueError("each probe vector must match its value vector in length")
        if self.max_batch_tokens is not None and self.max_batch_tokens < 1:
            raise ValueError(f"max_batch_tokens must be >= 1, got {self.max_batch_tokens}")

    @classmethod
    def from_table(cls, table: SpsAdditiveCostTable, device: torch.device | str = "cpu") -> "AdditiveSpsTensors":
        """The tensors of a validated SGLang ``SpsAdditiveCostTable``."""
        return cls(
            table.bias_seconds,
            torch.tensor(table.bs_probes, dtype=torch.int32, device=device),
            torch.tensor(table.alpha_seconds, dtype=torch.float32, device=device),
            torch.tensor(table.m_probes, dtype=torch.int32, device=device),
            torch.tensor(table.theta_seconds, dtype=torch.float32, device=device),
            table.max_batch_tokens,
        )

    @classmethod
    def from_json_dict(cls, d: dict, device: torch.device | str = "cpu") -> "AdditiveSpsTensors":
        """Build from SGLang's SpsAdditiveCostTable keys (bias_seconds, bs_probes, alpha_seconds,
        m_probes, theta_seconds; our optional max_batch_tokens), validated by
        :class:`dspark_sim.cost.sps.SpsAdditiveCostTable`."""
        return cls.from_table(SpsAdditiveCostTable.from_json_dict(d), device)

    def to_json_dict(self) -> dict:
        d = {
            "bias_seconds": self.bias_s,
            "bs_probes": self.bs_probes.tolist(),
            "alpha_seconds": self.alpha_s.tolist(),
            "m_probes": self.m_probes.tolist(),
            "theta_seconds": self.theta_s.tolist(),
        }
        if self.max_batch_tokens is not None:
            d["max_batch_tokens"] = self.max_batch_tokens
        return d

    def to(self, device: torch.device | str) -> "AdditiveSpsTensors":
        return AdditiveSpsTensors(
            self.bias_s,
            self.bs_probes.to(device),
            self.alpha_s.to(device),
            self.m_probes.to(device),
            self.theta_s.to(device),
            self.max_batch_tokens,
        )


def sps_tensors(table: SpsTable, device: torch.device | str = "cpu") -> SpsTensors | AdditiveSpsTensors:
    """The tensors of either validated SGLang table."""
    if isinstance(table, SpsAdditiveCostTable):
        return AdditiveSpsTensors.from_table(table, device)
    return SpsTensors.from_table(table, device)


def sps_from_json_dict(d: dict, device: torch.device | str = "cpu") -> SpsTensors | AdditiveSpsTensors:
    """Either table's tensors from its decoded JSON (``bias_seconds`` means additive, as in SGLang)."""
    return sps_tensors(sps_table_from_json_dict(d), device)
