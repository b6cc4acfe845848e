"""The distance result out of core (public names of :mod:`omnifc`).

The implementation lives one layer down, in :mod:`protocols._accumulator` (the store,
the Zarr store and the storage helpers in modules beside it), because the
coordinator accumulates every evaluation tile straight into it (one implementation, used
by the protocol and by this package). This module re-exports it and adds
:func:`as_tiled` and :func:`plaintext_distance_store`.

:class:`DistanceAccumulator` keeps **one preallocated integer matrix**: in RAM below
``memory_budget`` bytes, else (or whenever ``out=`` names a file) a memory-mapped
``.npy`` file that numpy and Dask read directly, with a JSON sidecar written only when
the matrix is complete. :class:`TiledDistances` is the lazy float view D / 4^q.

Examples
--------
The same classes (a worked example is in :mod:`protocols._accumulator`):

>>> import omnifc, protocols
>>> omnifc.DistanceAccumulator is protocols.DistanceAccumulator
True
"""

from __future__ import annotations

import numpy as np

from finite_field import InputError
from protocols import (DEFAULT_MEMORY_BUDGET, DEFAULT_TILE_BYTES,
                       DistanceAccumulator, DistanceStore, IncompleteResultError,
                       TiledDistances,
                       rows_per_tile as _rows_per_tile, storage_dtype)

__all__ = ["DistanceAccumulator", "DistanceStore", "TiledDistances", "plaintext_distance_store",
           "DEFAULT_MEMORY_BUDGET", "DEFAULT_TILE_BYTES", "as_tiled", "storage_dtype",
           "IncompleteResultError"]


def as_tiled(distances) -> TiledDistances | None:
    """The :class:`TiledDistances` behind ``distances`` (a view, a store, or a
    :class:`~omnifc.DistanceResult` holding one), else None."""
    if isinstance(distances, TiledDistances):
        return distances
    if isinstance(distances, DistanceStore):
        return distances.distances
    inner = getattr(distances, "distances", None)
    if inner is not None and inner is not distances and not callable(inner):
        return as_tiled(inner)
    return None


def plaintext_distance_store(rows, *, scale_bits: int, distance_bound: int | None = None,
                             primes=None, out=None, memory_budget=None,
                             tile_bytes=None) -> DistanceStore:
    """Exact squared distances of integer (quantized) rows, built tile by tile on disk or in RAM.

    The plaintext counterpart of a secure session, for benchmarks and tests: every row
    block ``[a, b) x [a, n)`` is computed modulo each prime with the exact kernels of
    :mod:`finite_field` and added to a :class:`DistanceAccumulator`, which then finalizes.
    Memory: O(tile x n) besides the result.

    Parameters
    ----------
    rows : ndarray of int, shape (n, d)
        Quantized rows (signed integers).
    scale_bits : int
        q of the quantization, for the float view.
    distance_bound : int, optional
        Largest possible distance; by default d * (2 max|x|)^2, which is at least the true
        maximum.
    primes : sequence of int, optional
        Moduli; by default as few fast primes as make the result exact.
    out, memory_budget, tile_bytes
        As for :class:`DistanceAccumulator`.

    Examples
    --------
    >>> import numpy as np
    >>> store = plaintext_distance_store(np.array([[0, 0], [3, 4], [1, 1]]), scale_bits=0)
    >>> store.integer.tolist()
    [[0, 25, 2], [25, 0, 13], [2, 13, 0]]
    """
    from finite_field import DistanceTiles, choose_primes

    rows = np.asarray(rows)
    if rows.ndim != 2 or rows.shape[0] < 1 or not np.issubdtype(rows.dtype, np.integer):
        raise InputError(f"rows must be a non-empty 2-D integer array, got {rows.dtype} "
                         f"{rows.shape}")
    rows = rows.astype(np.int64)
    n, dim = rows.shape
    if distance_bound is None:
        span = 2 * int(np.abs(rows).max()) if rows.size else 0
        distance_bound = max(1, dim * span * span)
    if primes is None:
        primes = choose_primes(distance_bound + 1)
    acc = DistanceAccumulator(n, primes, scale_bits=scale_bits, distance_bound=distance_bound,
                              out=out, memory_budget=memory_budget, tile_bytes=tile_bytes)
    tile_rows = _rows_per_tile(n, n * 24, acc.tile_bytes)
    for k, p in enumerate(acc.primes):
        tiles = DistanceTiles(rows % p, p)
        for a, b, tile in tiles.blocks(tile_rows, upper=True):
            acc.add_tile(k, a, b, tile)
        del tiles
    return acc.finalize()
