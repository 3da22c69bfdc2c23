"""The per-step acceptance and confidence sampler the engine calls for a whole batch."""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from dspark_sim.acceptance.config import AcceptanceConfig
from dspark_sim.acceptance.noise import noise_from_words, noise_words, standard_noise
from dspark_sim.acceptance.paper import FIT_POSITIONS
from dspark_sim.acceptance.preset import MAX_POSITIONS, AcceptancePreset, PresetTable, builtin, extend
from dspark_sim.names import DOMAINS

AUC_REFIT_SEED = 7  # fixed, so an ``auc`` override gives the same head on every run


class AcceptanceModel:
    """True acceptance probabilities, the head's confidences, and sequential acceptance.

    One preset per domain (DOMAINS order). Each request draws a difficulty
    once; each step draws, per request, a block-wide and a per-position noise
    for the true logits and a per-position head noise, so the scheduler sees
    only confidences while acceptance follows the true probabilities.
    """

    def __init__(self, cfg: AcceptanceConfig, model_name: str, *, file=None):
        self.cfg = cfg
        self.max_block_size = MAX_POSITIONS
        if cfg.fixed_accept_prob is not None:
            self.presets: tuple[AcceptancePreset, ...] = ()
            return
        table = PresetTable.load(cfg.preset_file, file=file, key=f"{cfg.key}.preset_file") \
            if cfg.preset_file else builtin()
        target = cfg.target or model_name
        presets = []
        for domain in DOMAINS:
            preset = table.find(cfg.drafter, target, cfg.dataset or domain, file=file, key=f"{cfg.key}.drafter")
            presets.append(_override(preset, cfg))
        self._use(presets)

    @classmethod
    def from_presets(cls, presets, cfg: AcceptanceConfig | None = None) -> AcceptanceModel:
        """A model with the given presets in the domain slots 0, 1, ... (tests, calibration)."""
        self = cls.__new__(cls)
        self.cfg = cfg or AcceptanceConfig()
        self.max_block_size = MAX_POSITIONS
        self._use([_override(extend(p), self.cfg) for p in presets])
        return self

    def with_sts(self, temperatures: tuple[float, ...]) -> AcceptanceModel:
        """The same model with these STS temperatures (positions past the list repeat its last)."""
        temps = (tuple(temperatures) + (temperatures[-1],) * MAX_POSITIONS)[:MAX_POSITIONS]
        other = AcceptanceModel.__new__(AcceptanceModel)
        other.cfg, other.max_block_size = self.cfg, self.max_block_size
        other._use([replace(p, sts_temperatures=temps) for p in self.presets])
        return other

    def _use(self, presets: list[AcceptancePreset]) -> None:
        """Pack the presets into per-block-size arrays laid out for ``step``.

        ``probs`` works on negated logits, since sigmoid(v) = 1 / (1 + exp(-v)), and
        request-major, as it returns them. So table[b] is [4, domain, b]: -mu, then
        the head's slope, -bias and -noise, the last three divided by the STS
        temperature (not for raw confidences).
        """
        self.presets = tuple(presets)
        self._sigma = np.array([[p.difficulty_sigma, p.step_sigma, p.position_sigma] for p in presets])
        rows = []
        for p in presets:
            inv_temp = np.reciprocal(p.sts_temperatures) if self.cfg.calibration == "sts" else 1.0
            rows.append(np.stack([np.negative(p.mu), np.multiply(p.conf_slope, inv_temp),
                                  np.multiply(p.conf_bias, -inv_temp), np.multiply(p.conf_noise, -inv_temp)]))
        table = np.stack(rows, axis=-1)
        self._table = {g: np.ascontiguousarray(np.swapaxes(table[:, :g], 1, 2)) for g in range(1, MAX_POSITIONS + 1)}
        self._sigma_t = np.ascontiguousarray(self._sigma.T)

    def new_requests(self, domain_idx: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Difficulty (a logit offset, fixed for the request's life) per request; float64 [n]."""
        if self.cfg.fixed_accept_prob is not None:
            return np.zeros(len(domain_idx))
        return rng.standard_normal(len(domain_idx)) * self._sigma[domain_idx, 0]

    def step(self, difficulty: np.ndarray, domain_idx: np.ndarray, block_size: int,
             rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """One draft step for R requests: (p_true, conf), both float64 [R, block_size], C-contiguous.

        p_true[r, k] is the true conditional acceptance probability of draft
        k+1 given drafts 1..k were accepted; conf is what the scheduler sees
        (STS-calibrated or raw, per the config). Randomness: one
        ``standard_noise`` draw of shape [2 block_size + 1, R] per call (block,
        position and head noise).
        """
        n = len(difficulty)
        if self.cfg.fixed_accept_prob is not None:
            p = np.full((n, block_size), self.cfg.fixed_accept_prob)
            return p, p.copy()
        z = standard_noise(rng, (2 * block_size + 1, n))
        return self.probs(difficulty, domain_idx, block_size, z)

    def step_words(self, num_reqs: int, block_size: int) -> int:
        """Random 64-bit words one :meth:`step` draws for ``num_reqs`` requests."""
        return 0 if self.cfg.fixed_accept_prob is not None else noise_words((2 * block_size + 1) * num_reqs)

    def steps(self, difficulty: np.ndarray, domain_idx: np.ndarray, block_size: int,
              words: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """K draft steps of the same R requests from the words K :meth:`step` calls would draw,
        uint64 [K, step_words]: (p_true, conf), float64 [K, R, block_size] each, step k's
        numbers those of the k-th :meth:`step`, bit for bit."""
        n, k = len(difficulty), words.shape[0]
        if self.cfg.fixed_accept_prob is not None:
            p = np.full((k, n, block_size), self.cfg.fixed_accept_prob)
            return p, p.copy()
        z = noise_from_words(words, (2 * block_size + 1) * n).reshape(k, 2 * block_size + 1, n)
        return self.probs(difficulty, domain_idx, block_size, z)

    def steps_after(self, difficulty: np.ndarray, domain_idx: np.ndarray, block_size: int, first: np.ndarray,
                    words: np.ndarray, num_reqs: int) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`steps` of a first step that draws for all R' rows of ``difficulty`` (its words
        ``first``, uint64 [step_words(R', block_size)]) and K - 1 steps after it that draw for the
        first ``num_reqs`` (``words``, uint64 [K - 1, step_words(num_reqs, block_size)]): (p_true,
        conf), float64 [K, R', block_size], the later steps' last R' - num_reqs rows none of the
        model's (noise 0)."""
        rows, k, width = len(difficulty), words.shape[0] + 1, 2 * block_size + 1
        if self.cfg.fixed_accept_prob is not None:
            p = np.full((k, rows, block_size), self.cfg.fixed_accept_prob)
            return p, p.copy()
        z = np.zeros((k, width, rows))
        z[0] = noise_from_words(first, width * rows).reshape(width, rows)
        z[1:, :, :num_reqs] = noise_from_words(words, width * num_reqs).reshape(k - 1, width, num_reqs)
        return self.probs(difficulty, domain_idx, block_size, z)

    def probs(self, difficulty: np.ndarray, domain_idx: np.ndarray, block_size: int,
              z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(p_true, conf) [..., R, block_size] from standard noise ``z`` [..., 2 block_size + 1, R]
        (leading axes: steps); the same operations on every step, so the numbers do not depend
        on how many steps are evaluated together."""
        g = block_size
        t = self._table[g].take(domain_idx, axis=1)  # [4, R, g]
        sigma = self._sigma_t.take(domain_idx, axis=1)
        by_request = z.swapaxes(-1, -2)  # [..., R, 2 g + 1]: computed in the layout returned
        out = np.empty((2, *z.shape[:-2], z.shape[-1], g))
        neg_x, neg_logit = out[0], out[1]
        np.multiply(by_request[..., 1:g + 1], sigma[2][:, None], out=neg_x)
        neg_x += t[0]
        neg_x -= (z[..., 0, :] * sigma[1] + difficulty)[..., None]
        np.multiply(by_request[..., g + 1:], t[3], out=neg_logit)
        neg_logit += t[2]
        neg_logit += np.multiply(t[1], neg_x)
        np.exp(out, out=out)  # logits stay far inside exp's range: the noise is bounded
        out += 1.0
        np.reciprocal(out, out=out)
        return out[0], out[1]

    def accept(self, p_true: np.ndarray, num_drafts: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Accepted drafts per request, int64 [R]: sequential Bernoulli(p_true), stopped by the first
        rejection and capped at num_drafts[r] (int [R] or a scalar). Draws one uniform per entry of
        p_true whatever num_drafts is, so the verify length never shifts later random numbers."""
        return accepted_drafts(rng.random(p_true.shape) < p_true, num_drafts)

    def accept_words(self, p_true: np.ndarray, num_drafts: np.ndarray, words: np.ndarray) -> np.ndarray:
        """:meth:`accept` of K steps from the words its K calls would draw: p_true [K, R, block_size],
        num_drafts [K, R], words uint64 [K, R * block_size] -> int64 [K, R]."""
        uniform = (words >> _ELEVEN) * _DOUBLE_UNIT  # how numpy's ``random`` makes a double
        return accepted_drafts(uniform.reshape(p_true.shape) < p_true, num_drafts)


def accepted_drafts(ok: np.ndarray, num_drafts) -> np.ndarray:
    """Drafts accepted before the first rejection, capped at ``num_drafts``: ok bool [..., block_size]
    -> int64 [...]."""
    run = _LEADING_ONES[ok @ _BIT_WEIGHTS[: ok.shape[-1]]]
    return np.minimum(run, num_drafts)


_DOUBLE_UNIT = 1.0 / 9007199254740992.0  # 2**-53
_ELEVEN = np.uint64(11)  # the bits a double's 53-bit mantissa leaves of a word


# Accepted-prefix length by bit pattern: the rows of ``ok`` become integers (bit k = draft k+1
# accepted) and a table gives the number of trailing ones, i.e. drafts before the first rejection.
def _leading_ones_table(bits: int) -> np.ndarray:
    """For every ``bits``-bit integer, the number of consecutive 1-bits from bit 0; int64 [2**bits]."""
    values = np.arange(1 << bits)
    table = np.zeros(1 << bits, dtype=np.int64)
    alive = np.ones(1 << bits, dtype=bool)
    for k in range(bits):
        alive &= (values >> k) & 1 == 1
        table += alive
    return table


_BIT_WEIGHTS = np.left_shift(1, np.arange(MAX_POSITIONS), dtype=np.int64)
_LEADING_ONES = _leading_ones_table(MAX_POSITIONS)


def _override(preset: AcceptancePreset, cfg: AcceptanceConfig) -> AcceptancePreset:
    """Apply the config's difficulty_sigma and auc overrides to a (full-length) preset."""
    if cfg.difficulty_sigma is not None:
        preset = replace(preset, difficulty_sigma=cfg.difficulty_sigma)
    if cfg.auc is None:
        return preset
    # an ``auc`` override is a fit (scipy.optimize): only a scenario that asks for one loads the fitter
    from dspark_sim.acceptance.fit import refit_head

    auc = (tuple(cfg.auc) + (cfg.auc[-1],) * FIT_POSITIONS)[:FIT_POSITIONS]
    return extend(refit_head(preset, auc, seed=AUC_REFIT_SEED))
