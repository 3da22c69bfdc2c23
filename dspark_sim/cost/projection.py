"""Profiles carried to another GPU by spec-sheet ratios, and scaled in time (what-ifs, intervals)."""
from __future__ import annotations

from dataclasses import replace

from dspark_sim.catalog import GpuSpec, get_gpu
from dspark_sim.cost.comm_curves import load_comm_curves, retarget
from dspark_sim.cost.profile_format import GpuRef, Profile, Projection


def project_profile(profile: Profile, to_gpu: GpuSpec) -> Profile:
    """``profile`` carried to ``to_gpu`` by spec-sheet ratios, keeping the measured efficiencies.

    Memory-bound terms scale by HBM bandwidth, compute-bound ones by dense
    bf16 FLOP/s, fixed (host/launch) terms and shapes stay; measured communication curves
    scale their bandwidth part by the NVLink ratio (:func:`~.comm_curves.retarget`). The
    result is marked ``projected from <gpu>, measured <date>`` and carries no grids.
    """
    base = profile.projection.measured_gpu if profile.projection else profile.gpu_spec
    cur = profile.gpu_spec
    link = get_gpu(profile.gpu).nvlink_bytes_per_s / to_gpu.nvlink_bytes_per_s if profile.comm else 1.0
    ratio = {"memory": cur.hbm_bytes_per_s / to_gpu.hbm_bytes_per_s,
             "compute": cur.bf16_flops / to_gpu.bf16_flops}
    method = profile.held_out_method
    if profile.projection is None:
        method += f" (measured on {base.name}; the projection to other GPUs is not validated)"
    return replace(
        profile, gpu=to_gpu.name,
        source=f"projected from {base.name}, measured {profile.measured_date}",
        gpu_spec=GpuRef(to_gpu.name, to_gpu.hbm_bytes_per_s, to_gpu.bf16_flops, to_gpu.source),
        target=profile.target.scaled(ratio),
        draft={k: d.scaled(ratio) for k, d in profile.draft.items()},
        held_out_method=method, grids=None,
        comm={tp: retarget(c, bw_ratio=link, gpu=to_gpu.name) for tp, c in profile.comm.items()},
        projection=Projection(base, profile.measured_date,
                              memory_ratio=base.hbm_bytes_per_s / to_gpu.hbm_bytes_per_s,
                              compute_ratio=base.bf16_flops / to_gpu.bf16_flops))


def time_scaled(profile: Profile, scale: float) -> Profile:
    """``profile`` with every time term (memory, compute, fixed and host) multiplied by ``scale``."""
    r = {"memory": scale, "compute": scale, "fixed": scale}
    return replace(profile, target=profile.target.scaled(r), draft={k: d.scaled(r) for k, d in profile.draft.items()},
                   host={k: replace(h, bias_s=h.bias_s * scale, req_s=h.req_s * scale) for k, h in profile.host.items()},
                   schedule=None if profile.schedule is None else replace(
                       profile.schedule, bias_s=profile.schedule.bias_s * scale, req_s=profile.schedule.req_s * scale))


def curves_for(path, gpu_spec: GpuSpec) -> dict:
    """``{tp: curves}`` of a comm-curves file, carried to ``gpu_spec`` by the NVLink ratio when it
    was measured on another GPU; empty without a file."""
    if path is None:
        return {}
    curves = load_comm_curves(path)
    if curves.gpu != gpu_spec.name:
        ratio = get_gpu(curves.gpu, file=path, key="gpu").nvlink_bytes_per_s / gpu_spec.nvlink_bytes_per_s
        curves = retarget(curves, bw_ratio=ratio, gpu=gpu_spec.name)
    return {curves.tp: curves}
