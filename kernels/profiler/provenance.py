"""Where a profile came from: GPU, driver, software versions, date and SM clocks."""
from __future__ import annotations

import datetime
import os
import platform
import subprocess
from pathlib import Path

import torch
import triton


def smi(query: str) -> str | None:
    """One ``nvidia-smi --query-gpu`` field of GPU 0 (None when unavailable)."""
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout else None
    except (OSError, subprocess.SubprocessError, IndexError):
        return None


def sm_clocks() -> str | None:
    """Current and maximum SM clock, as nvidia-smi prints them."""
    return smi("clocks.sm,clocks.max.sm")


def host_cpu() -> str:
    """The host CPU's model name and logical core count."""
    name = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                name = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{name}, {os.cpu_count()} logical cores"


def provenance() -> dict:
    """The static part of the provenance block (clocks are added around the run)."""
    cuda = torch.cuda.is_available()
    props = torch.cuda.get_device_properties(0) if cuda else None
    return {
        "gpu": props.name if props else platform.processor() or "cpu",
        "sm_count": props.multi_processor_count if props else None,
        "gpu_memory_bytes": props.total_memory if props else None,
        "driver": smi("driver_version"),
        "cuda": torch.version.cuda,
        "torch": torch.__version__,
        "triton": triton.__version__,
        "python": platform.python_version(),
        "host_cpu": host_cpu(),  # host-bound steps (eager prefill, step overhead) depend on it
        "host": platform.node(),
        "gpu_uuid": smi("uuid"),  # which card: two runs on one uuid shared a host
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }
