"""The noise the acceptance model draws, shared by the sampler and the fit (common random numbers)."""
from __future__ import annotations

import math

import numpy as np


def standard_noise(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Zero-mean, unit-variance noise, float64 of ``shape``: the scaled sum of four random bytes.

    An Irwin-Hall(4) approximation of the standard normal (excess kurtosis
    -0.3, tails cut at 3.46 sd), about three times cheaper than
    ``rng.standard_normal``, whose cost dominates a step. The fit draws its
    common random numbers with this same function, so the presets are fitted
    to exactly this noise.
    """
    n = math.prod(shape)
    return noise_from_words(rng.bit_generator.random_raw(noise_words(n)), n).reshape(shape)


def noise_words(n: int) -> int:
    """Random 64-bit words :func:`standard_noise` draws for ``n`` values (four bytes each)."""
    return (n + 1) // 2


def noise_from_words(words: np.ndarray, n: int) -> np.ndarray:
    """The noise :func:`standard_noise` makes of its words: uint64 [..., noise_words(n)] -> float64
    [..., n], the same numbers for every leading index as for one draw of those words."""
    lead = words.shape[:-1]
    planes = words.view(np.uint8)[..., : 4 * n].reshape(*lead, 4, n)
    return _NOISE_OF_SUM.take(np.add.reduce(planes, axis=-2, dtype=np.int16))


_BYTE_SUM_INV_SD = 1.0 / np.sqrt(4 * (256 ** 2 - 1) / 12)
# the noise of every sum of four bytes, 0 to 1020, centred on four times the byte mean 127.5 (looked
# up: cheaper than the two operations that make it, which it holds the numbers of)
_NOISE_OF_SUM = np.arange(4 * 255 + 1) * _BYTE_SUM_INV_SD - 510.0 * _BYTE_SUM_INV_SD
