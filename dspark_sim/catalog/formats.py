"""Weight formats: bytes per stored parameter, scales included, by part of a model.

A checkpoint stores its parts at different precisions (DeepSeek-V4: FP4 experts,
FP8 attention and dense projections, bf16 embedding and head). What one step
reads from HBM and what the weights take in memory follow from these bytes, and
the GEMMs run at the tensor-core rate of their activations (``compute``).

Scale overheads:
  * FP8 block (DeepSeek ``quantization_config``: ``weight_block_size: [128, 128]``,
    e4m3 values): one fp32 scale per 128 x 128 block, 4 / 16384 bytes a parameter.
  * MXFP4 (OCP Microscaling Formats spec v1.0: e2m1 values, one 8-bit e8m0 scale
    per block of 32): 0.5 + 1/32 bytes a parameter. DeepSeek-V4's ``expert_dtype:
    fp4`` checkpoints store experts this way (MXFP4 experts, ue8m0 scales).
"""
from __future__ import annotations

from dataclasses import dataclass

from dspark_sim.errors import InputError

FP8_BLOCK_BYTES = 1.0 + 4.0 / (128 * 128)
MXFP4_BYTES = 0.5 + 1.0 / 32


@dataclass(frozen=True, slots=True)
class WeightFormat:
    """Bytes per parameter of each part of a model, and the GEMM rate they run at.

    expert_bytes: routed and shared experts' matmul weights.
    linear_bytes: every other matmul weight (attention, dense MLP, router, compressor).
    embed_bytes: the input embedding and the LM head (kept in bf16 by FP8/FP4 checkpoints).
    other_bytes: norms, biases and mixing weights (kept in bf16 or fp32; counted at 2).
    compute: ``"bf16"`` or ``"fp8"``: which dense tensor-core rate the GEMMs run at
    (FP8 and FP4 weights meet FP8 activations, DeepSeek's dynamic e4m3 activation scheme).
    """

    name: str
    expert_bytes: float
    linear_bytes: float
    embed_bytes: float = 2.0
    other_bytes: float = 2.0
    compute: str = "bf16"
    needs_fp4: bool = False  # GEMMs on FP4 weights: a GPU without FP4 tensor cores converts

    def __post_init__(self) -> None:
        for key in ("expert_bytes", "linear_bytes", "embed_bytes", "other_bytes"):
            value = getattr(self, key)
            if not (isinstance(value, (int, float)) and 0 < value <= 4):
                raise InputError(None, f"weight format {self.name}: {key}", value, "must lie in (0, 4]")
        if self.compute not in ("bf16", "fp8"):
            raise InputError(None, f"weight format {self.name}: compute", self.compute, "bf16 or fp8")


FORMATS: dict[str, WeightFormat] = {f.name: f for f in (
    WeightFormat("bf16", 2.0, 2.0),
    WeightFormat("fp8", FP8_BLOCK_BYTES, FP8_BLOCK_BYTES, compute="fp8"),
    WeightFormat("fp4-experts", MXFP4_BYTES, FP8_BLOCK_BYTES, compute="fp8", needs_fp4=True),
    # the FP4 experts on a GPU without FP4 tensor cores, as the engines run them there: Marlin's
    # W4A16 kernels read the MXFP4 weights and multiply in bf16
    WeightFormat("fp4-experts-w4a16", MXFP4_BYTES, FP8_BLOCK_BYTES, compute="bf16"),
)}


def get_format(name: str, *, file=None, key: str = "weight_format") -> WeightFormat:
    """The weight format called ``name`` (a key of FORMATS)."""
    fmt = FORMATS.get(name) if isinstance(name, str) else None
    if fmt is None:
        raise InputError(file, key, name, f"unknown weight format; known: {', '.join(FORMATS)}")
    return fmt


def served_format(checkpoint: str, fp4_gpu: bool) -> WeightFormat:
    """The format an engine serves a checkpoint in on a GPU: FP4 experts run on FP4 tensor cores
    (Blackwell); on Hopper the engines run the same FP4 checkpoint with Marlin's W4A16 MoE kernels
    (the SGLang DeepSeek-V4 cookbook's Hopper cells, the only path on H100), which read the FP4
    weights and multiply in bf16 (``fp4-experts-w4a16``). SGLang's FP8 conversion
    (``sgl-project/DeepSeek-V4-Flash-FP8``) is the other Hopper option, not the default."""
    fmt = get_format(checkpoint)
    return FORMATS["fp4-experts-w4a16"] if fmt.needs_fp4 and not fp4_gpu else fmt


__all__ = ["WeightFormat", "FORMATS", "get_format", "served_format", "FP8_BLOCK_BYTES", "MXFP4_BYTES"]
