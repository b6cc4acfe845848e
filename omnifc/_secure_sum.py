"""``secure_sum``: the coordinator learns the sum of the parties' vectors and nothing else.

Each party quantizes its contribution with the public bound (negative values embedded mod
p), adds pairwise masks derived from X25519 secrets shared with every other party (the
same mask machinery as the masked distance upload: ``protocols._crypto.PairKeys``), and
uploads. The masks cancel in the sum mod p; the primes are chosen so that the sum cannot
wrap around (2 m M + 1 below their product, M = round(2^q R)), and the signed result is
recovered by CRT with an offset of m M.

What the coordinator learns: the elementwise sum over all parties, exactly (in units of
2^-q). It does not learn any single contribution, nor which party contributed what; each
masked upload is uniformly distributed given the others' masks stay secret. With two
parties each party can of course subtract its own vector from the sum if it is told the
sum; the sum itself is only returned by the coordinator.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import numpy as np

from finite_field import InputError, ParameterError, Quantizer

from ._result import PhaseStats

__all__ = ["secure_sum", "SumResult"]

logger = logging.getLogger(__name__)


@dataclass
class SumResult:
    """What :func:`secure_sum` returns.

    Attributes
    ----------
    total : ndarray of float64
        The sum of the quantized contributions in real units (integer_total / 2^q), with
        the shape of one contribution.
    integer_total : ndarray of int64
        The exact sum of the quantized contributions.
    parameters : dict
        Public parameters: bound, scale_bits, primes, parties, transport, ...
    stats : dict of str to PhaseStats
        Per-phase seconds and bytes.
    clipped : dict of str to int
        Per party, how many entries were clipped to the public bound.
    """

    total: np.ndarray
    integer_total: np.ndarray
    parameters: dict
    stats: dict = field(default_factory=dict)
    clipped: dict = field(default_factory=dict)


def secure_sum(contributions: dict, *, bound: float, scale_bits: int = 16,
               nonnegative: bool = False, transport: str = "memory", primes=None,
               deadline: float = 60.0, insecure: bool = False) -> SumResult:
    """Sum every party's vector (or matrix) through pairwise masks: only the sum is revealed.

    Parameters
    ----------
    contributions : dict of str to array-like
        Each party's contribution, all of the same shape (k,) or (r, k). At least two.
    bound : float
        Public clip bound R of every entry ([-R, R], or [0, R] if ``nonnegative``).
    scale_bits : int
        q: entries are rounded to multiples of 2^-q.
    transport : {"memory", "grpc"}
        As in :func:`secure_distance_matrix`.
    primes : sequence of int, optional
        Moduli; by default the fewest primes below 2^31 with 2 m M + 1 below their product.

    Returns
    -------
    SumResult

    Examples
    --------
    >>> import numpy as np, omnifc
    >>> parts = {"a": np.array([1.5, -2.0]), "b": np.array([0.25, 1.0]),
    ...          "c": np.array([-1.0, 0.5])}
    >>> omnifc.secure_sum(parts, bound=4.0, scale_bits=8).total.tolist()
    [0.75, -0.5]
    """
    from protocols import SessionParameters

    from ._secure import _run

    if not isinstance(contributions, dict):
        raise ParameterError("contributions must be a dict {party name: array}")
    if len(contributions) < 2:
        raise ParameterError(f"a secure sum needs at least 2 parties, got {len(contributions)}")
    names = [str(k) for k in contributions]
    if len(set(names)) != len(names):
        raise ParameterError(f"party names must be unique, got {names}")
    arrays = [np.asarray(v, dtype=np.float64) for v in contributions.values()]
    shape = arrays[0].shape
    if len(shape) not in (1, 2) or 0 in shape:
        raise InputError(f"a contribution must have shape (k,) or (r, k) with k, r >= 1, got "
                         f"{shape}", party=names[0])
    for name, x in zip(names, arrays):
        if x.shape != shape:
            raise InputError(f"every contribution must have the same shape; has {x.shape}, "
                             f"expected {shape} (from party {names[0]!r})", party=name)
    matrix_shape = (1, shape[0]) if len(shape) == 1 else shape
    quantizer = Quantizer(scale_bits=scale_bits, bound=bound, nonnegative=nonnegative)
    clipped = {name: quantizer.quantize(x.reshape(matrix_shape), party=name).clipped
               for name, x in zip(names, arrays)}
    parameters = SessionParameters(kind="sum", dim=matrix_shape[1], rows=matrix_shape[0],
                                   bound=bound, scale_bits=scale_bits, nonnegative=nonnegative,
                                   primes=primes)
    data = {name: x.reshape(matrix_shape) for name, x in zip(names, arrays)}
    outcome = _run(data, parameters, transport=transport, responders=None, cluster=None,
                   deadline=deadline, insecure=insecure)
    integer = outcome.integer.reshape(shape)
    stats = {phase: PhaseStats(seconds=float(s), bytes_sent=int(b))
             for phase, (s, b) in outcome.stats.items()}
    logger.info("secure sum of %d parties, %d entries (%s)", len(names), integer.size,
                transport)
    return SumResult(total=integer / quantizer.scale, integer_total=integer,
                     parameters=outcome.parameters | {"party_names": names,
                                                      "transport": transport},
                     stats=stats, clipped=clipped)
