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
import weakref
from pathlib import Path

import numpy as np

from finite_field import (InputError, ParameterError, ProtocolError,  # noqa: F401
                          WrapAroundError, add_reduced, decode_upper)

# The result's storage, its Zarr store and its read side live in their own modules (issue
# 20); every name this module held before is still importable from here.
from ._distance_store import DistanceStore, TiledDistances, _NpyRows, discard_store  # noqa: F401
from ._result_storage import (DEFAULT_MEMORY_BUDGET, DEFAULT_TILE_BYTES,  # noqa: F401
                              _FORMAT, IncompleteResultError, _allocate, _check_budget,
                              _check_tile_bytes, _remove, _reopen, _rows_per_tile, _sidecar,
                              rows_per_tile, storage_dtype)
from ._zarr_store import (_DASK_EXTRA, _ZARR_ATTRIBUTE, ZARR_COMPONENT,  # noqa: F401
                          ZarrMatrix, _complete_zarr, _create_zarr, _fill_zarr,
                          _import_zarr, _is_zarr_path, _write_zarr, _zarr_chunk_rows)

__all__ = ["DistanceAccumulator", "DistanceStore", "TiledDistances", "DEFAULT_MEMORY_BUDGET",
           "DEFAULT_TILE_BYTES", "storage_dtype", "discard_store", "IncompleteResultError",
           "ZarrMatrix", "ZARR_COMPONENT"]

logger = logging.getLogger(__name__)


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
