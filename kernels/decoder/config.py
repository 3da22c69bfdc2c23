"""The decoder's configuration: the scenario's ``speculation`` and ``deployment`` sections, with
their keys and defaults, and the decoder's own knobs, in one small frozen dataclass that checks itself."""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from dspark_sim.errors import InputError
from dspark_sim.scenario import Deployment, Speculation

DEFAULT_MAX_MODEL_LEN = 16384  # for a model whose config gives no context


def _section_key(section: str, name: str):
    """A read-only attribute that reads ``name`` of the config's ``section``."""
    return property(lambda self: getattr(getattr(self, section), name),
                    doc=f"The scenario's ``{section}.{name}``.")


@dataclass(frozen=True, slots=True)
class DecoderConfig:
    """How the decoder drafts, verifies and batches.

    ``speculation`` and ``deployment`` are the scenario's sections (the same keys and
    defaults a scenario file has); the decoder reads from them :attr:`method` — ``none``
    (target only), ``static`` (a one-layer chain drafter, ``drafter: mtp``, run
    ``block_size`` times left to right, verifying every draft) or ``dspark`` (the block
    drafter) — and :attr:`scheduler` — ``production`` or ``algorithm1`` call
    ``schedule_verify``; ``full`` (``method: static`` with ``drafter: dspark``) verifies the
    whole block. Its batching (``prefill_first``: prompt chunks in steps of their own;
    ``mixed``: chunks beside the decode windows in every step) and prefix cache (requests
    share whole cached pages of their prompts, :mod:`.prefix`) are the deployment's.
    ``synthetic``: accept decisions and confidences come from the simulator's acceptance
    model (timing random-weight models); otherwise they are real. ``kernels``: ``triton``
    runs the fused kernels, ``torch`` their references. :meth:`of` builds one from flat keys.
    """

    speculation: Speculation = field(default_factory=Speculation)
    deployment: Deployment = field(default_factory=Deployment)
    sts_temperatures: tuple[float, ...] = ()
    max_model_len: int = DEFAULT_MAX_MODEL_LEN
    kv_tokens: int = 0  # KV capacity in tokens; 0 = fit the free device memory
    draft_layers: int = 5
    markov_rank: int = 256
    synthetic: bool = False
    kernels: str = "triton"
    attention: str = "triton"
    cuda_graphs: bool = True
    dtype: str = "bfloat16"
    device: str = "cuda"
    seed: int = 0
    source: str | None = field(default=None, compare=False)

    lag_steps = _section_key("speculation", "lag_steps")
    min_verify_len = _section_key("speculation", "min_verify_len")
    max_verify_len = _section_key("speculation", "max_verify_len")
    survival_eps = _section_key("speculation", "survival_eps")
    max_running_requests = _section_key("deployment", "max_running_requests")
    batching = _section_key("deployment", "batching")
    kv_block_tokens = _section_key("deployment", "kv_block_tokens")  # tokens a KV-cache page holds
    prefix_cache = _section_key("deployment", "prefix_cache")

    def __post_init__(self) -> None:
        spec = self.speculation
        self._require(isinstance(spec, Speculation), "speculation", spec, "expected the scenario's section")
        self._require(isinstance(self.deployment, Deployment), "deployment", self.deployment,
                      "expected the scenario's section")
        _decoder_method(spec, self.source)
        for key in ("schedule", "graph_tiers", "pad_to_graph_tier"):
            self._require(not getattr(spec, key), f"speculation.{key}", getattr(spec, key),
                          "not supported by the decoder")
        top = spec.block_size + 1
        self._require(spec.min_verify_len <= top, "speculation.min_verify_len", spec.min_verify_len,
                      f"must lie in 1..block_size+1={top}")
        hi = spec.max_verify_len
        self._require(hi is None or hi <= top, "speculation.max_verify_len", hi, f"must lie in min_verify_len..{top}")
        self._require(not self.sts_temperatures or len(self.sts_temperatures) == spec.block_size,
                      "speculation.sts", len(self.sts_temperatures), f"needs one temperature per position "
                      f"({spec.block_size})")
        self._require(all(t > 0 for t in self.sts_temperatures), "speculation.sts", self.sts_temperatures,
                      "temperatures must be > 0")
        for key in ("max_model_len", "draft_layers", "markov_rank"):
            self._require(getattr(self, key) >= 1, key, getattr(self, key), "out of range")
        tokens = self.kv_block_tokens
        self._require(tokens & (tokens - 1) == 0, "deployment.kv_block_tokens", tokens, "must be a power of two")
        self._require(self.kernels in ("triton", "torch"), "kernels", self.kernels, "triton|torch")
        self._require(self.attention in ("triton", "torch"), "attention", self.attention,
                      "triton|torch")
        self._require(self.dtype in ("bfloat16", "float16", "float32"), "dtype", self.dtype,
                      "bfloat16|float16|float32")

    def _require(self, ok: bool, key: str, value: object, why: str) -> None:
        if not ok:
            raise InputError(self.source, key, value, why)

    @classmethod
    def of(cls, **knobs) -> DecoderConfig:
        """A config from flat keys, the scenario's defaults for the rest: see :meth:`replaced`."""
        return cls().replaced(**knobs)

    def replaced(self, **knobs) -> DecoderConfig:
        """This config with ``knobs`` changed: the decoder's ``method`` and ``scheduler`` (as
        :attr:`method` and :attr:`scheduler` read them), any other key of the scenario's
        ``speculation`` or ``deployment`` section, or a field of this class."""
        spec = {k: knobs.pop(k) for k in list(knobs) if k in Speculation.__dataclass_fields__ or k == "scheduler"}
        if "method" in spec or "scheduler" in spec:
            spec.update(_speculation_of(spec.pop("method", self.method), spec.pop("scheduler", self.scheduler)))
        dep = {k: knobs.pop(k) for k in list(knobs) if k in Deployment.__dataclass_fields__}
        return replace(self, speculation=replace(self.speculation, **spec),
                       deployment=replace(self.deployment, **dep), **knobs)

    @property
    def method(self) -> str:
        """What the decoder drafts with: ``none``, ``static`` (a chain) or ``dspark`` (the block drafter)."""
        return _decoder_method(self.speculation, self.source)[0]

    @property
    def scheduler(self) -> str:
        """How it picks verify lengths: ``production``, ``algorithm1`` or ``full`` (every draft)."""
        return _decoder_method(self.speculation, self.source)[1]

    @property
    def block_size(self) -> int:
        """Draft tokens proposed per request per step (0 without speculation)."""
        return 0 if self.speculation.method == "none" else self.speculation.block_size

    @property
    def window(self) -> int:
        """Most tokens one request puts into a verify step: ``block_size + 1`` (anchor included)."""
        return self.speculation.window

    @property
    def max_batched_tokens(self) -> int:
        """Prompt tokens one step takes: the deployment's per-step prefill cap within its budget."""
        dep = self.deployment
        return min(dep.chunked_prefill_tokens or dep.max_batched_tokens, dep.max_batched_tokens)

    @property
    def max_positions(self) -> int:
        """Positions a request's pages, RoPE tables and per-request state must cover: a request of
        ``max_model_len`` tokens (prompt + output), one step in flight past the tokens the host
        has read, and the drafts of the step planned meanwhile."""
        return self.max_model_len + 2 * self.window

    @property
    def temperatures(self) -> tuple[float, ...]:
        """STS temperatures, one per draft position (ones when none were given)."""
        return self.sts_temperatures or (1.0,) * max(self.block_size, 1)


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
    kwargs = dict(speculation=spec, deployment=replace(dep, prefix_cache=_prefix_cache(scenario)),
                  seed=scenario.seed, source=None if file is None else str(file))
    if spec.sts is not None:
        kwargs["sts_temperatures"] = load_sts_temperatures(spec.sts, file=file)
    return DecoderConfig(**kwargs, **overrides)


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


def _decoder_method(spec: Speculation, file) -> tuple[str, str]:
    """(method, scheduler) of the decoder for the scenario's speculation ``spec``."""
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


def _speculation_of(method: str, scheduler: str) -> dict:
    """The speculation keys that the decoder's ``method`` and ``scheduler`` stand for."""
    if method == "none":
        return {"method": "none"}
    if method == "static":
        return {"method": "static", "drafter": "mtp"}
    if method == "dspark":
        if scheduler == "full":
            return {"method": "static", "drafter": "dspark"}
        return {"method": "dspark", "drafter": "dspark", "scheduler": scheduler}
    raise InputError(None, "method", method, "the decoder runs none, static or dspark")
