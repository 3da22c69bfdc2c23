"""The decoder's configuration: one small frozen dataclass that checks itself."""
from __future__ import annotations

from dataclasses import dataclass, field

from dspark_sim.errors import InputError
from dspark_sim.names import METHODS
from dspark_sim.scenario import BATCHING

DECODER_METHODS = tuple(m for m in METHODS if m in ("none", "static", "dspark"))  # what it can run
SCHEDULERS = ("production", "algorithm1", "full")
DEFAULT_MAX_MODEL_LEN = 16384  # for a model whose config gives no context


@dataclass(frozen=True, slots=True)
class DecoderConfig:
    """How the decoder drafts, verifies and batches.

    ``method``: ``none`` (target only), ``static`` (a one-layer chain drafter run
    ``block_size`` times left to right, MTP-k style, verifying every draft) or
    ``dspark`` (the block drafter). ``scheduler`` (dspark only): ``production``
    or ``algorithm1`` call ``schedule_verify``; ``full`` verifies the whole block.
    ``synthetic``: accept decisions and confidences come from the simulator's
    acceptance model (timing random-weight models); otherwise they are real.
    ``kernels``: ``triton`` runs the fused kernels, ``torch`` their references.
    ``batching``: ``prefill_first`` (prompt chunks in steps of their own) or ``mixed``
    (chunks beside the decode windows in every step).
    ``prefix_cache``: requests share whole cached pages of their prompts (:mod:`.prefix`);
    off unless the scenario's ``deployment.prefix_cache`` (on by default) turns it on.
    """

    method: str = "dspark"
    block_size: int = 7
    scheduler: str = "production"
    lag_steps: int = 2
    min_verify_len: int = 1
    max_verify_len: int | None = None
    survival_eps: float = 1e-6
    sts_temperatures: tuple[float, ...] = ()
    max_running_requests: int = 64
    max_batched_tokens: int = 8192
    batching: str = "prefill_first"
    kv_block_tokens: int = 16  # tokens a KV-cache page holds
    max_model_len: int = DEFAULT_MAX_MODEL_LEN
    kv_tokens: int = 0  # KV capacity in tokens; 0 = fit the free device memory
    draft_layers: int = 5
    markov_rank: int = 256
    synthetic: bool = False
    kernels: str = "triton"
    attention: str = "triton"
    cuda_graphs: bool = True
    prefix_cache: bool = False
    dtype: str = "bfloat16"
    device: str = "cuda"
    seed: int = 0
    source: str | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        self._require(self.method in DECODER_METHODS, "method", self.method, f"expected one of {DECODER_METHODS}")
        self._require(self.scheduler in SCHEDULERS, "scheduler", self.scheduler,
                      f"expected one of {SCHEDULERS}")
        self._require(self.method == "none" or 1 <= self.block_size <= 16, "block_size",
                      self.block_size, "must lie in 1..16 (the verify tile holds 16 tokens)")
        top = self.block_size + 1
        self._require(1 <= self.min_verify_len <= top, "min_verify_len", self.min_verify_len,
                      f"must lie in 1..block_size+1={top}")
        hi = self.max_verify_len
        self._require(hi is None or self.min_verify_len <= hi <= top, "max_verify_len", hi,
                      f"must lie in min_verify_len..{top}")
        self._require(not self.sts_temperatures or len(self.sts_temperatures) == self.block_size,
                      "sts", len(self.sts_temperatures), f"needs one temperature per position "
                      f"({self.block_size})")
        self._require(all(t > 0 for t in self.sts_temperatures), "sts", self.sts_temperatures,
                      "temperatures must be > 0")
        for key in ("max_running_requests", "max_batched_tokens", "kv_block_tokens", "max_model_len",
                    "draft_layers", "markov_rank", "lag_steps"):
            self._require(getattr(self, key) >= (0 if key == "lag_steps" else 1), key,
                          getattr(self, key), "out of range")
        self._require(self.kv_block_tokens & (self.kv_block_tokens - 1) == 0, "kv_block_tokens", self.kv_block_tokens,
                      "must be a power of two")
        self._require(self.batching in BATCHING, "batching", self.batching, f"expected one of {BATCHING}")
        self._require(self.kernels in ("triton", "torch"), "kernels", self.kernels, "triton|torch")
        self._require(self.attention in ("triton", "torch"), "attention", self.attention,
                      "triton|torch")
        self._require(self.dtype in ("bfloat16", "float16", "float32"), "dtype", self.dtype,
                      "bfloat16|float16|float32")

    def _require(self, ok: bool, key: str, value: object, why: str) -> None:
        if not ok:
            raise InputError(self.source, key, value, why)

    @property
    def gamma(self) -> int:
        """Draft tokens proposed per request per step (0 without speculation)."""
        return 0 if self.method == "none" else self.block_size

    @property
    def window(self) -> int:
        """Most tokens one request puts into a verify step (anchor included)."""
        return self.gamma + 1

    @property
    def max_positions(self) -> int:
        """Positions a request's pages, RoPE tables and per-request state must cover: a request of
        ``max_model_len`` tokens (prompt + output), one step in flight past the tokens the host
        has read, and the drafts of the step planned meanwhile."""
        return self.max_model_len + 2 * self.window

    @property
    def temperatures(self) -> tuple[float, ...]:
        """STS temperatures, one per draft position (ones when none were given)."""
        return self.sts_temperatures or (1.0,) * max(self.gamma, 1)


# A scenario key for each DecoderConfig field it sets, so errors name what the user wrote.
SCENARIO_KEYS = {"block_size": "speculation.block_size", "lag_steps": "speculation.lag_steps",
                 "min_verify_len": "speculation.min_verify_len", "max_verify_len": "speculation.max_verify_len",
                 "survival_eps": "speculation.survival_eps", "sts": "speculation.sts",
                 "max_running_requests": "deployment.max_running_requests",
                 "max_batched_tokens": "deployment.max_batched_tokens",
                 "kv_block_tokens": "deployment.kv_block_tokens", "batching": "deployment.batching",
                 "method": "speculation.method"}


def decoder_config(scenario, tp: int = 1, **overrides) -> DecoderConfig:
    """The :class:`DecoderConfig` a scenario asks for; ``overrides`` are fields the command line sets.

    The decoder drives one replica over ``tp`` GPUs (``--tp``, which the scenario's
    ``deployment.tp`` must equal: TP attention, a MoE's experts split over the same GPUs or
    not at all), batching ``mixed`` or ``prefill_first`` as the scenario's
    ``deployment.batching`` says; it runs no speculation, a static MTP chain (``method:
    static``, ``drafter: mtp``), the DSpark block verified whole (``static`` with ``drafter: dspark``) or DSpark's scheduler (``dspark``). Anything
    else in the scenario is an InputError naming the file and the key.
    """
    from dspark_sim.acceptance.sts import load_sts_temperatures

    file, dep, spec = scenario.file, scenario.deployment, scenario.speculation
    for key, value, want, why in (("deployment.replicas", dep.replicas, 1, "the decoder drives one replica"),
                                  ("deployment.tp", dep.tp, tp, f"the decoder runs {tp} rank(s): start it "
                                   f"with --tp {dep.tp}"),
                                  ("deployment.dp_attention", dep.dp_attention, False,
                                   "the decoder runs TP attention"),
                                  ("deployment.ep", dep.ep, _decoder_ep(scenario, tp),
                                   "the decoder splits a MoE's experts over every GPU (ep = tp)"),
                                  ("deployment.kv_cache_dtype", dep.kv_cache_dtype, "bf16", "the decoder's KV is bf16"),
                                  ("deployment.routing_skew", dep.routing_skew, 0, "the decoder's own router "
                                   "routes the tokens")):
        if value != want:
            raise InputError(file, key, value, why)
    method, scheduler = _decoder_method(scenario)
    for key, value in (("schedule", spec.schedule), ("graph_tiers", spec.graph_tiers),
                       ("pad_to_graph_tier", spec.pad_to_graph_tier)):
        if value:
            raise InputError(file, f"speculation.{key}", value, "not supported by the decoder")
    batched = min(dep.chunked_prefill_tokens or dep.max_batched_tokens, dep.max_batched_tokens)
    prefix = _prefix_cache(scenario)
    kwargs = dict(method=method, block_size=spec.block_size, scheduler=scheduler, lag_steps=spec.lag_steps,
                  min_verify_len=spec.min_verify_len, max_verify_len=spec.max_verify_len,
                  survival_eps=spec.survival_eps, max_running_requests=dep.max_running_requests,
                  max_batched_tokens=batched, batching=dep.batching, kv_block_tokens=dep.kv_block_tokens,
                  prefix_cache=prefix,
                  seed=scenario.seed,
                  source=None if file is None else str(file))
    if spec.sts is not None:
        kwargs["sts_temperatures"] = load_sts_temperatures(spec.sts, file=file)
    try:
        return DecoderConfig(**kwargs, **overrides)
    except InputError as err:
        key = SCENARIO_KEYS.get(err.key, err.key) if err.key not in overrides else err.key
        raise InputError(file, key, err.value, err.why) from None


def _prefix_cache(scenario) -> bool:
    """Whether the decoder shares prompt pages: as the deployment asks, in whole pages (a
    DeepSeek-V4 target keeps per-request state besides its pages: no sharing)."""
    from dspark_sim.catalog import get_model

    dep, model = scenario.deployment, get_model(scenario.model)
    if not dep.prefix_cache or model.v4 is not None:
        return False
    if dep.prefix_block(model) != dep.kv_block_tokens:
        raise InputError(scenario.file, "deployment.prefix_block_tokens", dep.prefix_block_tokens,
                         f"the decoder caches whole pages of kv_block_tokens={dep.kv_block_tokens}")
    return True


def _decoder_ep(scenario, tp: int) -> int:
    """The ``ep`` the decoder runs: ``tp`` for a MoE model over several GPUs, else 1."""
    from dspark_sim.catalog import get_model

    return tp if tp > 1 and get_model(scenario.model, file=scenario.file).is_moe else 1


def _decoder_method(scenario) -> tuple[str, str]:
    """(method, scheduler) of the decoder for the scenario's speculation."""
    spec, file = scenario.speculation, scenario.file
    if spec.method == "none":
        return "none", "production"
    if spec.method == "static":
        if spec.drafter not in ("mtp", "dspark"):
            raise InputError(file, "speculation.drafter", spec.drafter, "the decoder drafts with mtp or dspark")
        return ("static", "production") if spec.drafter == "mtp" else ("dspark", "full")
    if spec.method == "dspark":
        if spec.drafter != "dspark":
            raise InputError(file, "speculation.drafter", spec.drafter, "method dspark drafts with dspark here")
        return "dspark", spec.scheduler
    raise InputError(file, "speculation.method", spec.method, "the decoder runs none, static or dspark")
