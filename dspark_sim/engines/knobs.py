"""The one table from a scenario knob to the serving engine field that carries it.

``FIELDS`` is read by the config export (:mod:`dspark_sim.engines.configs` writes every tuned
knob under the field named here), by the check against the engines' released code
(:mod:`dspark_sim.engines.check` reads the same fields back from what the engine parsed) and
by the tuner's space (a knob an engine has no field for is held). A field is the key in the
engine's config file: SGLang's server flag without its ``--`` (``sglang.yaml`` is a mapping of
flags), vLLM's ``vllm serve`` flag with ``.`` into its ``speculative-config``, TensorRT-LLM's LLM
API option with ``.`` into its ``speculative_config``; ``env NAME`` is an environment variable.

A config is only worth tuning if the engine runs it: a knob the target engine
has no field for is not searched when tuning for that engine; it is held at the
value the engine itself behaves with, so the simulator scores what the engine
will do. ``FIELDS`` names the engine field behind every searched knob (read
from each engine's released source, cited in docs/tuning.md); ``held`` gives
the values the rest are pinned at, as :meth:`SearchSpace.restricted` takes them.

Sources: SGLang 0.5.23 wheel (``srt/arg_groups/fields/spec.py``, ``schedule.py``,
``exec_.py``; ``speculative/dspark_components/dspark_planner.py``:
``DSparkScheduleConfig`` of the block size with min_verify_len 1, max block_size + 1,
survival_eps 1e-6; ``environ.py``: ``SGLANG_DSPARK_CONFIDENCE_RELAY_LAG_STEPS``);
vLLM 0.33.0 wheel (``vllm/config/speculative.py``, ``scheduler.py``);
TensorRT-LLM ``tensorrt_llm/llmapi/llm_args.py`` @ 0004396 (``DSparkDecodingConfig``
has no confidence scheduling: the whole block is verified).
"""
from __future__ import annotations

from dspark_sim.tuner.space import FULL_WINDOW, SCENARIO_VALUE

ENGINES = ("sglang", "vllm", "trtllm")
NAMES = {"sglang": "SGLang 0.5.23", "vllm": "vLLM 0.33.0", "trtllm": "TensorRT-LLM"}

# (section, knob) -> {engine: the engine field that carries it, or None (held)}
FIELDS: dict[tuple[str, str], dict[str, str | None]] = {
    ("deployment", "max_running_requests"): {"sglang": "max-running-requests", "vllm": "max-num-seqs",
                                             "trtllm": "max_batch_size"},
    ("deployment", "chunked_prefill_tokens"): {"sglang": "chunked-prefill-size", "vllm": None, "trtllm": None},
    ("deployment", "max_batched_tokens"): {"sglang": None, "vllm": "max-num-batched-tokens",
                                           "trtllm": "max_num_tokens"},
    ("deployment", "batching"): {"sglang": "enable-mixed-chunk", "vllm": None, "trtllm": None},
    ("dspark", "block_size"): {"sglang": "speculative-dspark-block-size",
                               "vllm": "speculative-config.num_speculative_tokens",
                               "trtllm": "speculative_config.max_draft_len"},
    ("dspark", "scheduler"): {"sglang": None, "vllm": None, "trtllm": None},
    ("dspark", "lag_steps"): {"sglang": "env SGLANG_DSPARK_CONFIDENCE_RELAY_LAG_STEPS", "vllm": None,
                              "trtllm": None},
    ("dspark", "min_verify_len"): {"sglang": None, "vllm": None, "trtllm": None},
    ("dspark", "max_verify_len"): {"sglang": None, "vllm": None, "trtllm": None},
    ("dspark", "survival_eps"): {"sglang": None, "vllm": None, "trtllm": None},
    ("dspark", "graph_tiers"): {"sglang": None, "vllm": None, "trtllm": None},
}

_DSPARK_DEFAULTS = {"scheduler": "production", "min_verify_len": 1, "max_verify_len": None,
                    "survival_eps": 1e-6, "graph_tiers": "none"}
# engine -> {section: {knob: held value}}; SCENARIO_VALUE keeps the scenario file's value.
_HELD: dict[str, dict[str, dict]] = {
    # SGLang: prefill budget per step is --chunked-prefill-size; --max-prefill-tokens is not the
    # simulator's step budget, so that stays the scenario's. Its planner fixes the verify clamps.
    "sglang": {"deployment": {"max_batched_tokens": SCENARIO_VALUE}, "dspark": dict(_DSPARK_DEFAULTS)},
    # vLLM: one token budget per step (max-num-batched-tokens) shared by prefill and decode, always
    # mixed; long-prefill-token-threshold caps one request's chunk, not the step. Its adaptive
    # verification sizes the budget itself: the simulator's production scheduler stands in for it.
    "vllm": {"deployment": {"chunked_prefill_tokens": None, "batching": "mixed"},
             "dspark": {**_DSPARK_DEFAULTS, "lag_steps": 2}},
    # TensorRT-LLM: in-flight batching mixes prefill and decode under max_num_tokens; its
    # DSparkDecodingConfig verifies the whole block every step.
    "trtllm": {"deployment": {"chunked_prefill_tokens": None, "batching": "mixed"},
               "dspark": {**_DSPARK_DEFAULTS, "lag_steps": 2, "min_verify_len": FULL_WINDOW}},
}
_WHY = {"scheduler": "production", "min_verify_len": "1", "max_verify_len": "block_size+1",
        "survival_eps": "1e-6", "graph_tiers": "none", "lag_steps": "2", "batching": "mixed",
        "chunked_prefill_tokens": "the step budget", "max_batched_tokens": "the scenario's"}


def field(engine: str, section: str, knob: str) -> str:
    """The config key of ``engine`` that carries ``section.knob`` (the last part of a dotted
    field: the key inside its nested mapping); a knob the engine holds has none."""
    name = FIELDS[(section, knob)][engine]
    if name is None:
        raise KeyError(f"{engine} has no field for {section}.{knob}")
    return name.rpartition(".")[2].removeprefix("env ")


def attribute(engine: str, section: str, knob: str) -> str:
    """The attribute the engine's parsed arguments hold ``section.knob`` in (flags' hyphens as
    underscores)."""
    return field(engine, section, knob).replace("-", "_")


def shown(engine: str, name: str) -> str:
    """A field as a user writes it: SGLang's as its command-line flag."""
    return f"--{name}" if engine == "sglang" and not name.startswith("env ") else name


def held(engine: str, chain_drafter: str) -> dict[str, dict]:
    """Knob values ``engine`` pins when tuning for it (every study's sections), as
    :meth:`dspark_sim.tuner.space.SearchSpace.restricted` takes them."""
    if engine not in _HELD:
        raise ValueError(f"unknown engine {engine!r}; expected one of {ENGINES}")
    out = {section: dict(knobs) for section, knobs in _HELD[engine].items()}
    for method in ("static", "schedule"):
        out[method] = {"drafter": chain_drafter}
    return out


def table() -> list[str]:
    """Markdown rows: each tuned knob, and per engine the field that honours it or the value held."""
    head = "| knob | " + " | ".join(NAMES[e] for e in ENGINES) + " |"
    lines = [head, "|---|" + "---|" * len(ENGINES)]
    for (section, knob), fields in FIELDS.items():
        cells = []
        for engine in ENGINES:
            name = fields[engine]
            if name is not None:
                cells.append(f"`{shown(engine, name)}`")
                continue
            value = _HELD[engine].get(section, {}).get(knob)
            cells.append("held at " + ("verify all (block_size+1)" if value == FULL_WINDOW and knob == "min_verify_len"
                                       else _WHY.get(knob, str(value))))
        lines.append(f"| `{section}.{knob}` | " + " | ".join(cells) + " |")
    return lines
