"""Uniform field elements from a cryptographically secure byte source.

A *byte source* is any object with a ``bytes(n)`` method returning ``n`` bytes. The default,
:data:`SYSTEM_RANDOM`, reads ``os.urandom``. Higher layers may plug in a faster keystream
(for example a ChaCha20 PRG keyed from a secret, see ``protocols``); tests may pass a
seeded ``numpy.random.Generator`` (it has a ``bytes`` method) for reproducibility. Public
entry points never default to a seeded source.

Sampling uses rejection: draw ``bit_length(p)``-bit integers and keep those below ``p``.
``x mod p`` of raw bytes would be biased.
"""

from __future__ import annotations

import os
from typing import Protocol

import numpy as np

from ._errors import ParameterError

__all__ = ["ByteSource", "SystemRandom", "SYSTEM_RANDOM", "uniform_elements"]


class ByteSource(Protocol):
    """Anything that returns ``n`` random bytes from ``bytes(n)``."""

    def bytes(self, n: int) -> bytes:  # pragma: no cover - protocol
        ...


class SystemRandom:
    """The operating system's CSPRNG (``os.urandom``)."""

    def bytes(self, n: int) -> bytes:
        return os.urandom(n)

    def __repr__(self) -> str:
        return "SystemRandom()"


#: The default byte source.
SYSTEM_RANDOM = SystemRandom()


def uniform_elements(p: int, shape, source: ByteSource | None = None) -> np.ndarray:
    """Uniform elements of GF(p) as an int64 array of ``shape``.

    Parameters
    ----------
    p : int
        Prime modulus below 2^31.
    shape : int or tuple of int
        Output shape.
    source : ByteSource, optional
        Where the randomness comes from; the OS CSPRNG when omitted.

    Examples
    --------
    >>> x = uniform_elements(13, (2, 3))
    >>> x.shape, bool(((0 <= x) & (x < 13)).all())
    ((2, 3), True)
    """
    if not 2 <= p < 2**31:
        raise ParameterError(f"modulus must be in [2, 2^31), got {p}")
    source = SYSTEM_RANDOM if source is None else source
    shape = (shape,) if np.isscalar(shape) else tuple(shape)
    total = int(np.prod(shape, dtype=np.int64))
    out = np.empty(total, dtype=np.int64)
    bits = int(p - 1).bit_length()
    mask = np.uint32((1 << bits) - 1)
    # A masked word is accepted with probability p / 2^bits (> 1/2). Reading the OS CSPRNG
    # is the slow part, so draw just above the expected number of words (usually one pass;
    # the loop tops up when rejections were unlucky).
    acceptance = p / (1 << bits)
    filled = 0
    while filled < total:
        need = total - filled
        draw = int(need / acceptance * 1.001) + 64
        words = np.frombuffer(source.bytes(4 * draw), dtype="<u4") & mask
        kept = words[words < p][:need]
        out[filled : filled + kept.size] = kept
        filled += kept.size
    return out.reshape(shape)
