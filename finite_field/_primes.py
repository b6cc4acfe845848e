"""Prime moduli: validation, the fast-prime list and residue-number-system planning.

Every modulus omnifc computes with is a prime below 2^31, so that a reduced product fits
in int64 and a field element packs into uint32. When one prime cannot hold the largest
squared distance (the *no-wrap* condition), the computation runs modulo several primes
and the results are recombined by the Chinese remainder theorem (:mod:`._crt`).

Examples
--------
>>> from finite_field import validate_prime, choose_primes
>>> validate_prime(2_147_483_647)
2147483647
>>> choose_primes(2**40)   # two primes whose product exceeds 2^40
(2147483647, 2147483629)
"""

from __future__ import annotations

import math
from functools import lru_cache

from ._errors import ParameterError

__all__ = ["MAX_PRIME", "MAX_EXACT_INTEGER", "validate_prime", "fast_primes", "choose_primes"]

#: The largest modulus the kernels accept: the Mersenne prime 2^31 - 1.
MAX_PRIME = 2**31 - 1

#: Reconstructed integers (squared distances) must stay below this to fit in int64.
MAX_EXACT_INTEGER = 2**63 - 1


def _is_prime(n: int) -> bool:
    """Deterministic Miller-Rabin: bases 2, 3, 5, 7 are exact for n < 3,215,031,751 > 2^31.

    (galois, the test oracle, checks this against its own primality test.)

    >>> [q for q in range(20) if _is_prime(q)]
    [2, 3, 5, 7, 11, 13, 17, 19]
    """
    if n < 2:
        return False
    for small in (2, 3, 5, 7):
        if n % small == 0:
            return n == small
    if n >= _MILLER_RABIN_EXACT_BELOW:
        raise ParameterError(f"primality is decided only below {_MILLER_RABIN_EXACT_BELOW}, "
                             f"got {n}")
    odd, twos = n - 1, 0
    while odd % 2 == 0:
        odd, twos = odd // 2, twos + 1
    for base in (2, 3, 5, 7):
        x = pow(base, odd, n)
        if x in (1, n - 1):
            continue
        for _ in range(twos - 1):
            x = x * x % n
            if x == n - 1:
                break
        else:
            return False
    return True


# The bases 2, 3, 5, 7 decide primality exactly below this (Jaeschke 1993).
_MILLER_RABIN_EXACT_BELOW = 3_215_031_751


def validate_prime(p: int, *, what: str = "modulus") -> int:
    """Return ``p`` as an int if it is a prime in [3, 2^31 - 1]; raise otherwise.

    >>> validate_prime(13)
    13
    """
    if isinstance(p, bool) or not isinstance(p, (int,)) and not hasattr(p, "__index__"):
        raise ParameterError(f"{what} must be an integer prime, got {type(p).__name__}")
    p = int(p)
    if not 3 <= p <= MAX_PRIME:
        raise ParameterError(f"{what} must be a prime in [3, 2^31-1], got {p}")
    if not _is_prime(p):
        raise ParameterError(f"{what} must be prime, got {p} (composite)")
    return p


@lru_cache(maxsize=None)
def fast_primes(count: int) -> tuple[int, ...]:
    """The ``count`` largest primes below 2^31, in decreasing order.

    >>> fast_primes(2)
    (2147483647, 2147483629)
    """
    primes = []
    p = MAX_PRIME
    while len(primes) < count:
        primes.append(p)
        p -= 2
        while not _is_prime(p):
            p -= 2
    return tuple(int(q) for q in primes)


def choose_primes(exclusive_bound: int, primes: tuple[int, ...] | None = None) -> tuple[int, ...]:
    """Primes whose product exceeds ``exclusive_bound``: exact results for values below it.

    Parameters
    ----------
    exclusive_bound : int
        Every value that must be represented exactly is < ``exclusive_bound``.
    primes : tuple of int, optional
        Caller-chosen primes. They are validated, must be distinct, and their product must
        exceed the bound; otherwise :class:`ParameterError` says how many bits are missing.

    Returns
    -------
    tuple of int
        The primes to use, largest first when chosen automatically.
    """
    exclusive_bound = int(exclusive_bound)
    if exclusive_bound > MAX_EXACT_INTEGER:
        raise ParameterError(
            "the largest squared distance must fit in a signed 64-bit integer: "
            f"needed {math.log2(exclusive_bound):.1f} bits, at most 63 are supported; "
            "lower scale_bits or the bound"
        )
    if primes is not None:
        chosen = tuple(validate_prime(p, what=f"primes[{i}]") for i, p in enumerate(primes))
        if len(set(chosen)) != len(chosen):
            raise ParameterError(f"primes must be distinct, got {list(chosen)}")
        product = math.prod(chosen)
        if product < exclusive_bound:
            raise ParameterError(
                f"the product of the primes ({math.log2(product):.1f} bits) must exceed the "
                f"largest squared distance ({math.log2(exclusive_bound):.1f} bits): "
                "results would wrap around"
            )
        return chosen
    count = 1
    while math.prod(fast_primes(count)) < exclusive_bound:
        count += 1
    return fast_primes(count)
