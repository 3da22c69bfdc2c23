"""The DSpark decoder: a Qwen3 target with a paged KV cache, the DSpark block
drafter and static-chain baselines, a speculative step loop on the fused
kernels, and a continuous-batching serving loop that writes the simulator's CSVs.

Importing this package pulls in torch and triton.
"""
from dspark_sim.kernels.decoder.config import DecoderConfig
from dspark_sim.kernels.decoder.decoder import Decoder, StepStats
from dspark_sim.kernels.decoder.engine import serve, write_csvs
from dspark_sim.kernels.decoder.sequence import Sequence

__all__ = ["DecoderConfig", "Decoder", "StepStats", "Sequence", "serve", "write_csvs"]
