"""The distance result out of core: one integer matrix, in RAM or memory-mapped on disk.

This module sits in the protocol layer because the coordinator accumulates every
evaluation tile into it as the tile arrives (issue 11); :mod:`omnifc` re-exports the
public names (``omnifc.DistanceAccumulator``, ``omnifc.DistanceStore``,
``omnifc.TiledDistances``): one implementation.

An n x n result at n = 70,000 is 19.6 GB as int32 and 39.2 GB as int64: it cannot be held
twice (integer and float), and above a memory budget not even once. This module keeps it
as **one preallocated integer matrix**:

- below ``memory_budget`` bytes it is a numpy array in RAM;
- above it (or whenever ``out=`` names a file) it is a memory-mapped ``.npy`` file, which
  numpy (``np.load(path, mmap_mode="r")``) and Dask (``dask.array.from_array``) read
  directly. A JSON sidecar ``<out>.json`` records the scale and primes and is written
  only when the matrix is complete, so a half-written file is never taken for a result;
- with ``out`` ending in ``.zarr`` it is a **Zarr v3 store** instead (zarr 3.x, the
  ``omnifc[dask]`` extra): one int32/int64 array ``integer`` chunked by row blocks, whose
  metadata (the root group's attribute ``omnifc``, ``"complete": true``) is written last,
  so that ``dask.array.from_zarr(path, component="integer")`` reads the finished result
  and :meth:`DistanceStore.open` refuses a half-written store
  (:class:`IncompleteResultError`).

The storage type is int32 when one prime is used and every distance fits (the usual
case: d = 784, q = 8, R = 1 gives at most 5.1e7), int64 otherwise.

:class:`DistanceAccumulator` is the tile writer the coordinator accumulates uploads into:
``add_tile(prime_index, a, b, values)`` adds a row block ``[a, b) x [a, n)`` modulo the
prime (reduced on every add, so any number of uploads fit);
:meth:`~DistanceAccumulator.finalize` then checks that every row received the same number
of contributions and decodes tile by tile with :func:`finite_field.decode_upper`: combines
the primes by CRT (extra primes live in uint32 scratch matrices that follow the same
budget and are deleted afterwards), checks the no-wrap bound, mirrors the upper
triangle, zeroes the diagonal, and returns a :class:`DistanceStore`
in the same memory (no second n x n array).

:class:`TiledDistances` is the float view D / 4^q: dequantized on the fly, one row block
at a time, never as a second n x n array (unless the caller asks for one with
``np.asarray``). ``omnifc.cluster`` and the estimators accept it (or the store, or a
``omnifc.DistanceResult`` holding one) and switch to streamed algorithms when the
dense ones would not fit the memory budget.

Examples
--------
>>> import numpy as np
>>> from protocols._accumulator import DistanceAccumulator
>>> d = np.array([[0, 5, 9], [5, 0, 4], [9, 4, 0]])      # exact integer distances
>>> acc = DistanceAccumulator(3, primes=[7, 11], scale_bits=1)
>>> for k, p in enumerate((7, 11)):
...     acc.add_tile(k, 0, 2, d[0:2, 0:] % p)              # rows [0, 2) x columns [0, 3)
...     acc.add_tile(k, 2, 3, d[2:3, 2:] % p)
>>> store = acc.finalize()
>>> store.integer.tolist()
[[0, 5, 9], [5, 0, 4], [9, 4, 0]]
>>> store.distances[0].tolist()                           # D / 4^q, computed on access
[0.0, 1.25, 2.25]
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import tempfile
import threading
import weakref
from pathlib import Path

import numpy as np

from finite_field import (InputError, ParameterError, ProtocolError,
                          WrapAroundError, add_reduced, decode_upper)

__all__ = ["DistanceAccumulator", "DistanceStore", "TiledDistances", "DEFAULT_MEMORY_BUDGET",
           "DEFAULT_TILE_BYTES", "storage_dtype", "discard_store", "IncompleteResultError",
           "ZarrMatrix", "ZARR_COMPONENT"]

logger = logging.getLogger(__name__)

#: Bytes of n x n data kept in RAM before the result moves to a memory-mapped file (2 GiB).
DEFAULT_MEMORY_BUDGET = 2 * 2**30
#: Bytes of one working tile (row block) in streamed passes (64 MiB).
DEFAULT_TILE_BYTES = 64 * 2**20
_FORMAT = "omnifc-distances/1"
#: The array of a Zarr result store: ``dask.array.from_zarr(path, component=ZARR_COMPONENT)``.
ZARR_COMPONENT = "integer"
_ZARR_ATTRIBUTE = "omnifc"  # the root group's attribute holding the metadata
_DASK_EXTRA = "pip install 'omnifc[dask]'"


class IncompleteResultError(InputError):
    """A result file or store that is not a finished omnifc result (no metadata, or its
    metadata says ``"complete": false``): a session that failed or is still writing."""


def _is_zarr_path(path) -> bool:
    return path is not None and Path(path).suffix == ".zarr"


def _import_zarr():
    try:
        import zarr
    except ImportError:
        raise ParameterError(f"a Zarr result (a path ending in .zarr) needs the zarr package: "
                             f"{_DASK_EXTRA}") from None
    return zarr


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


# -- storage helpers ------------------------------------------------------------------
def _check_budget(memory_budget) -> int:
    if memory_budget is None:
        return DEFAULT_MEMORY_BUDGET
    if isinstance(memory_budget, bool) or not isinstance(memory_budget, (int, np.integer)) \
            or memory_budget < 0:
        raise ParameterError(f"memory_budget must be a non-negative number of bytes, got "
                             f"{memory_budget!r}")
    return int(memory_budget)


def _check_tile_bytes(tile_bytes) -> int:
    if tile_bytes is None:
        return DEFAULT_TILE_BYTES
    if isinstance(tile_bytes, bool) or not isinstance(tile_bytes, (int, np.integer)) \
            or tile_bytes < 1:
        raise ParameterError(f"tile_bytes must be a positive number of bytes, got "
                             f"{tile_bytes!r}")
    return int(tile_bytes)


def _rows_per_tile(n: int, bytes_per_row: int, tile_bytes: int) -> int:
    return max(1, min(n, tile_bytes // max(1, bytes_per_row)))


rows_per_tile = _rows_per_tile  # public for omnifc (protocols.rows_per_tile)


def storage_dtype(distance_bound: int | None, n_primes: int) -> np.dtype:
    """int32 when one prime is used and every distance fits below 2^31, else int64."""
    if n_primes == 1 and distance_bound is not None and distance_bound < 2**31:
        return np.dtype(np.int32)
    return np.dtype(np.int64)


def _sidecar(path: Path) -> Path:
    return path.with_name(path.name + ".json")


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


def _allocate(shape, dtype, *, path: Path | None, budget: int, name: str, directory=None):
    """An array in RAM if it fits ``budget`` and no path is given, else a .npy memmap
    (at ``path``, or in a new temporary directory inside ``directory``, by default the
    system's).

    Returns (array, path or None, temporary directory or None).
    """
    nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
    if path is None and nbytes <= budget:
        return np.zeros(shape, dtype=dtype), None, None
    tmpdir = None
    if path is None:
        tmpdir = tempfile.mkdtemp(prefix="omnifc-distances-",
                                  dir=None if directory is None else str(directory))
        path = Path(tmpdir) / f"{name}.npy"
    array = np.lib.format.open_memmap(path, mode="w+", dtype=dtype, shape=shape)
    logger.info("%s: %.2f GB memory-mapped at %s", name, nbytes / 1e9, path)
    return array, path, tmpdir


def _reopen(shape, dtype, *, path: Path, budget: int, name: str, directory=None):
    """The existing .npy memmap at ``path`` (of ``shape`` and ``dtype``), for writing."""
    try:
        array = np.lib.format.open_memmap(path, mode="r+")
    except (OSError, ValueError) as error:
        raise ParameterError(f"cannot reopen the result {name} at {str(path)!r}: "
                             f"{error}") from None
    if array.shape != tuple(shape) or array.dtype != np.dtype(dtype):
        raise ParameterError(f"the result {name} at {str(path)!r} is {array.shape} "
                             f"{array.dtype}, expected {tuple(shape)} {np.dtype(dtype)}")
    return array, Path(path), None


def _remove(*paths) -> None:
    for p in paths:
        if p is None:
            continue
        p = Path(p)
        if p.is_dir():
            shutil.rmtree(p, ignore_errors=True)
        else:
            try:
                p.unlink()
            except FileNotFoundError:
                pass


class _NpyRows:
    """Row blocks of a ``.npy`` result, memory-mapped read-only where they are read (a
    Dask task on a worker opens the file itself; pickling this object sends only the
    path)."""

    def __init__(self, path, shape, dtype) -> None:
        self.path, self.shape, self.dtype = str(path), tuple(shape), np.dtype(dtype)
        self.ndim = len(self.shape)

    def __getitem__(self, key):
        return np.asarray(np.load(self.path, mmap_mode="r")[key])


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


class DistanceAccumulator:
    """Accumulate row-block uploads mod p into one preallocated result; finalize tile-wise.

    Parameters
    ----------
    n : int
        Number of rows (the result is n x n).
    primes : sequence of int
        The primes of the residue number system (each < 2^31).
    scale_bits : int
        q, for the float view D / 4^q.
    distance_bound : int, optional
        The largest possible distance (``CodingPlan.distance_bound``): chooses int32
        storage when it fits and is checked at :meth:`finalize` (a larger value means a
        corrupted contribution). Without it the storage is int64 and nothing is checked.
    out : str or path, optional
        Put the result in this ``.npy`` file (memory-mapped), whatever its size; or, when
        the path ends in ``.zarr``, in a new Zarr v3 store there (needs ``omnifc[dask]``):
        the tiles are accumulated and decoded in a working matrix as without ``out`` (in
        RAM within ``memory_budget``, else memory-mapped in a temporary directory beside
        the store), then :meth:`finalize` copies it into the store row block by row block,
        deletes it, and writes the store's metadata last. Must not exist.
    memory_budget : int, optional
        Bytes of n x n data to keep in RAM (default :data:`DEFAULT_MEMORY_BUDGET`); above
        it, and without ``out``, the result goes to a memory-mapped file in a temporary
        directory removed with the store.
    tile_bytes : int, optional
        Working tile size of :meth:`finalize` and of the streamed algorithms.
    written : iterable of (prime_index, row_start, row_stop), optional
        Reopen the files at ``out`` (which must exist, of this shape and dtype) of a
        session whose coordinator died (``omnifc serve --resume``): these regions were
        each written once, completely (:meth:`region_digest` says with what); every
        other tile region is zeroed, whatever a write cut short left in it.

    Notes
    -----
    Every upload must hold reduced values in [0, p); a larger value raises
    :class:`ParameterError` and nothing is added. If the accumulator is dropped, or
    :meth:`abort` is called, before :meth:`finalize`, its files are deleted: a partial
    result is never left behind.
    """

    def __init__(self, n: int, primes, *, scale_bits: int, distance_bound: int | None = None,
                 out=None, memory_budget=None, tile_bytes=None, parameters=None,
                 written=None, tiles=None):
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
            raise ParameterError(f"n must be a positive integer, got {n!r}")
        self.n = int(n)
        self.primes = tuple(int(p) for p in primes)
        if not self.primes or any(not 2 <= p < 2**31 for p in self.primes):
            raise ParameterError(f"primes must be a non-empty list of moduli in [2, 2^31), got "
                                 f"{list(self.primes)}")
        self.scale_bits = int(scale_bits)
        self.distance_bound = None if distance_bound is None else int(distance_bound)
        self.memory_budget = _check_budget(memory_budget)
        self.tile_bytes = _check_tile_bytes(tile_bytes)
        self.parameters = dict(parameters or {})
        self.out = None if out is None else Path(out)
        reopen = written is not None
        if reopen and self.out is None:
            raise ParameterError("written= reopens the files at out=; give out")
        self._zarr = None  # (group, array) of a Zarr result store
        zarr_out = _is_zarr_path(self.out)
        if reopen and zarr_out:
            raise ParameterError("written= reopens a .npy result (omnifc serve --resume); a "
                                 "Zarr store (out ending in .zarr) is written once, at "
                                 "finalize")
        if zarr_out:
            _import_zarr()  # before anything is allocated
        if not reopen and self.out is not None and (self.out.exists() or
                                                    _sidecar(self.out).exists()):
            raise ParameterError(f"out={str(self.out)!r} exists already; choose a new path")
        self.dtype = storage_dtype(self.distance_bound, len(self.primes))
        shape = (self.n, self.n)
        # RAM use of everything n x n decides where all of it lives
        total = self.n * self.n * (self.dtype.itemsize + 4 * (len(self.primes) - 1))
        budget = self.memory_budget if total <= self.memory_budget else -1
        allocate = _reopen if reopen else _allocate
        # a Zarr result: the working matrix follows the budget, beside the store on disk
        self._result, self._path, self._tmpdir = allocate(
            shape, self.dtype, path=None if zarr_out else self.out, budget=budget,
            name="distances", directory=self.out.parent if zarr_out else None)
        self._scratch = []  # residues of the primes after the first (uint32)
        self._scratch_paths = []
        for k in range(1, len(self.primes)):
            scratch_path = None
            if self._path is not None:
                scratch_path = self._path.with_name(self._path.stem + f".residues-{k}.npy")
            array, path, _ = allocate(shape, np.uint32, path=scratch_path, budget=budget,
                                      name=f"residues-{k}")
            self._scratch.append(array)
            self._scratch_paths.append(path)
        self._contributions = np.zeros((len(self.primes), self.n), dtype=np.int64)
        if reopen:
            self._keep_only(written, tiles)
        self._finished = False
        self._finalizer = weakref.finalize(self, _remove, *self._owned_paths(zarr_out))
        if zarr_out:  # reserves the path; says "complete": false until finalize
            self._zarr = _create_zarr(self.out, self.n, self.dtype, self.tile_bytes)

    def _owned_paths(self, zarr_out: bool = False) -> list:
        paths = [p for p in self._scratch_paths if p is not None]
        if self._tmpdir is not None:
            paths.append(self._tmpdir)
        elif self._path is not None:
            paths.append(self._path)
        if zarr_out:
            paths.append(self.out)
        return paths

    @property
    def ram_bytes(self) -> int:
        """Bytes of n x n data this accumulator holds in RAM (0 when memory-mapped): what
        is left of ``memory_budget`` bounds the coordinator's open tile sums."""
        arrays = [self._result] + list(self._scratch)
        return sum(int(a.nbytes) for a in arrays
                   if a is not None and not isinstance(a, np.memmap))

    def _target(self, k: int):
        if k == 0:
            return self._result.view(np.uint32) if self.dtype == np.int32 else self._result
        return self._scratch[k - 1]

    def add_tile(self, prime_index: int, row_start: int, row_stop: int, values) -> None:
        """Add ``values`` (rows [row_start, row_stop) x columns [row_start, n)) mod p.

        ``values`` has shape (row_stop - row_start, n - row_start) and holds reduced
        residues in [0, p) (any integer dtype). Entries left of the diagonal inside the
        block are ignored by :meth:`finalize`.
        """
        if self._finished:
            raise ProtocolError("the accumulator is finalized (or aborted); no more tiles")
        if isinstance(prime_index, bool) or not 0 <= int(prime_index) < len(self.primes):
            raise ParameterError(f"prime_index must be in [0, {len(self.primes)}), got "
                                 f"{prime_index!r}")
        k, a, b = int(prime_index), int(row_start), int(row_stop)
        if not 0 <= a < b <= self.n:
            raise ParameterError(f"row block must satisfy 0 <= row_start < row_stop <= "
                                 f"{self.n}, got [{a}, {b})")
        values = np.asarray(values)
        expected = (b - a, self.n - a)
        if values.shape != expected:
            raise ParameterError(f"tile rows [{a}, {b}) needs shape {expected}, got "
                                 f"{values.shape}")
        p = self.primes[k]
        if values.dtype != np.uint32:
            if values.size and (values.min() < 0 or values.max() >= p):
                raise ParameterError(f"tile values must be reduced residues in [0, {p})")
            values = values.astype(np.uint32)
        elif values.size and values.max() >= p:  # checked first: nothing is added on error
            raise ParameterError(f"tile values must be reduced residues in [0, {p})")
        target = np.asarray(self._target(k)[a:b, a:])  # a view (memmap -> ndarray)
        add_reduced(target, values, p)
        self._contributions[k, a:b] += 1

    def _keep_only(self, written, tiles) -> None:
        """A reopened result: count the regions ``written``; zero every other tile's."""
        written = {(int(k), int(a), int(b)) for k, a, b in written}
        tiles = [(int(a), int(b)) for a, b in (tiles or ())]
        for k in range(len(self.primes)):
            target = self._target(k)
            for a, b in tiles:
                if (k, a, b) in written:
                    self._contributions[k, a:b] += 1
                else:
                    target[a:b, a:] = 0
        unknown = written - {(k, a, b) for k in range(len(self.primes)) for a, b in tiles}
        if unknown:
            raise ParameterError(f"written regions {sorted(unknown)} are not tiles "
                                 "of this result")

    def region_digest(self, prime_index: int, row_start: int, row_stop: int) -> str:
        """BLAKE2b (hex) of the region rows [row_start, row_stop) x columns
        [row_start, n) of prime ``prime_index``'s matrix (what a journal record vouches
        for).

        >>> acc = DistanceAccumulator(2, primes=[7], scale_bits=0)
        >>> before = acc.region_digest(0, 0, 1)
        >>> acc.add_tile(0, 0, 1, np.array([[0, 3]]))
        >>> acc.region_digest(0, 0, 1) != before
        True
        """
        k, a, b = int(prime_index), int(row_start), int(row_stop)
        target = self._target(k)
        digest = hashlib.blake2b(f"{k}:{a}:{b}:".encode(), digest_size=16)
        for row in range(a, b):
            digest.update(np.ascontiguousarray(target[row, a:]).data)
        return digest.hexdigest()

    def release(self) -> None:
        """Let go of the files without deleting them (a refused resume keeps them for
        another try)."""
        self._finished = True
        self._finalizer.detach()
        self._result = None
        self._scratch = []

    def abort(self) -> None:
        """Drop everything written so far (files included, a Zarr store too)."""
        self._finished = True
        self._result = None
        self._scratch = []
        self._zarr = None
        self._finalizer()

    def finalize(self) -> DistanceStore:
        """Combine, check, mirror (tile by tile) and return the finished :class:`DistanceStore`.

        Raises :class:`ProtocolError` (and deletes the files) if some row received a
        different number of contributions than the others for some prime, or if a
        combined distance exceeds ``distance_bound``.
        """
        if self._finished:
            raise ProtocolError("the accumulator is finalized (or aborted) already")
        counts = self._contributions
        try:
            if counts.min() < 1 or counts.max() != counts.min():
                expected = max(1, int(counts.max()))
                k, row = np.unravel_index(np.argmax(counts != expected), counts.shape)
                raise ProtocolError(
                    f"incomplete result: row {row} received {counts[k, row]} contributions "
                    f"for prime {self.primes[k]}, expected {expected} like the others")
            self._finalize_tiles()
            if self._zarr is not None:
                return self._finalize_zarr()
        except BaseException:
            self.abort()
            raise
        self._finished = True
        self._finalizer.detach()
        result, scratch_paths = self._result, self._scratch_paths
        self._scratch = []
        _remove(*scratch_paths)
        if isinstance(result, np.memmap):
            result.flush()
        if self.out is not None:
            _sidecar(self.out).write_text(json.dumps({
                "format": _FORMAT, "n": self.n, "dtype": str(self.dtype),
                "scale_bits": self.scale_bits, "primes": list(self.primes),
                "distance_bound": self.distance_bound, "parameters": self.parameters},
                default=str))
        cleanup = None
        store = DistanceStore(result, scale_bits=self.scale_bits, path=self._path,
                              memory_budget=self.memory_budget, tile_bytes=self.tile_bytes,
                              parameters=self.parameters)
        if self._tmpdir is not None:
            cleanup = weakref.finalize(store, _remove, self._tmpdir)
            store._cleanup = cleanup
        return store

    def _finalize_zarr(self) -> DistanceStore:
        """The decoded working matrix into the Zarr store (whole chunks, row block by row
        block), the working files deleted, the metadata written last; the store opened."""
        group, array = self._zarr
        _fill_zarr(array, self._result)
        # parameters as JSON sees them (the .npy sidecar's default=str, here explicitly)
        parameters = json.loads(json.dumps(self.parameters, default=str))
        _complete_zarr(group, {"n": self.n, "dtype": str(self.dtype),
                               "scale_bits": self.scale_bits, "primes": list(self.primes),
                               "distance_bound": self.distance_bound,
                               "parameters": parameters})
        self._finished = True
        self._finalizer.detach()
        self._result, self._scratch, self._zarr = None, [], None
        _remove(*[p for p in self._scratch_paths if p is not None], self._tmpdir)
        return DistanceStore.open(self.out, memory_budget=self.memory_budget,
                                  tile_bytes=self.tile_bytes)

    def _finalize_tiles(self) -> None:
        # the decode of finite_field, in place in the one result matrix: CRT, no-wrap
        # bound, mirror, zero diagonal, row block by row block
        try:
            decode_upper(self._result, self._scratch, self.primes, bound=self.distance_bound,
                         tile_bytes=self.tile_bytes, what="combined distances")
        except WrapAroundError as error:
            raise ProtocolError(str(error)) from None


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
