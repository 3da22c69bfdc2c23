"""Catalog of model architectures and GPUs the simulator can cost."""
from dspark_sim.catalog.formats import FORMATS, WeightFormat, get_format, served_format
from dspark_sim.catalog.gpus import GPUS, GpuSpec, get_gpu
from dspark_sim.catalog.models import ModelSpec
from dspark_sim.catalog.presets import MODELS, get_model

__all__ = ["GPUS", "GpuSpec", "get_gpu", "MODELS", "ModelSpec", "get_model", "FORMATS", "WeightFormat",
           "get_format", "served_format"]
