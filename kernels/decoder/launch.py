"""A decoder and its requests from a scenario file: what ``dspark-decode`` and the fidelity runs share.

The scenario is read by :class:`dspark_sim.scenario.Scenario` (the simulator's own reader,
so both run the same file with the same defaults); :func:`decoder_config` takes what the
decoder can honour and rejects the rest.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dspark_sim.errors import InputError
from dspark_sim.kernels.decoder.config import DEFAULT_MAX_MODEL_LEN, DecoderConfig, decoder_config
from dspark_sim.names import DOMAINS
from dspark_sim.scenario import Scenario, load_scenario


@dataclass(frozen=True, slots=True)
class Launch:
    """A scenario, the decoder's config for it, and the SGLang SPS table it schedules from (or None)."""

    scenario: Scenario
    conf: DecoderConfig
    sps: object = None  # dspark_sim.cost.sps.SpsTable


def load_launch(path, model: str | None = None, tp: int = 1, **overrides) -> Launch:
    """Read the scenario at ``path`` for the decoder; ``model`` (``--model``) must match its model,
    ``tp`` (``--tp``) its ``deployment.tp``.

    ``overrides`` are :class:`DecoderConfig` fields set by the command line.
    """
    from dspark_sim.cost.sps import load_sps_table

    scenario = load_scenario(path)
    if model and model.lower() != scenario.model:
        raise InputError(scenario.file, "model", scenario.model,
                         f"config was tuned for {scenario.model}, not --model {model}")
    overrides["max_model_len"] = model_len(scenario, overrides.get("max_model_len"))
    conf = decoder_config(scenario, tp, **overrides)
    spec = scenario.speculation
    sps = load_sps_table(spec.sps_table) if spec.sps_table is not None else None
    if conf.method == "dspark" and conf.scheduler != "full" and sps is None:
        raise InputError(scenario.file, "speculation.sps_table", None, f"scheduler {conf.scheduler} needs an SPS table")
    cap = getattr(sps, "max_batch_tokens", None)
    if cap is not None and cap < conf.max_running_requests:
        raise InputError(scenario.file, "speculation.sps_table", cap, "max_batch_tokens below "
                         f"max_running_requests={conf.max_running_requests}: anchors alone overflow it")
    return Launch(scenario, conf, sps)


def model_len(scenario, asked: int | None) -> int:
    """``--max-model-len``: the model's context (its config's ``max_position_embeddings``) unless
    asked for, and never longer (positions past it are ones the model never saw). A DeepSeek-V4
    target keeps compressed keys for every request slot at the whole context (:mod:`.v4`): at its
    1M positions they do not fit a GPU, so its default stays at DEFAULT_MAX_MODEL_LEN."""
    from dspark_sim.catalog import get_model

    model = get_model(scenario.model, file=scenario.file)
    context = model.max_context
    if asked is None:
        if model.v4 is not None:
            return min(context or DEFAULT_MAX_MODEL_LEN, DEFAULT_MAX_MODEL_LEN)
        return context or DEFAULT_MAX_MODEL_LEN
    if context and asked > context:
        raise InputError(None, "--max-model-len", asked, f"exceeds {scenario.model}'s context of {context} tokens")
    return asked


def check_device(device: str) -> None:
    """``--device``: a CUDA device only where CUDA is (checked before any model is built)."""
    if device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            raise InputError(None, "--device", device, "no CUDA device on this machine")


def check_draft_checkpoint(directory, conf: DecoderConfig) -> None:
    """A drafter checkpoint must have been trained with the scenario's block size."""
    if not directory:
        return
    cfg_path = Path(directory) / "config.json"
    if cfg_path.exists():
        cfg = json.loads(cfg_path.read_text())
        if "block_size" in cfg and cfg["block_size"] != conf.speculation.block_size:
            raise InputError(conf.source, "speculation.block_size", conf.speculation.block_size,
                             f"the drafter checkpoint was trained with block_size {cfg['block_size']}")


def build_decoder(spec, launch: Launch, checkpoint=None, draft_checkpoint=None, shard=None):
    """The :class:`~dspark_sim.kernels.decoder.decoder.Decoder` of ``launch`` for the model ``spec``
    (``shard``: this rank's slice under tensor parallelism)."""
    from dspark_sim.kernels.decoder.decoder import Decoder
    from dspark_sim.kernels.sps_tensors import sps_tensors

    if launch.conf.max_model_len < 64:
        raise InputError(None, "--max-model-len", launch.conf.max_model_len, "must be >= 64")
    sps = sps_tensors(launch.sps) if launch.sps is not None else None
    return Decoder(spec, launch.conf, sps=sps, checkpoint=checkpoint, draft_checkpoint=draft_checkpoint,
                   acceptance=launch.scenario.speculation.acceptance, shard=shard)


def trace_sequences(launch: Launch, vocab_size: int, *, trace=None, max_requests: int | None = None,
                    temperature: float = 1.0) -> list:
    """One sequence per request of the scenario's trace (or ``trace``): random prompt tokens of the
    trace's lengths, domains drawn from the scenario's mix. A request longer than ``max_model_len``
    (prompt + output) keeps its lengths but no tokens: the serving loop refuses it."""
    from dspark_sim.kernels.decoder.sequence import Sequence
    from dspark_sim.workload import read_trace

    wl, conf = launch.scenario.workload, launch.conf
    path = trace or wl.trace
    if path is None:
        raise InputError(launch.scenario.file, "workload.trace", None, "no trace: give --trace or --prompts")
    rng, draw = np.random.default_rng(conf.seed), _domains(launch)
    blocks = _HashBlocks(conf.seed, vocab_size, wl.hash_block_tokens)
    seqs = []
    for chunk in read_trace(path, fmt=wl.format, time_scale=wl.time_scale, max_requests=max_requests or wl.max_requests):
        ids = chunk.hash_ids if chunk.hash_ids is not None else [None] * len(chunk)
        for a, p, o, h in zip(chunk.arrival_s.tolist(), chunk.prompt_tokens.tolist(), chunk.output_tokens.tolist(), ids):
            size = max(1, p)
            if size + o > conf.max_model_len:
                seqs.append(Sequence.unseen(len(seqs), size, o, draw(rng), a))
                continue
            prompt = blocks.prompt(h or (), size, rng)
            seqs.append(Sequence(len(seqs), prompt, o, temperature, draw(rng), arrival_s=a))
    return seqs


class _HashBlocks:
    """Prompt tokens of a trace's prefix hash chain: one fixed run of ``block`` random tokens per
    hash id (the same in every request that names it), random tokens past the chain. Two requests
    share exactly the prefix their hash ids share, so a prefix cache finds what the simulator's does."""

    def __init__(self, seed: int, vocab_size: int, block: int):
        self.seed, self.vocab, self.block = seed, vocab_size, block
        self.tokens: dict[int, list[int]] = {}

    def _of(self, h: int) -> list[int]:
        if h not in self.tokens:
            gen = np.random.default_rng(np.random.SeedSequence([self.seed, h % (1 << 63), 1]))
            self.tokens[h] = gen.integers(0, self.vocab, size=self.block).tolist()
        return self.tokens[h]

    def prompt(self, hash_ids, size: int, rng) -> list[int]:
        """``size`` tokens: the blocks of ``hash_ids`` (the last one cut), then ``rng``'s tokens."""
        prompt = [t for h in hash_ids[:-(-size // self.block)] for t in self._of(h)][:size]
        return prompt + rng.integers(0, self.vocab, size=size - len(prompt)).tolist()


def prompt_sequences(launch: Launch, path, *, max_tokens: int, max_requests: int | None = None,
                     temperature: float = 1.0, vocab_size: int | None = None) -> list:
    """One sequence per line of a JSONL prompt file (``{"prompt_ids": [...], "max_tokens": n}``);
    token ids must lie in the vocabulary (``vocab_size``, when given). A prompt longer than
    ``max_model_len`` allows is kept whole: the serving loop refuses it."""
    from dspark_sim.kernels.decoder.sequence import Sequence

    rng, draw = np.random.default_rng(launch.conf.seed), _domains(launch)
    seqs = []
    try:
        lines = Path(path).read_text().splitlines()
    except (OSError, UnicodeDecodeError) as err:
        raise InputError(path, None, None, f"cannot read: {type(err).__name__}") from None
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        ids, tokens = _prompt_line(path, i + 1, line, max_tokens, vocab_size)
        seqs.append(Sequence(len(seqs), ids, tokens, temperature, draw(rng)))
    if not seqs:
        raise InputError(path, None, None, "no prompts")
    return seqs[:max_requests] if max_requests else seqs


def _prompt_line(path, number: int, line: str, max_tokens: int, vocab_size: int | None) -> tuple[list[int], int]:
    """(token ids, tokens to generate) of one prompt-file line, or an InputError naming the line."""
    from dspark_sim.config import is_int
    from dspark_sim.limits import MAX_TOKENS

    try:
        item = json.loads(line)
    except json.JSONDecodeError as err:
        raise InputError(path, f"line {number}", line.strip()[:40], f"bad JSON: {err.msg}") from None
    if not isinstance(item, dict) or item.get("prompt_ids") is None:
        raise InputError(path, f"line {number}", None, "needs prompt_ids (token ids)")
    ids, tokens = item["prompt_ids"], item.get("max_tokens", max_tokens)
    top = vocab_size if vocab_size is not None else 2**31
    if not isinstance(ids, list) or not ids or not all(is_int(t) and 0 <= t < top for t in ids):
        raise InputError(path, f"line {number}: prompt_ids", ids, f"expected a non-empty list of token ids "
                         f"in [0, {top})")
    if not is_int(tokens) or not 1 <= tokens <= MAX_TOKENS:
        raise InputError(path, f"line {number}: max_tokens", tokens, f"expected an integer in [1, {MAX_TOKENS}]")
    return ids, tokens


def _domains(launch: Launch):
    """A function drawing one domain index (DOMAINS order) from the scenario's mix."""
    names = [d for d, _ in launch.scenario.workload.domain_mix]
    weights = np.array([w for _, w in launch.scenario.workload.domain_mix])
    return lambda rng: DOMAINS.index(names[rng.choice(len(names), p=weights)])
