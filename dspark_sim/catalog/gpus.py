"""Data-center GPUs (SXM parts): memory, bandwidth and dense tensor-core FLOP/s.

Numbers are NVIDIA spec-sheet values, cited per entry. Conventions:
  * FLOP/s are dense. Spec sheets print Hopper and Blackwell tensor throughput
    "with sparsity" (2:4); the dense figure is half of it.
  * Memory: NVIDIA's "80GB" / "141GB" HBM capacities are binary gigabytes (an
    A100 80GB reports 81920 MiB), so ``memory_bytes = GB * 2**30``. Checked on an
    H200 SXM: nvidia-smi reports 143771 MiB, 0.4 % under 141 GiB. Bandwidths are
    decimal (TB/s = 1e12 bytes/s).
  * ``nvlink_bytes_per_s`` is the spec sheet's per-GPU NVLink figure, which
    counts both directions; one direction carries half
    (``nvlink_unidir_bytes_per_s``), the figure a ring all-reduce is bound by.
  * ``fp4``: FP4 tensor cores (Blackwell; the HGX B200/B300 pages list FP4 Tensor Core
    throughput, Hopper's datasheets none). ``gpus_per_node``: the NVLink domain of one
    HGX board (8 GPUs), the widest tensor or expert parallel group the communication
    model covers.
"""
from __future__ import annotations

from dataclasses import dataclass

from dspark_sim.errors import InputError

GIB = 2**30
TERA = 1e12


@dataclass(frozen=True, slots=True)
class GpuSpec:
    """One GPU: HBM capacity and bandwidth, dense bf16/fp8 FLOP/s, NVLink bandwidth."""

    name: str
    memory_bytes: int
    hbm_bytes_per_s: float
    bf16_flops: float
    fp8_flops: float
    nvlink_bytes_per_s: float
    source: str
    fp4: bool = False
    gpus_per_node: int = 8

    def __post_init__(self) -> None:
        if isinstance(self.memory_bytes, bool) or not isinstance(self.memory_bytes, int) \
                or self.memory_bytes <= 0:
            raise InputError(self.source or None, f"gpu {self.name}: memory_bytes", self.memory_bytes,
                             "must be a positive integer")
        for key in ("hbm_bytes_per_s", "bf16_flops", "fp8_flops", "nvlink_bytes_per_s"):
            value = getattr(self, key)
            if not (isinstance(value, (int, float)) and value > 0 and value != float("inf")):
                raise InputError(self.source or None, f"gpu {self.name}: {key}", value,
                                 "must be a positive finite number")
        if isinstance(self.gpus_per_node, bool) or not isinstance(self.gpus_per_node, int) \
                or self.gpus_per_node < 1:
            raise InputError(self.source or None, f"gpu {self.name}: gpus_per_node", self.gpus_per_node,
                             "must be a positive integer")
        if self.fp8_flops < self.bf16_flops:
            raise InputError(self.source or None, f"gpu {self.name}: fp8_flops", self.fp8_flops,
                             "is below bf16_flops")

    @property
    def nvlink_unidir_bytes_per_s(self) -> float:
        """NVLink bandwidth in one direction (half the spec-sheet bidirectional figure)."""
        return self.nvlink_bytes_per_s / 2

    def ridge_flops_per_byte(self, dtype_bytes: float = 2) -> float:
        """Arithmetic intensity where compute and HBM time meet (bf16 for 2 bytes, fp8 for 1)."""
        flops = self.fp8_flops if dtype_bytes <= 1 else self.bf16_flops
        return flops / self.hbm_bytes_per_s


_PRESETS = (
    # A100 has no fp8 tensor cores: fp8 weights run through bf16 math (e.g. W8A16
    # kernels), so its fp8 ceiling is the bf16 one.
    GpuSpec("a100", memory_bytes=80 * GIB, hbm_bytes_per_s=2039e9, bf16_flops=312 * TERA,
            fp8_flops=312 * TERA, nvlink_bytes_per_s=600e9,
            source="NVIDIA A100 Tensor Core GPU datasheet, A100 80GB SXM "
                   "(nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/"
                   "nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf)"),
    GpuSpec("h100", memory_bytes=80 * GIB, hbm_bytes_per_s=3.35e12, bf16_flops=1979 * TERA / 2,
            fp8_flops=3958 * TERA / 2, nvlink_bytes_per_s=900e9,
            source="NVIDIA H100 Tensor Core GPU datasheet, H100 SXM: bf16 1,979 / fp8 3,958 "
                   "TFLOPS with sparsity (nvidia.com/en-us/data-center/h100/)"),
    GpuSpec("h200", memory_bytes=141 * GIB, hbm_bytes_per_s=4.8e12, bf16_flops=1979 * TERA / 2,
            fp8_flops=3958 * TERA / 2, nvlink_bytes_per_s=900e9,
            source="NVIDIA H200 Tensor Core GPU datasheet, H200 SXM: bf16 1,979 / fp8 3,958 "
                   "TFLOPS with sparsity (nvidia.com/en-us/data-center/h200/)"),
    GpuSpec("b200", memory_bytes=180 * GIB, hbm_bytes_per_s=8e12, bf16_flops=36e15 / 8 / 2,
            fp8_flops=72e15 / 8 / 2, nvlink_bytes_per_s=1.8e12,
            source="NVIDIA HGX B200 spec (nvidia.com/en-us/data-center/hgx/): 8 GPUs, 1.44 TB, "
                   "bf16 36 / fp8 72 PFLOPS with sparsity; DGX B200 datasheet: 64 TB/s HBM3e",
            fp4=True),
    GpuSpec("b300", memory_bytes=288 * GIB, hbm_bytes_per_s=8e12, bf16_flops=36e15 / 8 / 2,
            fp8_flops=72e15 / 8 / 2, nvlink_bytes_per_s=1.8e12,
            source="NVIDIA HGX B300 (Blackwell Ultra) spec (nvidia.com/en-us/data-center/hgx/): "
                   "8 GPUs, 2.3 TB HBM3e, bf16 36 / fp8 72 PFLOPS with sparsity, "
                   "NVLink 5 1.8 TB/s per GPU; 8 TB/s HBM3e per GPU", fp4=True),
)

GPUS: dict[str, GpuSpec] = {g.name: g for g in _PRESETS}


def get_gpu(name: str, *, file=None, key: str = "gpu") -> GpuSpec:
    """The GPU called ``name`` (a key of GPUS), case-insensitive."""
    spec = GPUS.get(name.strip().lower()) if isinstance(name, str) else None
    if spec is None:
        raise InputError(file, key, name, f"unknown GPU; known: {', '.join(GPUS)}")
    return spec
