"""KV-cache capacity of a replica, in tokens."""
from __future__ import annotations

from dspark_sim.catalog import GpuSpec, ModelSpec
from dspark_sim.errors import InputError
from dspark_sim.scenario import Deployment


def kv_capacity_tokens(model: ModelSpec, gpu: GpuSpec, dep: Deployment, *, file=None,
                       dtype_bytes: float = 2.0) -> int:
    """Tokens of KV cache left on ``dep.tp`` GPUs after the weights, rounded down to whole blocks.

    As in vLLM, ``gpu_memory_fraction`` of each GPU's memory is the engine's;
    weights take their share, the rest holds KV blocks of ``kv_block_tokens``.
    """
    usable = gpu.memory_bytes * dep.gpu_memory_fraction * dep.tp
    free = usable - model.weight_bytes(dtype_bytes)
    tokens = int(free // model.kv_bytes_per_token(dtype_bytes))
    tokens -= tokens % dep.kv_block_tokens
    if tokens < dep.kv_block_tokens:
        raise InputError(file, "deployment.tp", dep.tp,
                         f"{model.name} ({model.weight_bytes(dtype_bytes) / 1e9:.0f} GB) leaves no KV cache on "
                         f"{dep.tp} x {gpu.name}: raise tp or gpu_memory_fraction")
    return tokens
