"""KV-cache capacity of a replica, in tokens, and the tokens' worth every request holds."""
from __future__ import annotations

import math

from dspark_sim.catalog import GpuSpec, ModelSpec, served_format
from dspark_sim.errors import InputError
from dspark_sim.scenario import Deployment


def kv_capacity_tokens(model: ModelSpec, gpu: GpuSpec, dep: Deployment, *, file=None) -> int:
    """Tokens of KV cache left on ``dep.tp`` GPUs after the weights, rounded down to whole blocks.

    As in vLLM, ``gpu_memory_fraction`` of each GPU's memory is the engine's;
    weights take their share (each GPU's, in the format the GPU serves the checkpoint
    in, under the deployment's split), the rest holds KV blocks of ``kv_block_tokens``
    at ``kv_cache_dtype``. KV the split copies over GPUs (an MLA latent or V4's single
    KV head under tensor-parallel attention, a GQA head over more GPUs than heads) is
    paid once a copy.
    """
    par = dep.parallel
    weights = par.weight_bytes_per_gpu(model, served_format(model.weight_format, gpu.fp4))
    free = (gpu.memory_bytes * dep.gpu_memory_fraction - weights) * par.tp / par.kv_copies(model)
    tokens = int(free // model.kv_bytes_per_token(dep.kv_dtype_bytes)) if free > 0 else 0
    tokens -= tokens % dep.kv_block_tokens
    if tokens < dep.kv_block_tokens:
        raise InputError(file, "deployment.tp", dep.tp,
                         f"{model.name} ({weights / 1e9:.0f} GB a GPU) leaves no KV cache on "
                         f"{dep.tp} x {gpu.name}: raise tp or gpu_memory_fraction")
    return tokens


def kv_request_tokens(model: ModelSpec, dep: Deployment) -> int:
    """KV tokens every running request holds on top of its length: DeepSeek-V4's sliding
    windows and compressor state, in tokens of the long-context cache (0 for other models)."""
    fixed = model.kv_bytes_per_request(dep.kv_dtype_bytes)
    return math.ceil(fixed / model.kv_bytes_per_token(dep.kv_dtype_bytes)) if fixed else 0
