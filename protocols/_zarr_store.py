"""The Zarr v3 result store: its layout, writing it, and the read-only matrix view.

A result written to a path ending in ``.zarr`` is a Zarr v3 group whose array
``integer`` (:data:`ZARR_COMPONENT`) holds the n x n matrix in row-block chunks; the
group's ``omnifc`` attribute holds the metadata, written last with ``"complete": true``
(:func:`_complete_zarr`), so a failed or unfinished session never looks finished.
Opening one is :meth:`DistanceStore.open <protocols._distance_store.DistanceStore.open>`.
Moved here unchanged from :mod:`protocols._accumulator` (issue 20), which re-exports
every name.

>>> _is_zarr_path("D.zarr"), _is_zarr_path("D.npy")
(True, False)
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import numpy as np

from finite_field import ParameterError

from ._result_storage import _FORMAT, _remove, _rows_per_tile

__all__ = ["ZarrMatrix", "ZARR_COMPONENT", "require_zarr"]

logger = logging.getLogger(__name__)

#: The array of a Zarr result store: ``dask.array.from_zarr(path, component=ZARR_COMPONENT)``.
ZARR_COMPONENT = "integer"
_ZARR_ATTRIBUTE = "omnifc"  # the root group's attribute holding the metadata
_DASK_EXTRA = "pip install 'omnifc[dask]'"


def _is_zarr_path(path) -> bool:
    return path is not None and Path(path).suffix == ".zarr"


def require_zarr():
    """The ``zarr`` module, or :class:`ParameterError` saying how to install it (before a
    session whose result is to be a Zarr store starts, not after).

    >>> require_zarr().__name__
    'zarr'
    """
    try:
        import zarr
    except ImportError:
        raise ParameterError(f"a Zarr result (a path ending in .zarr) needs the zarr package: "
                             f"{_DASK_EXTRA}") from None
    return zarr


_import_zarr = require_zarr


class ZarrMatrix:
    """A read-only, numpy-like view of the 2-D Zarr array of a result store.

    Indexing returns numpy arrays: ``m[i]``, ``m[a:b]``, ``m[i, j]``, ``m[rows]`` (an
    integer array: any order, repeats allowed), ``m[np.ix_(rows, cols)]``;
    ``np.asarray(m)`` reads everything. ``array`` is the ``zarr.Array`` itself.
    """

    def __init__(self, array) -> None:
        self.array = array
        self._cached = None  # (first row, rows) of the last chunk read by a row slice
        self._lock = threading.Lock()

    shape = property(lambda self: tuple(self.array.shape))
    dtype = property(lambda self: np.dtype(self.array.dtype))
    ndim = property(lambda self: len(self.array.shape))
    size = property(lambda self: int(np.prod(self.array.shape)))
    nbytes = property(lambda self: self.size * self.dtype.itemsize)
    chunk_rows = property(lambda self: int(self.array.chunks[0]))

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, key):
        if isinstance(key, tuple) and any(isinstance(k, (np.ndarray, list)) for k in key):
            key = tuple(np.asarray(k).ravel() if isinstance(k, (np.ndarray, list)) else k
                        for k in key)  # np.ix_ and plain index arrays: orthogonal
            return np.asarray(self.array.oindex[key])
        if isinstance(key, (np.ndarray, list)):
            return np.asarray(self.array.oindex[np.asarray(key, dtype=np.int64), :])
        if isinstance(key, slice) and key.step in (None, 1):
            return self._rows(*key.indices(self.shape[0])[:2])
        return np.asarray(self.array[key])

    def _rows(self, start: int, stop: int) -> np.ndarray:
        """Rows [start, stop), whole chunks read and the last one kept: consecutive row
        blocks that do not line up with the chunks decompress each chunk once."""
        size = self.chunk_rows
        if stop <= start:
            return np.asarray(self.array[start:stop])
        parts = []
        with self._lock:
            for first in range(start - start % size, stop, size):
                if self._cached is None or self._cached[0] != first:
                    self._cached = (first, np.asarray(self.array[first:first + size]))
                rows = self._cached[1]
                parts.append(rows[max(start, first) - first:min(stop, first + size) - first])
        return parts[0].copy() if len(parts) == 1 else np.concatenate(parts)

    def __array__(self, dtype=None, copy=None):
        out = np.asarray(self.array[...])
        return out if dtype is None else out.astype(dtype, copy=False)

    def tolist(self) -> list:
        return np.asarray(self).tolist()

    def __repr__(self) -> str:
        return f"ZarrMatrix({self.dtype} {self.shape}, chunks {tuple(self.array.chunks)})"


def _zarr_chunk_rows(n: int, dtype, tile_bytes: int) -> int:
    """Rows of a chunk: those of a streamed pass's default tile (16 bytes per entry: the
    integer block and its float copy, :meth:`DistanceStore.rows_per_tile`), so that a
    pass decompresses each chunk once."""
    return _rows_per_tile(n, n * 16, tile_bytes)


def _create_zarr(path: Path, n: int, dtype, tile_bytes: int):
    """A new Zarr v3 store at ``path``: a root group whose metadata says
    ``"complete": false`` and an empty (n, n) array chunked by row blocks."""
    zarr = _import_zarr()
    group = zarr.create_group(store=str(path), zarr_format=3, attributes={
        _ZARR_ATTRIBUTE: {"format": _FORMAT, "complete": False}})
    rows = _zarr_chunk_rows(n, dtype, tile_bytes)
    array = group.create_array(ZARR_COMPONENT, shape=(n, n), chunks=(rows, n), dtype=dtype,
                               fill_value=0)
    logger.info("distances: a Zarr v3 store at %s (%.2f GB of %s, chunks of %d rows)", path,
                n * n * np.dtype(dtype).itemsize / 1e9, np.dtype(dtype), rows)
    return group, array


def _fill_zarr(array, source) -> None:
    """Copy ``source`` (n x n) into the Zarr array, whole chunks at a time."""
    n, rows = array.shape[0], int(array.chunks[0])
    for a in range(0, n, rows):
        array[a:a + rows] = np.asarray(source[a:a + rows], dtype=array.dtype)


def _complete_zarr(group, meta: dict) -> None:
    """Write the store's metadata, ``"complete": true``: the last write of a result."""
    group.attrs.update({_ZARR_ATTRIBUTE: {
        "format": _FORMAT, **meta, "scale_factor": 1.0 / float(4 ** int(meta["scale_bits"])),
        "component": ZARR_COMPONENT, "complete": True}})


def _write_zarr(path: Path, source, dtype, meta: dict, tile_bytes: int) -> None:
    """A whole finished result as a Zarr store (deleted again if anything fails)."""
    try:
        group, array = _create_zarr(path, source.shape[0], dtype, tile_bytes)
        _fill_zarr(array, source)
        _complete_zarr(group, meta)
    except BaseException:
        _remove(path)
        raise
