"""The one mechanism every adapter shares: per-client vectors in, squared distances out.

Each client computes its paper's embedding locally (one row per client). :func:`protect`
sends those rows through :func:`omnifc.secure_distance_matrix`, with each client its own
party by default or several clients grouped into one party (an organization), and returns
the squared-distance matrix in client order. :func:`secure_group_sums` is the only other
channel: a masked sum (:func:`omnifc.secure_sum`) of the rows of each group, for what
distances cannot give (cluster totals). Both quantize with a public clip bound that each
adapter derives from its embedding's documented range, never from the data.

The plaintext references used by the tests and the examples live here too:
:func:`quantize_rows` gives the rows the protocol actually sees and
:func:`plaintext_distances` their exact squared distances, so "secure == plaintext" can be
checked bit for bit.

Examples
--------
>>> import numpy as np
>>> from omnifc.adapters import protect, plaintext_distances, quantize_rows
>>> rows = np.array([[0.0, 0.0], [0.6, 0.8], [1.0, 0.0]])
>>> out = protect(rows, bound=1.0, scale_bits=8)    # rows are rounded to multiples of 2^-8
>>> float(out.distances[0, 1])
1.0031280517578125
>>> bool(np.array_equal(out.distances, plaintext_distances(quantize_rows(rows, bound=1.0,
...                                                                        scale_bits=8))))
True
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from finite_field import InputError, ParameterError, Quantizer

from .._result import DistanceResult
from .._secure import secure_distance_matrix

__all__ = ["ProtectedDistances", "GroupSums", "protect", "secure_group_sums", "quantize_rows",
           "plaintext_distances", "client_parties"]

logger = logging.getLogger(__name__)


@dataclass
class ProtectedDistances:
    """Squared distances of the clients' protected rows, in client order.

    Attributes
    ----------
    distances : ndarray (n, n)
        Exact squared distances of the quantized rows, in real units.
    integer_distances : ndarray of int64 (n, n)
        The same, as integers (units of 4^-scale_bits).
    bound, scale_bits, nonnegative
        The public quantization parameters used.
    result : DistanceResult
        The protocol's own result (rows in party order, per-phase stats).
    """

    distances: np.ndarray
    integer_distances: np.ndarray
    bound: float
    scale_bits: int
    nonnegative: bool
    result: DistanceResult


@dataclass
class GroupSums:
    """Per-group sums of the clients' rows, learned through a masked secure sum.

    Attributes
    ----------
    totals : ndarray (n_groups, k)
        Row g is the sum of the quantized rows of the clients in group g.
    result : object
        The secure sum's own result (``SumResult``).
    """

    totals: np.ndarray
    result: object


def _as_rows(rows) -> np.ndarray:
    if isinstance(rows, (list, tuple)):
        rows = np.stack([np.asarray(r, dtype=np.float64).ravel() for r in rows])
    x = np.asarray(rows, dtype=np.float64)
    if x.ndim == 1:
        x = x.reshape(-1, 1)
    if x.ndim != 2:
        raise InputError(f"client vectors must form a 2-D array (clients x features), got "
                         f"shape {x.shape}")
    if x.shape[0] == 0:
        raise InputError("no client vectors given")
    return x


def client_parties(n_clients: int, parties=None) -> list[tuple[str, np.ndarray]]:
    """Which clients each protocol party holds, as ``[(party name, client indices)]``.

    ``parties=None``: every client is its own party ``"client-<i>"``. Otherwise a sequence
    of length ``n_clients`` giving each client's party label (an organization holding
    several clients); parties appear in order of first occurrence.
    """
    if parties is None:
        return [(f"client-{i}", np.array([i])) for i in range(n_clients)]
    labels = list(parties)
    if len(labels) != n_clients:
        raise ParameterError(f"parties must give one label per client: expected {n_clients}, "
                             f"got {len(labels)}")
    order: dict = {}
    for i, label in enumerate(labels):
        order.setdefault(label, []).append(i)
    return [(str(label), np.array(idx)) for label, idx in order.items()]


def quantize_rows(rows, *, bound: float, scale_bits: int = 16,
                  nonnegative: bool = False) -> np.ndarray:
    """The rows the protocol actually sees: ``round(2^q clip(x)) / 2^q`` (plaintext reference)."""
    quantizer = Quantizer(scale_bits=scale_bits, bound=bound, nonnegative=nonnegative)
    return quantizer.quantize(_as_rows(rows)).values / quantizer.scale


def plaintext_distances(rows) -> np.ndarray:
    """Squared distances of rows, exact when the rows are multiples of 2^-q (plaintext path).

    Computed from integers when the rows are dyadic (as :func:`quantize_rows` returns), so
    the result equals what the protocol reconstructs bit for bit.
    """
    x = _as_rows(rows)
    for bits in range(0, 31):
        scaled = x * 2.0 ** bits
        if np.all(scaled == np.round(scaled)) and np.abs(scaled).max(initial=0) < 2**40:
            largest = float(np.abs(scaled).max(initial=0))
            if 4.0 * x.shape[1] * largest**2 < 2.0**52:
                # every product and partial sum is an integer below 2^53: float64 BLAS is exact
                norms = (scaled * scaled).sum(axis=1)
                gram = scaled @ scaled.T
                return (norms[:, None] + norms[None, :] - 2.0 * gram) / 4.0**bits
            if 4.0 * x.shape[1] * largest**2 < 2.0**62:
                q = scaled.astype(np.int64)
            else:
                q = np.array([int(v) for v in scaled.ravel()], dtype=object).reshape(x.shape)
            norms = (q * q).sum(axis=1)
            integer = norms[:, None] + norms[None, :] - 2 * q.dot(q.T)
            return np.asarray(integer, dtype=np.float64) / 4.0**bits
    diff = x[:, None, :] - x[None, :, :]
    return np.einsum("ijk,ijk->ij", diff, diff)


def protect(rows, *, bound: float, scale_bits: int = 16, nonnegative: bool = False,
            parties=None, segments: int = 1, noise_segments: int = 1,
            **protocol_options) -> ProtectedDistances:
    """Reconstruct the squared distances of per-client vectors without revealing them.

    Parameters
    ----------
    rows : array-like (n_clients, k) or list of 1-D arrays
        One protected vector per client (computed on the client).
    bound : float
        Public clip bound R, chosen from the embedding's documented range (each adapter
        says how); never computed from the rows.
    scale_bits : int
        Quantization step 2^-q.
    nonnegative : bool
        Every entry is known to lie in [0, R] (losses, weights).
    parties : sequence, optional
        Party label per client (see :func:`client_parties`); one party per client by
        default. At least ``2 segments + 2 noise_segments - 1`` parties are needed.
    segments, noise_segments, **protocol_options
        Passed to :func:`omnifc.secure_distance_matrix` (e.g. ``transport``).

    Returns
    -------
    ProtectedDistances
        The coordinator's view: squared distances in client order (and the protocol result).

    Examples
    --------
    >>> import numpy as np
    >>> from omnifc.adapters import protect
    >>> protect(np.eye(3), bound=1.0).distances.tolist()
    [[0.0, 2.0, 2.0], [2.0, 0.0, 2.0], [2.0, 2.0, 0.0]]
    """
    x = _as_rows(rows)
    groups = client_parties(x.shape[0], parties)
    result = secure_distance_matrix({name: x[idx] for name, idx in groups}, bound=bound,
                                    scale_bits=scale_bits, nonnegative=nonnegative,
                                    segments=segments, noise_segments=noise_segments,
                                    **protocol_options)
    order = np.concatenate([idx for _, idx in groups])   # protocol row r holds client order[r]
    position = np.empty_like(order)
    position[order] = np.arange(order.size)
    integer = result.integer_distances[np.ix_(position, position)]
    distances = result.distances[np.ix_(position, position)]
    return ProtectedDistances(distances=distances, integer_distances=integer, bound=bound,
                              scale_bits=scale_bits, nonnegative=nonnegative, result=result)


def secure_group_sums(rows, groups, *, n_groups: int | None = None, bound: float,
                      scale_bits: int = 16, nonnegative: bool = False, parties=None,
                      **sum_options) -> GroupSums:
    """Sum the rows of each group with one masked secure sum; the coordinator learns only sums.

    Client i knows its own group ``groups[i]`` (the server tells each client its cluster).
    Every client contributes an ``(n_groups, k)`` matrix whose row ``groups[i]`` is its
    quantized vector and whose other rows are 0; a party holding several clients adds its
    clients' matrices locally first. One call to :func:`omnifc.secure_sum` over all parties
    then yields every group's total at once, so the coordinator learns the ``n_groups x k``
    totals and nothing else (a group of one client reveals that client's vector: that is
    the total itself).

    Parameters
    ----------
    rows : array-like (n_clients, k)
    groups : array-like of int (n_clients,)
        Group index in ``0..n_groups-1`` per client.
    bound, scale_bits, nonnegative
        Public clip bound of each entry of a client's vector and the quantization step.
    parties : sequence, optional
        Party label per client, as in :func:`protect`.

    Returns
    -------
    GroupSums
    """
    from .._secure_sum import secure_sum

    x = quantize_rows(rows, bound=bound, scale_bits=scale_bits, nonnegative=nonnegative)
    labels = np.asarray(groups, dtype=np.int64).ravel()
    if labels.size != x.shape[0]:
        raise ParameterError(f"groups must give one group per client: expected {x.shape[0]}, "
                             f"got {labels.size}")
    n_groups = int(labels.max()) + 1 if n_groups is None else int(n_groups)
    if labels.min() < 0 or labels.max() >= n_groups:
        raise ParameterError(f"group indices must lie in [0, {n_groups}), got "
                             f"[{labels.min()}, {labels.max()}]")
    contributions = {}
    largest = 1
    for name, idx in client_parties(x.shape[0], parties):
        matrix = np.zeros((n_groups, x.shape[1]))
        for i in idx:
            matrix[labels[i]] += x[i]   # exact: dyadic values well inside float64's range
        contributions[name] = matrix
        largest = max(largest, int(np.bincount(labels[idx], minlength=n_groups).max()))
    result = secure_sum(contributions, bound=bound * largest, scale_bits=scale_bits,
                        nonnegative=nonnegative, **sum_options)
    totals = np.asarray(result.total, dtype=np.float64).reshape(n_groups, x.shape[1])
    return GroupSums(totals=totals, result=result)
