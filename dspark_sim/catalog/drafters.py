"""Published drafter checkpoints per target model, and the block each was trained for.

An engine cannot run speculative decoding without the drafter's weights, so an
exported config must name them (SGLang ``--speculative-draft-model-path``, vLLM
``speculative-config.model``, TensorRT-LLM ``speculative_config.speculative_model``).
These presets are the checkpoints their authors published; each cites where the
name comes from. A target with no published drafter of a kind gets none here:
the user passes ``--drafter`` (or the scenario's ``speculation.drafter_checkpoint``)
and, until then, exports carry a marked placeholder the engines refuse.

``trained_block`` is the number of draft positions the checkpoint was trained
to produce (DSpark's gamma, DFlash's block); the tuner never searches above it.
For a chain drafter (EAGLE-3, MTP) it is the number of chained steps trained.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from dspark_sim.errors import InputError

PLACEHOLDER = "FILL-ME-drafter-checkpoint"  # what exports carry when no drafter is known
_HF_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


@dataclass(frozen=True, slots=True)
class Drafter:
    """A drafter checkpoint: a Hugging Face id (or local path) and its trained block."""

    kind: str  # dspark | dflash | eagle3 | mtp (the scenario's speculation.drafter)
    checkpoint: str
    trained_block: int | None
    source: str

    def __post_init__(self) -> None:
        if self.trained_block is not None and self.trained_block < 1:
            raise ValueError(f"trained_block must be >= 1, got {self.trained_block}")


_VLLM_SPEC = "vllm 0.33.0 vllm/config/speculative.py (method auto-detection examples)"
_DFLASH = "github.com/z-lab/dflash README.md (Model Support Plan)"
_PRESETS: dict[str, tuple[Drafter, ...]] = {
    "qwen3-8b": (
        Drafter("dspark", "deepseek-ai/dspark_qwen3_8b_block7", 7, _VLLM_SPEC),
        Drafter("eagle3", "AngelSlim/Qwen3-8B_eagle3", None, _VLLM_SPEC),
        Drafter("dflash", "z-lab/Qwen3-8B-DFlash-b16", 16, _DFLASH),
    ),
    "qwen3-4b": (Drafter("dflash", "z-lab/Qwen3-4B-DFlash-b16", 16, _DFLASH),),
    # DeepSeek-V3 bundles one MTP layer in the target checkpoint
    # (config.json num_nextn_predict_layers = 1): the drafter is the target itself.
    "deepseek-v3": (Drafter("mtp", "deepseek-ai/DeepSeek-V3", 1,
                            "huggingface.co/deepseek-ai/DeepSeek-V3/config.json num_nextn_predict_layers"),),
}
# Targets whose checkpoints carry MTP layers (an MTP baseline exists only for these).
MTP_MODELS = frozenset(m for m, ds in _PRESETS.items() if any(d.kind == "mtp" for d in ds))


def published_drafter(model: str, kind: str) -> Drafter | None:
    """The published ``kind`` drafter of target ``model`` (a catalog name), or None."""
    return next((d for d in _PRESETS.get(model, ()) if d.kind == kind), None)


def chain_baseline_drafter(model: str) -> str:
    """The chain drafter a static baseline of ``model`` runs: MTP where the target has MTP layers,
    EAGLE-3 otherwise (Qwen3 has no MTP layers)."""
    return "mtp" if model in MTP_MODELS else "eagle3"


def check_checkpoint(value: str, file, key: str, base: Path | None = None) -> str:
    """A drafter checkpoint as given: a local path (must exist; made absolute) or a Hugging Face id.

    A value starting with ``/``, ``.`` or ``~`` is a path; anything else must look like ``org/name``.
    """
    if not isinstance(value, str) or not value.strip():
        raise InputError(file, key, value, "expected a Hugging Face id (org/name) or a path")
    if value.startswith(("/", ".", "~")):
        path = Path(value).expanduser()
        path = path if path.is_absolute() or base is None else (base / path)
        if not path.exists():
            raise InputError(file, key, value, "drafter checkpoint path not found")
        return str(path.resolve())
    if not _HF_ID.match(value):
        raise InputError(file, key, value, "expected a Hugging Face id (org/name) or a path starting with / . or ~")
    return value


def trained_block_of(checkpoint: str) -> int | None:
    """The block size a local drafter checkpoint's ``config.json`` declares, if it declares one.

    Keys read, in order: ``block_size``, ``dspark_block_size`` (the names SGLang's and
    vLLM's DSpark loaders read), ``dflash_config.block_size``.
    """
    config = Path(checkpoint) / "config.json"
    if not config.is_file():
        return None
    try:
        data = json.loads(config.read_text())
    except (OSError, ValueError):
        raise InputError(config, None, None, "unreadable drafter config.json") from None
    for value in (data.get("block_size"), data.get("dspark_block_size"),
                  (data.get("dflash_config") or {}).get("block_size")):
        if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
            return value
    return None
