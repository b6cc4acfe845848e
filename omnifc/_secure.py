"""``secure_distance_matrix``: the whole OmniFC pipeline behind one call."""

from __future__ import annotations

import logging
import time

import numpy as np

from finite_field import (InputError, ParameterError, decode_sum, encode_rows, evaluate_shares,
                          make_plan, weight_evaluation)

from ._result import DistanceResult, PhaseStats

__all__ = ["secure_distance_matrix", "normalize_parties"]

logger = logging.getLogger("omnifc")

_ELEMENT_BYTES = 4  # field elements travel packed as uint32


def normalize_parties(parties) -> tuple[list[str], list[np.ndarray]]:
    """Accept ``{name: array}`` or a sequence of arrays; check shapes before anything leaves.

    Returns the party names and their float64 (n_i, d) arrays. Every party must hold at
    least one row, and all parties the same number of features.
    """
    if isinstance(parties, dict):
        names = [str(k) for k in parties]
        arrays = list(parties.values())
    else:
        arrays = list(parties)
        names = [f"party-{i}" for i in range(len(arrays))]
    if not arrays:
        raise ParameterError("at least one party is needed, got none")
    if len(set(names)) != len(names):
        raise ParameterError(f"party names must be unique, got {names}")
    out = []
    for name, x in zip(names, arrays):
        x = np.asarray(x, dtype=np.float64)
        if x.ndim == 1:
            x = x.reshape(1, -1)
        if x.ndim != 2:
            raise InputError(f"data must be a 2-D array (rows x features), got shape {x.shape}",
                             party=name)
        if x.shape[0] == 0:
            raise InputError("holds no rows (empty party)", party=name)
        out.append(x)
    dim = out[0].shape[1]
    for name, x in zip(names, out):
        if x.shape[1] != dim:
            raise InputError(
                f"d must be equal for all parties; sent d={x.shape[1]}, expected {dim} "
                f"(from party {names[0]!r})", party=name)
    return names, out


def secure_distance_matrix(parties, *, bound: float, scale_bits: int = 16, segments: int = 1,
                           noise_segments: int = 1, nonnegative: bool = False,
                           clip: str = "clip", primes=None, responders=None) -> DistanceResult:
    """Exact pairwise squared distances of all parties' rows, computed on Lagrange shares.

    Each party quantizes its rows with the public ``bound`` and ``scale_bits``, encodes them
    with ``noise_segments`` random segments (any that many parties learn nothing), and
    sends one share to every party. Each party computes the squared distances of its
    shares; the weighted sum over the responding parties is the exact squared-distance
    matrix of the quantized rows, recombined over several primes when one is not enough.

    Parameters
    ----------
    parties : dict of str to array-like, or sequence of array-like
        Each party's rows, shape (n_i, d).
    bound : float
        Public clip bound R: features are clipped to [-R, R] ([0, R] if ``nonnegative``).
    scale_bits : int
        q: features are rounded to multiples of 2^-q.
    segments, noise_segments : int
        l and t; at least 2l + 2t - 1 parties are needed.
    nonnegative, clip, primes
        See :func:`finite_field.make_plan`.
    responders : sequence of str or int, optional
        The parties whose results are combined (the set B, at least 2l + 2t - 1); all by
        default.

    Returns
    -------
    DistanceResult

    Examples
    --------
    >>> import numpy as np
    >>> import omnifc
    >>> parties = [np.array([[0.0, 0.0]]), np.array([[3.0, 4.0]]), np.array([[1.0, 1.0]])]
    >>> result = omnifc.secure_distance_matrix(parties, bound=8.0, scale_bits=8)
    >>> result.distances[0].tolist()
    [0.0, 25.0, 2.0]
    """
    names, arrays = normalize_parties(parties)
    plan = make_plan(arrays[0].shape[1], bound=bound, scale_bits=scale_bits, segments=segments,
                     noise_segments=noise_segments, parties=len(arrays),
                     nonnegative=nonnegative, clip=clip, primes=primes)
    responder_idx = _resolve_responders(responders, names)
    stats = {phase: PhaseStats() for phase in ("quantize", "shares", "evaluation", "decode")}

    start = time.perf_counter()
    quantized = [plan.quantizer.quantize(x, party=name) for name, x in zip(names, arrays)]
    clipped = {name: q.clipped for name, q in zip(names, quantized)}
    for name, count in clipped.items():
        if count:
            logger.warning("party %r: %d entries clipped to the public bound", name, count)
    stats["quantize"].seconds = time.perf_counter() - start

    start = time.perf_counter()
    outgoing = [encode_rows(plan, q.values, party=name) for name, q in zip(names, quantized)]
    m = plan.parties
    held = [[np.concatenate([outgoing[o][k][j] for o in range(m)]) for k in range(len(plan.primes))]
            for j in range(m)]
    share_elements = sum(s.size for o in range(m) for k in range(len(plan.primes))
                         for j in range(m) if j != o for s in [outgoing[o][k][j]])
    stats["shares"].seconds = time.perf_counter() - start
    stats["shares"].bytes_sent = share_elements * _ELEMENT_BYTES

    start = time.perf_counter()
    weights = [code.decoding_weights(responder_idx) for code in plan.codes]
    totals = None
    for position, j in enumerate(responder_idx):
        contribution = weight_evaluation(plan, [w[position] for w in weights],
                                         evaluate_shares(plan, held[j]))
        if totals is None:
            totals = contribution
        else:
            totals = [(a + b) % p for a, b, p in zip(totals, contribution, plan.primes)]
        stats["evaluation"].bytes_sent += sum(c.size for c in contribution) * _ELEMENT_BYTES
    stats["evaluation"].seconds = time.perf_counter() - start

    start = time.perf_counter()
    integer = decode_sum(plan, totals)
    distances = plan.quantizer.dequantize_distances(integer)
    stats["decode"].seconds = time.perf_counter() - start

    owners = np.concatenate([np.full(x.shape[0], i) for i, x in enumerate(arrays)])
    parameters = plan.describe() | {"responders": [names[j] for j in responder_idx],
                                    "party_names": names}
    logger.info("reconstructed %d x %d distances from %d parties", *integer.shape, m)
    return DistanceResult(distances=distances, integer_distances=integer, party_names=names,
                          owners=owners, parameters=parameters, stats=stats, clipped=clipped)


def _resolve_responders(responders, names: list[str]) -> list[int]:
    if responders is None:
        return list(range(len(names)))
    out = []
    for r in responders:
        if isinstance(r, (int, np.integer)) and not isinstance(r, bool):
            if not 0 <= r < len(names):
                raise ParameterError(f"responder index must be in [0, {len(names)}), got {r}")
            out.append(int(r))
        elif r in names:
            out.append(names.index(r))
        else:
            raise ParameterError(f"unknown responder {r!r}; parties are {names}")
    return sorted(out)
