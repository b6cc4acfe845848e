"""Chinese remaindering of residue arrays back to exact int64 integers (Garner's method).

>>> import numpy as np
>>> from finite_field import crt_combine
>>> crt_combine([np.array([2]), np.array([3])], (5, 7)).tolist()
[17]
"""

from __future__ import annotations

import numpy as np

from ._errors import ParameterError

__all__ = ["crt_combine"]

_INT64_LIMIT = 2**63


def crt_combine(residues, primes) -> np.ndarray:
    """The unique x in [0, prod(primes)) with x = residues[i] mod primes[i], as int64.

    With one prime the first residue array itself is returned (no copy). The true values
    must be below 2^63; a mixed-radix digit that would push a value past
    that raises :class:`ParameterError` (it means the residues are inconsistent with the
    no-wrap bound, e.g. corrupted).
    """
    primes = tuple(int(p) for p in primes)
    if len(residues) != len(primes):
        raise ParameterError(f"{len(residues)} residue arrays for {len(primes)} primes")
    residues = [np.asarray(r, dtype=np.int64) for r in residues]
    result = residues[0]  # never modified in place: one prime returns it as is
    radix = primes[0]  # product of the primes already used
    for i in range(1, len(primes)):
        p = primes[i]
        partial_mod = result % p
        inverse = pow(radix % p, -1, p)
        digit = (residues[i] - partial_mod) % p * inverse % p
        if radix >= _INT64_LIMIT:
            if digit.any():
                raise ParameterError("reconstructed values exceed the int64 range")
            continue
        limit = (_INT64_LIMIT - 1 - result) // radix  # largest digit that still fits
        if (digit > limit).any():
            raise ParameterError("reconstructed values exceed the int64 range")
        result = result + digit * radix
        radix *= p
    return result
