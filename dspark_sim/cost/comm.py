"""Communication of one step inside a replica: tensor-parallel all-reduces, expert-parallel
dispatch and combine, the gathers of data-parallel attention. All over NVLink.

Link numbers (cited; the latencies are assumptions, stated as such):

* bandwidth: the GPU's NVLink figure one way (``GpuSpec.nvlink_unidir_bytes_per_s``, half
  the spec sheet's bidirectional figure). All-reduces run at it (the roofline's long-standing
  ring model, ``2 (tp - 1) / tp`` of the message a GPU); all-to-all at ``a2a_bw_eff`` of it:
  DeepEP's intranode kernels reach 153-158 GB/s of an H800's ~160 GB/s NVLink (legacy
  normal kernels, EP 8) and 726-740 GB/s logical on SM100 EP 8 (V2), 0.8-0.96 of the link
  (github.com/deepseek-ai/DeepEP, README and docs/legacy.md, "Performance").
* dispatch moves FP8 activations (1 byte an element plus an fp32 scale per 128), combine
  bf16 (2 bytes): DeepEP's "FP8 dispatching and BF16 combining".
* latency: ``allreduce_latency_s`` (12 us, the roofline's assumed all-reduce latency) and
  ``a2a_latency_s`` (20 us, assumed; DeepEP's low-latency kernels take 77 us to dispatch and
  114 us to combine 128 tokens over RDMA at EP 8, an upper bound for one NVLink domain).

Modes: TP attention (``dp_attention`` off) all-reduces ``tokens x hidden`` bf16 twice a
layer, whatever ``ep`` is (every GPU holds every token). DP attention dispatches each GPU's
tokens to the GPUs holding their experts and combines them back (``ep == tp``), or
all-gathers and reduce-scatters them (a dense layer, or ``ep < tp``).
"""
from __future__ import annotations

from dataclasses import dataclass

from dspark_sim.catalog import GpuSpec, ModelSpec
from dspark_sim.cost.parallel import Parallel

DISPATCH_BYTES = 1.0 + 4.0 / 128
COMBINE_BYTES = 2.0
ACT_BYTES = 2.0


@dataclass(frozen=True, slots=True)
class CommParams:
    """Latencies (assumed) and the all-to-all share of the link (DeepEP's measurements)."""

    allreduce_latency_s: float = 12e-6
    a2a_latency_s: float = 20e-6
    a2a_bw_eff: float = 0.8

    def __post_init__(self) -> None:
        if not 0.0 < self.a2a_bw_eff <= 1.0 or min(self.allreduce_latency_s, self.a2a_latency_s) < 0:
            raise ValueError("CommParams: a2a_bw_eff must lie in (0, 1], latencies >= 0")


def remote_destinations(k: int, ep: int) -> float:
    """Expected other GPUs one token's ``k`` experts live on (experts spread evenly)."""
    return (ep - 1) * (1.0 - (1.0 - 1.0 / ep) ** k)


def comm_terms(model: ModelSpec, gpu: GpuSpec, par: Parallel, p: CommParams = CommParams()
               ) -> tuple[float, float]:
    """``(fixed_s, s_per_token)``: a step over ``T`` tokens of the replica communicates for
    ``fixed_s + s_per_token * T`` seconds (0 on one GPU)."""
    tp, h, bw = par.tp, model.hidden_size, gpu.nvlink_unidir_bytes_per_s
    if tp == 1:
        return 0.0, 0.0
    ring = 2.0 * (tp - 1) / tp * h * ACT_BYTES / bw  # one all-reduce, per token
    if not par.dp_attention:
        calls = 2 * model.num_layers
        return calls * p.allreduce_latency_s, calls * ring
    # DP attention: gather + scatter (together one all-reduce's bytes) or dispatch + combine
    a2a_layers = model.num_moe_layers if par.ep == tp else 0
    gather_layers = model.num_layers - a2a_layers
    dests = remote_destinations(model.experts_per_token, par.ep)
    a2a = dests * h * (DISPATCH_BYTES + COMBINE_BYTES) / tp / (bw * p.a2a_bw_eff)
    fixed = gather_layers * 2 * p.allreduce_latency_s + a2a_layers * 2 * p.a2a_latency_s
    return fixed, gather_layers * ring + a2a_layers * a2a


def describe(p: CommParams = CommParams()) -> str:
    """The assumptions, for a profile's provenance and a cost model's source line."""
    return (f"NVLink one way; all-reduce latency {p.allreduce_latency_s * 1e6:g} us (assumed), "
            f"all-to-all latency {p.a2a_latency_s * 1e6:g} us (assumed) at {p.a2a_bw_eff:g} of the link "
            "(DeepEP intranode), FP8 dispatch and bf16 combine")


def provenance_term(p: CommParams = CommParams(), measured=None) -> dict:
    """The ``comm`` term of a run's provenance: ``measured`` collectives (a
    :class:`~dspark_sim.cost.comm_curves.MeasuredComm`) where they price it, else the link model
    with ``p``: what it assumes, and the phrase the one-line summary carries."""
    if measured is not None:
        return {"kind": "measured", "detail": measured.source}
    return {"kind": "modelled", "detail": f"communication from link specs, not measured: {describe(p)}",
            "caveat": f"comm modelled from link specs (all-reduce latency {p.allreduce_latency_s * 1e6:g} us, "
                      f"all-to-all {p.a2a_latency_s * 1e6:g} us: assumed, not measured)"}


__all__ = ["CommParams", "comm_terms", "remote_destinations", "describe", "provenance_term"]
