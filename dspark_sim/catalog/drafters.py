"""Published drafter checkpoints per target model, and the block each was trained for.

An engine cannot run speculative decoding without the drafter's weights, so an
exported config must name them (SGLang ``--speculative-draft-model-path``, vLLM
``speculative-config.model``, TensorRT-LLM ``speculative_config.speculative_model``).
These presets are the checkpoints their authors published; each cites where the
name comes from. A target with no published drafter of a kind gets none here:
the user passes ``--drafter`` (or the scenario's ``speculation.drafter_checkpoint``)
and, until then, exports carry a marked placeholder the engines refuse.

``trained_block`` is the number of draft positions the checkpoint was trained
to produce (DSpark's and DFlash's block size); the tuner never searches above it.
For a chain drafter (EAGLE-3, MTP) it is the number of chained steps trained.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from dspark_sim.catalog.presets import MODELS, get_model
from dspark_sim.config import check_choice, check_int, require
from dspark_sim.errors import InputError
from dspark_sim.userfiles import read_json, resolved
from dspark_sim.names import DRAFTERS

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
        check_choice(self.kind, "kind", DRAFTERS)
        check_int(self.trained_block, "trained_block", 1, optional=True)


_VLLM_SPEC = "vllm 0.33.0 vllm/config/speculative.py (method auto-detection examples)"
_DFLASH = "github.com/z-lab/dflash README.md (Model Support Plan)"
# vLLM 0.33.0 vllm/config/speculative.py, SpeculativeConfig.__post_init__: "DeepSeek DSpark can
# ship the weights inside the target checkpoint" (method dspark without a model loads the
# target's); SGLang 0.5.23 srt/arg_groups/speculative_hook.py _handle_dspark likewise defaults
# --speculative-draft-model-path to --model-path for such a checkpoint. Block 5: DeepSeek-V4's
# production block (DSPARK.md section 1).
_V4_BUNDLED = ("vllm 0.33.0 vllm/config/speculative.py (DSpark weights inside the target checkpoint); "
               "block 5: DeepSeek-V4 production")
_PRESETS: dict[str, tuple[Drafter, ...]] = {
    "qwen3-8b": (
        Drafter("dspark", "deepseek-ai/dspark_qwen3_8b_block7", 7, _VLLM_SPEC),
        Drafter("eagle3", "AngelSlim/Qwen3-8B_eagle3", None, _VLLM_SPEC),
        Drafter("dflash", "z-lab/Qwen3-8B-DFlash-b16", 16, _DFLASH),
    ),
    "qwen3-4b": (Drafter("dflash", "z-lab/Qwen3-4B-DFlash-b16", 16, _DFLASH),),
    # the EAGLE-3 drafter SGLang's own tests pair with this target
    "qwen3-30b-a3b": (Drafter("eagle3", "Tengyunw/qwen3_30b_moe_eagle3", None,
                              "sglang 0.5.23 sglang/test/test_utils.py DEFAULT_DRAFT_MODEL_EAGLE_DP_ATTN"),),
    **{m.name: (Drafter("dspark", m.dspark_checkpoint, 5, _V4_BUNDLED),)
       for m in MODELS.values() if m.dspark_checkpoint},
}


def published_drafter(model: str, kind: str) -> Drafter | None:
    """The published ``kind`` drafter of target ``model`` (a catalog name), or None.

    A target's own MTP layers are not listed: :func:`has_mtp` says whether it has them."""
    return next((d for d in _PRESETS.get(model, ()) if d.kind == kind), None)


def has_mtp(model: str) -> bool:
    """Whether the checkpoint of ``model`` carries MTP layers (its config's
    ``num_nextn_predict_layers``, the catalog's ``mtp_layers``): the only targets an MTP
    baseline exists for, and the drafter is the target checkpoint itself."""
    return get_model(model).mtp_layers > 0


def bundles_dspark(model: str) -> bool:
    """Whether the DSpark drafter of ``model`` ships inside its checkpoint (DeepSeek-V4)."""
    return bool(get_model(model).dspark_checkpoint)


def chain_baseline_drafter(model: str) -> str:
    """The chain drafter a static baseline of ``model`` runs: MTP where the target has MTP layers,
    EAGLE-3 otherwise (Qwen3 has no MTP layers)."""
    return "mtp" if has_mtp(model) else "eagle3"


def is_path(value: str) -> bool:
    """Whether a checkpoint value names a local path (it starts with ``/``, ``.`` or ``~``)."""
    return value.startswith(("/", ".", "~"))


def absolute_checkpoint(value, base: Path):
    """``value`` with a local path made absolute against ``base`` (``~`` expanded); a Hugging Face
    id, or anything not a string, unchanged (:func:`check_checkpoint` judges it)."""
    if not isinstance(value, str) or not is_path(value):
        return value
    path = Path(value).expanduser()
    return str(resolved(path if path.is_absolute() else base / path, None, "drafter"))


def check_checkpoint(value, key: str = "drafter_checkpoint") -> None:
    """A drafter checkpoint: a Hugging Face id (``org/name``) or an absolute path that exists;
    anything else raises one :class:`InputError` naming ``key``."""
    require(isinstance(value, str) and bool(value.strip()), key, value,
            "expected a Hugging Face id (org/name) or a path")
    if is_path(value):
        require(Path(value).is_absolute(), key, value, "expected an absolute path")
        require(Path(value).exists(), key, value, "drafter checkpoint path not found")
    else:
        require(bool(_HF_ID.match(value)), key, value,
                "expected a Hugging Face id (org/name) or a path starting with / . or ~")


def trained_block_of(checkpoint: str) -> int | None:
    """The block size a local drafter checkpoint's ``config.json`` declares, if it declares one.

    Keys read, in order: ``block_size``, ``dspark_block_size`` (the names SGLang's and
    vLLM's DSpark loaders read), ``dflash_config.block_size``.
    """
    config = Path(checkpoint) / "config.json"
    if not config.is_file():
        return None
    data = read_json(config)
    if not isinstance(data, dict):
        raise InputError(config, None, type(data).__name__, "a drafter config.json must be a JSON object")
    for value in (data.get("block_size"), data.get("dspark_block_size"),
                  (data.get("dflash_config") or {}).get("block_size")):
        if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
            return value
    return None
