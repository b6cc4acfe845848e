"""A finished distance result and its float view: :class:`DistanceStore`, :class:`TiledDistances`.

The read side of :mod:`protocols._accumulator` (issue 20 moved it here unchanged): a store
in RAM, in a ``.npy`` memory map or in a Zarr v3 store (opening, copying a matrix in,
``to_dask``, deleting it with :func:`discard_store`), and the dequantized view D / 4^q
that streamed algorithms read tile by tile. :mod:`protocols._accumulator` re-exports
every name.

>>> import numpy as np
>>> store = DistanceStore.from_integer(np.array([[0, 4], [4, 0]]), scale_bits=1)
>>> store.distances[0].tolist()
[0.0, 1.0]
"""

from __future__ import annotations

import json
import logging
import weakref
from pathlib import Path

import numpy as np

from finite_field import InputError, ParameterError

from ._result_storage import (_FORMAT, IncompleteResultError, _allocate, _check_budget,
                              _check_tile_bytes, _remove, _rows_per_tile, _sidecar,
                              storage_dtype)
from ._zarr_store import (_DASK_EXTRA, _ZARR_ATTRIBUTE, ZARR_COMPONENT, ZarrMatrix,
                          _import_zarr, _is_zarr_path, _write_zarr)

__all__ = ["DistanceStore", "TiledDistances", "discard_store"]

logger = logging.getLogger(__name__)

class DistanceStore:
    """A finished exact integer distance matrix, in RAM or memory-mapped, plus its scale.

    Usually made by :meth:`DistanceAccumulator.finalize`, :func:`plaintext_distance_store`
    or :meth:`open`.

    Attributes
    ----------
    integer : ndarray, numpy.memmap or :class:`ZarrMatrix` of int32 or int64, shape (n, n)
        The exact integer squared distances (symmetric, zero diagonal).
    scale_bits : int
        q: ``distances = integer / 4^q``.
    path : pathlib.Path or None
        The ``.npy`` file or the ``.zarr`` store when on disk.
    memory_budget, tile_bytes : int
        Used by the streamed algorithms to decide dense vs streamed and tile sizes.
    """

    def __init__(self, integer, *, scale_bits: int, path=None, memory_budget=None,
                 tile_bytes=None, parameters=None, _cleanup=None):
        self.integer = integer
        self.scale_bits = int(scale_bits)
        self.path = None if path is None else Path(path)
        self.memory_budget = _check_budget(memory_budget)
        self.tile_bytes = _check_tile_bytes(tile_bytes)
        self.parameters = dict(parameters or {})
        self._cleanup = _cleanup  # removes a temporary directory when the store goes away

    @property
    def n(self) -> int:
        return int(self.integer.shape[0])

    @property
    def shape(self) -> tuple:
        return tuple(self.integer.shape)

    @property
    def on_disk(self) -> bool:
        return isinstance(self.integer, (np.memmap, ZarrMatrix))

    @property
    def format(self) -> str:
        """Where the matrix lives: ``"zarr"`` (a Zarr v3 store), ``"npy"`` (a memory-mapped
        ``.npy`` file) or ``"memory"``."""
        if isinstance(self.integer, ZarrMatrix):
            return "zarr"
        return "npy" if isinstance(self.integer, np.memmap) else "memory"

    def to_dask(self, chunk_rows: int | None = None):
        """The integer matrix as a lazy ``dask.array.Array`` (needs ``omnifc[dask]``).

        A Zarr store is read by ``dask.array.from_zarr(path, component="integer")`` (its
        chunks: row blocks); a ``.npy`` file by row blocks of a read-only memory map opened
        where the block is computed (so a distributed worker reads the file itself: it
        must see the same path); a matrix in RAM by ``dask.array.from_array``. Multiply by
        :attr:`factor` for D / 4^q.

        >>> import numpy as np
        >>> store = DistanceStore.from_integer(np.array([[0, 4], [4, 0]]), scale_bits=1)
        >>> int(store.to_dask().sum().compute())
        8
        """
        try:
            import dask.array as da
        except ImportError:
            raise ParameterError(f"a Dask array of the result needs dask: {_DASK_EXTRA}") \
                from None
        if self.format == "zarr":
            array = da.from_zarr(str(self.path), component=ZARR_COMPONENT)
            if chunk_rows is not None:
                array = array.rechunk((int(chunk_rows), self.n))
            return array
        rows = self.rows_per_tile(self.integer.dtype.itemsize) if chunk_rows is None \
            else int(chunk_rows)
        if self.format == "npy":
            from dask.base import tokenize

            source = _NpyRows(self.path, self.shape, self.integer.dtype)
            stat = self.path.stat()  # the keys name this file as it is now
            name = "omnifc-npy-" + tokenize(str(self.path.resolve()), stat.st_mtime_ns,
                                            stat.st_size, rows)
            return da.from_array(source, chunks=(rows, self.n), asarray=True, name=name,
                                 meta=np.empty((0, 0), dtype=self.integer.dtype))
        return da.from_array(self.integer, chunks=(rows, self.n))

    @property
    def nbytes(self) -> int:
        return int(self.integer.nbytes)

    @property
    def factor(self) -> float:
        """1 / 4^q, exact in float64."""
        return 1.0 / float(4 ** self.scale_bits)

    @property
    def distances(self) -> "TiledDistances":
        """The dequantized float view (lazy)."""
        return TiledDistances(self)

    @classmethod
    def open(cls, path, *, memory_budget=None, tile_bytes=None) -> "DistanceStore":
        """Open a finished result: a ``.npy`` file (read-only memory map; its JSON sidecar
        ``<path>.json`` must exist) or a Zarr v3 store (a ``.zarr`` directory; its root
        group's ``omnifc`` metadata must say ``"complete": true``).

        Raises :class:`IncompleteResultError` for a result whose metadata is missing or
        not complete (a failed or unfinished session), :class:`InputError` for anything
        else that is not an omnifc result.

        >>> import numpy as np, tempfile, pathlib
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "D.npy"
        >>> _ = DistanceStore.from_integer(np.array([[0, 4], [4, 0]]), scale_bits=1, out=path)
        >>> DistanceStore.open(path).distances[0, 1]
        np.float64(1.0)
        """
        path = Path(path)
        if _is_zarr_path(path) or (path / "zarr.json").is_file():
            return cls._open_zarr(path, memory_budget=memory_budget, tile_bytes=tile_bytes)
        side = _sidecar(path)
        if not side.is_file():
            raise IncompleteResultError(
                f"{path} is not a finished omnifc distance file: its sidecar {side.name} is "
                "missing (written only when the result is complete)")
        meta = json.loads(side.read_text())
        if meta.get("complete", True) is not True:
            raise IncompleteResultError(f"{path} is not complete (its sidecar says so)")
        if meta.get("format") != _FORMAT:
            raise InputError(f"{side} has format {meta.get('format')!r}, expected {_FORMAT!r}")
        integer = np.load(path, mmap_mode="r")
        if integer.shape != (meta["n"], meta["n"]) or str(integer.dtype) != meta["dtype"]:
            raise InputError(f"{path} holds {integer.dtype} {integer.shape}, the sidecar says "
                             f"{meta['dtype']} ({meta['n']}, {meta['n']})")
        return cls(integer, scale_bits=meta["scale_bits"], path=path,
                   memory_budget=memory_budget, tile_bytes=tile_bytes,
                   parameters=meta.get("parameters", {}))

    @classmethod
    def _open_zarr(cls, path: Path, *, memory_budget=None, tile_bytes=None):
        zarr = _import_zarr()
        if not (path / "zarr.json").is_file():
            raise IncompleteResultError(f"{path} is not a finished omnifc Zarr store: it has "
                                        "no root zarr.json")
        try:
            group = zarr.open_group(str(path), mode="r")
            meta = group.attrs.get(_ZARR_ATTRIBUTE)
        except Exception as error:  # a truncated or foreign zarr.json
            raise IncompleteResultError(f"{path} is not a readable Zarr v3 group: "
                                        f"{error}") from None
        if not isinstance(meta, dict) or meta.get("format") != _FORMAT:
            raise IncompleteResultError(
                f"{path} is not a finished omnifc Zarr store: the root group has no "
                f"{_ZARR_ATTRIBUTE!r} metadata of format {_FORMAT!r} (written last, when "
                "the result is complete)")
        if meta.get("complete") is not True:
            raise IncompleteResultError(
                f"{path} is not complete: its {_ZARR_ATTRIBUTE!r} metadata says "
                f"complete={meta.get('complete')!r} (a failed or unfinished session)")
        missing = [key for key in ("n", "dtype", "scale_bits", "primes") if key not in meta]
        if missing:
            raise IncompleteResultError(f"{path}: its {_ZARR_ATTRIBUTE!r} metadata lacks "
                                        f"{missing}")
        try:
            array = group[ZARR_COMPONENT]
        except KeyError:
            raise IncompleteResultError(f"{path} has no array {ZARR_COMPONENT!r}") from None
        n = meta["n"]
        if tuple(array.shape) != (n, n) or str(np.dtype(array.dtype)) != meta["dtype"]:
            raise InputError(f"{path} holds {array.dtype} {tuple(array.shape)}, its metadata "
                             f"says {meta['dtype']} ({n}, {n})")
        return cls(ZarrMatrix(array), scale_bits=meta["scale_bits"], path=path,
                   memory_budget=memory_budget, tile_bytes=tile_bytes,
                   parameters=meta.get("parameters", {}))

    @classmethod
    def from_integer(cls, matrix, *, scale_bits: int, distance_bound: int | None = None,
                     out=None, memory_budget=None, tile_bytes=None,
                     parameters=None) -> "DistanceStore":
        """Copy an exact integer distance matrix (e.g. a coordinator's in-memory result)
        into a store, row block by row block (int32 when ``distance_bound`` < 2^31).

        >>> import numpy as np
        >>> store = DistanceStore.from_integer(np.array([[0, 4], [4, 0]]), scale_bits=1,
        ...                                    distance_bound=8)
        >>> store.integer.dtype.name, store.distances[0, 1]
        ('int32', np.float64(1.0))
        """
        matrix = np.asarray(matrix)
        if matrix.ndim != 2 or matrix.shape[0] != matrix.shape[1] or matrix.shape[0] < 1 \
                or not np.issubdtype(matrix.dtype, np.integer):
            raise InputError(f"an integer square matrix is needed, got {matrix.dtype} "
                             f"{matrix.shape}")
        n = matrix.shape[0]
        dtype = storage_dtype(distance_bound, 1)
        budget = _check_budget(memory_budget)
        if out is not None and (Path(out).exists() or _sidecar(Path(out)).exists()):
            raise ParameterError(f"out={str(out)!r} exists already; choose a new path")
        if _is_zarr_path(out):  # checked, then written row block by row block
            if distance_bound is not None and matrix.size and (
                    matrix.min() < 0 or matrix.max() > distance_bound):
                raise InputError(f"distances must lie in [0, {distance_bound}]")
            meta = {"n": n, "dtype": str(dtype), "scale_bits": int(scale_bits), "primes": [],
                    "distance_bound": distance_bound, "parameters": dict(parameters or {})}
            tile_bytes = _check_tile_bytes(tile_bytes)
            _write_zarr(Path(out), matrix, dtype, meta, tile_bytes)
            return cls.open(out, memory_budget=budget, tile_bytes=tile_bytes)
        array, path, tmpdir = _allocate((n, n), dtype, path=None if out is None else Path(out),
                                        budget=budget, name="distances")
        tile_bytes = _check_tile_bytes(tile_bytes)
        rows = _rows_per_tile(n, n * 8, tile_bytes)
        for a in range(0, n, rows):
            block = matrix[a:a + rows]
            if distance_bound is not None and block.size and (
                    block.min() < 0 or block.max() > distance_bound):
                _remove(tmpdir if tmpdir is not None else path)
                raise InputError(f"distances must lie in [0, {distance_bound}]")
            array[a:a + rows] = block
        if isinstance(array, np.memmap):
            array.flush()
        if out is not None:
            _sidecar(Path(out)).write_text(json.dumps({
                "format": _FORMAT, "n": n, "dtype": str(dtype), "scale_bits": int(scale_bits),
                "primes": [], "distance_bound": distance_bound,
                "parameters": dict(parameters or {})}, default=str))
        store = cls(array, scale_bits=scale_bits, path=path, memory_budget=budget,
                    tile_bytes=tile_bytes, parameters=parameters)
        if tmpdir is not None:
            store._cleanup = weakref.finalize(store, _remove, tmpdir)
        return store

    def rows_per_tile(self, bytes_per_entry: int = 16) -> int:
        """Rows of one working tile: ``tile_bytes`` over n entries of ``bytes_per_entry``
        (integer block plus its float copy by default); a multiple of a Zarr store's chunk
        rows when at least one chunk fits (each chunk is then read once per pass)."""
        rows = _rows_per_tile(self.n, self.n * bytes_per_entry, self.tile_bytes)
        if isinstance(self.integer, ZarrMatrix) and rows >= self.integer.chunk_rows:
            rows -= rows % self.integer.chunk_rows
        return rows

    def __repr__(self) -> str:
        where = f"on disk at {self.path}" if self.on_disk else "in memory"
        return (f"DistanceStore(n={self.n}, dtype={self.integer.dtype}, scale_bits="
                f"{self.scale_bits}, {where})")


class _NpyRows:
    """Row blocks of a ``.npy`` result, memory-mapped read-only where they are read (a
    Dask task on a worker opens the file itself; pickling this object sends only the
    path)."""

    def __init__(self, path, shape, dtype) -> None:
        self.path, self.shape, self.dtype = str(path), tuple(shape), np.dtype(dtype)
        self.ndim = len(self.shape)

    def __getitem__(self, key):
        return np.asarray(np.load(self.path, mmap_mode="r")[key])


def discard_store(store: "DistanceStore | None") -> None:
    """Delete a finished store's files (its ``.npy``, sidecar, temporary directory).

    Fail closed: a session that fails after :meth:`DistanceAccumulator.finalize` (e.g. in
    its clustering callback) must not leave a result behind.
    """
    if store is None:
        return
    cleanup = store._cleanup
    if cleanup is not None:
        cleanup()
    if store.path is not None:
        _remove(store.path, _sidecar(store.path))
    store.integer = None


class TiledDistances:
    """The float squared distances D / 4^q of a :class:`DistanceStore`, computed on access.

    Supports ``shape``, ``len``, indexing (``view[i]``, ``view[a:b]``, ``view[i, j]``, any
    numpy index of the integer matrix, returned as float64), :meth:`rows`,
    :meth:`take_rows` and :meth:`tiles` for streamed passes. ``np.asarray(view)``
    materializes the whole n x n float64 matrix: the one operation that makes a copy of
    that size (it logs a warning when the store is on disk).
    """

    ndim = 2
    dtype = np.dtype(np.float64)

    def __init__(self, store: DistanceStore):
        self.store = store

    @property
    def shape(self) -> tuple:
        return self.store.shape

    @property
    def n(self) -> int:
        return self.store.n

    @property
    def size(self) -> int:
        return self.n * self.n

    def __len__(self) -> int:
        return self.n

    def _scale(self, integer):
        return np.multiply(np.asarray(integer), self.store.factor, dtype=np.float64)

    def __getitem__(self, key):
        return self._scale(self.store.integer[key])

    def rows(self, start: int, stop: int) -> np.ndarray:
        """Rows [start, stop) against all columns, float64."""
        return self._scale(self.store.integer[start:stop])

    def take_rows(self, indices) -> np.ndarray:
        """The rows ``indices`` (any order, repeats allowed), float64 (len, n)."""
        indices = np.asarray(indices, dtype=np.int64)
        return self._scale(self.store.integer[indices])

    def tiles(self, rows_per_tile: int | None = None, *, integer: bool = False):
        """Yield ``(start, stop, block)`` over consecutive row blocks (float, or the raw
        integer block with ``integer=True``)."""
        rows = self.store.rows_per_tile() if rows_per_tile is None else int(rows_per_tile)
        for a in range(0, self.n, rows):
            b = min(self.n, a + rows)
            block = self.store.integer[a:b]
            yield a, b, (np.asarray(block) if integer else self._scale(block))

    def fits_in_memory(self, copies: int = 4) -> bool:
        """Whether ``copies`` dense float64 n x n arrays fit the store's memory budget."""
        return copies * 8 * self.n * self.n <= self.store.memory_budget

    def __array__(self, dtype=None, copy=None):
        if self.store.on_disk:
            logger.warning("materializing the on-disk %d x %d distance matrix in memory "
                           "(%.2f GB)", self.n, self.n, 8 * self.size / 1e9)
        out = self._scale(self.store.integer)
        return out if dtype is None else out.astype(dtype, copy=False)

    def __repr__(self) -> str:
        return f"TiledDistances({self.store!r})"
