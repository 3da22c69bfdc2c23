"""Catalog of model architectures and GPUs the simulator can cost."""
from dspark_sim.catalog.gpus import GPUS, GpuSpec, get_gpu
from dspark_sim.catalog.models import MODELS, ModelSpec, get_model

__all__ = ["GPUS", "GpuSpec", "get_gpu", "MODELS", "ModelSpec", "get_model"]
