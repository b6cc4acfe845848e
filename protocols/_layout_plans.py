"""The session plans of the ``landmarks`` and ``pairs`` layouts (issue 22).

Both are distance sessions (:class:`~protocols._plans.DistanceSession`): the same
shares, the same decoding weights c_j, the same view-bound masks and Reed-Solomon checks
(:func:`~protocols._integrity.round_checks` does not depend on what the entries are), the
same fail-closed decode. What differs is which entries of g(beta_j) a party evaluates and
how the schedule tiles them:

==================  ==========================================  ==========================
                    :class:`LandmarkSession`                    :class:`PairSession`
==================  ==========================================  ==========================
entries             D[:, L]: (n, L)                             D[i_q, j_q]: (P,)
tiles               row blocks [a, b) x all L columns           ranges [a, b) of the pairs
party's kernel      :func:`~finite_field.cross_sq_distances`    :func:`~finite_field.
                    (rows [a, b) against the landmark rows)     paired_sq_distances`
result              the ``(n, L)`` integer array, the landmark  the ``(P,)`` array, the
                    indices (:class:`LandmarkDistances`)        pairs (:class:`PairDistances`)
==================  ==========================================  ==========================

The layout's entries are fixed when the roster is known (:meth:`bind`, by every party and
by the coordinator; :func:`protocols._layouts.resolve_layout`). The result is held by an
:class:`EntryAccumulator`: one uint32 residue array per prime (in RAM within the memory
budget, memory-mapped in a temporary directory beyond it), decoded row block by row block
with the no-wrap check and no second array of the result: with one prime (and a bound below
2^31) the residues become the int32 result in place, else CRT writes an int64 array placed
like them (docs/scale.md, "Layouts at scale"). The float values are computed on access.
"""

from __future__ import annotations

import logging
import time
import weakref

import numpy as np

from finite_field import (ParameterError, ProtocolError, WrapAroundError, add_reduced,
                          cross_sq_distances, decode_residues, paired_sq_distances)

from ._accumulator import _allocate, _check_budget, _check_tile_bytes, _remove, storage_dtype
from ._layouts import resolve_layout
from ._messages import vector_tiles
from ._plans import _BLOCK_ELEMENTS, DistanceSession, decode_failure, out_of_bound

logger = logging.getLogger(__name__)

#: A float view materialized beyond this many bytes is logged (it is 8 bytes an entry).
_LARGE_FLOAT_BYTES = 1 << 30

__all__ = ["LandmarkSession", "PairSession", "EntryAccumulator", "LandmarkDistances",
           "PairDistances", "layout_session_type"]


def _float_values(integer, scale_bits: int, what: str) -> np.ndarray:
    """``integer / 4^q`` as one float64 array (8 bytes an entry: logged when large)."""
    integer = np.asarray(integer)
    if integer.nbytes > _LARGE_FLOAT_BYTES:
        logger.warning("%s: materializing %.2f GB of float64 values; read them by row "
                       "block (rows(a, b)) to stay out of core", what, integer.size * 8 / 1e9)
    return integer * (1.0 / float(4 ** int(scale_bits)))


class LandmarkDistances:
    """D[:, L] of a ``landmarks`` session: what the clustering callback receives.

    Attributes
    ----------
    integer : ndarray of int32 or int64, shape (n, L)
        Exact integer squared distances from every row to every landmark row; in RAM, or
        memory-mapped (``numpy.memmap``) when it does not fit the coordinator's
        ``memory_budget``.
    values : ndarray of float64, shape (n, L)
        ``integer / 4^q``, computed on access (a new n x L float64 array each time; read
        :meth:`rows` blocks to stay out of core).
    landmarks : ndarray of int64, shape (L,)
        The global row index of each column; ``values[landmarks]`` is D[L, L].
    """

    def __init__(self, integer, values, landmarks, scale_bits: int) -> None:
        self.integer, self._values = integer, values
        self.landmarks = np.asarray(landmarks, dtype=np.int64)
        self.scale_bits = int(scale_bits)

    @property
    def values(self) -> np.ndarray:
        if self._values is not None:
            return self._values
        return _float_values(self.integer, self.scale_bits, "D[:, L]")

    def rows(self, start: int, stop: int) -> np.ndarray:
        """Rows [start, stop) of D[:, L] as float64 (only that block is read)."""
        if self._values is not None:
            return np.asarray(self._values[start:stop], dtype=np.float64)
        return np.asarray(self.integer[start:stop]) * (1.0 / float(4 ** self.scale_bits))

    @property
    def shape(self) -> tuple:
        return tuple((self.integer if self.integer is not None else self._values).shape)

    def __len__(self) -> int:
        return int(self.shape[0])

    def __array__(self, dtype=None, copy=None):
        values = self.values
        return values if dtype is None else values.astype(dtype, copy=False)

    def __repr__(self) -> str:
        return f"LandmarkDistances(n={len(self)}, L={len(self.landmarks)})"


class PairDistances:
    """The listed pairs of a ``pairs`` session: what the clustering callback receives.

    Attributes
    ----------
    integer, values : ndarray, shape (P,)
        Exact integer squared distances of the pairs, and ``integer / 4^q`` (computed on
        access).
    pairs : ndarray of int64, shape (P, 2)
        The global rows (i, j) of each entry, in the layout's order.
    n : int
        The session's rows (``len()`` is n: one label per row).
    """

    def __init__(self, integer, values, pairs, n: int, scale_bits: int) -> None:
        self.integer, self._values = integer, values
        self.pairs = np.asarray(pairs, dtype=np.int64)
        self.n = int(n)
        self.scale_bits = int(scale_bits)

    @property
    def values(self) -> np.ndarray:
        if self._values is not None:
            return self._values
        return _float_values(self.integer, self.scale_bits, "the pair distances")

    def __len__(self) -> int:
        return self.n

    def __repr__(self) -> str:
        return f"PairDistances(n={self.n}, pairs={len(self.pairs)})"


class EntryAccumulator:
    """Uploads of a layout's entries, added mod p into one residue array per prime.

    ``shape`` is (rows, ...) with the schedule's tiles along the first axis: (n, L) for
    landmarks, (P,) for pairs. :meth:`add_tile` adds the rows [a, b) of one upload,
    reduced on every add; :meth:`finalize` checks that every row received the same number
    of contributions for every prime, then decodes (CRT, every value in [0,
    distance_bound]) into one int64 array. Dropped, aborted or failed: its files go.
    """

    def __init__(self, shape, primes, *, scale_bits: int, distance_bound: int,
                 memory_budget=None, tile_bytes=None) -> None:
        self.shape = tuple(int(s) for s in shape)
        self.primes = tuple(int(p) for p in primes)
        self.scale_bits = int(scale_bits)
        self.distance_bound = int(distance_bound)
        self.memory_budget = _check_budget(memory_budget)
        self.tile_bytes = _check_tile_bytes(tile_bytes)
        rows = self.shape[0]
        self._width = int(np.prod(self.shape[1:], dtype=np.int64)) if len(self.shape) > 1 \
            else 1
        grid = (rows, self._width)
        total = rows * self._width * 4 * len(self.primes)
        budget = self.memory_budget if total <= self.memory_budget else -1
        self._residues, self._tmpdirs = [], []
        for k in range(len(self.primes)):
            array, _, tmpdir = _allocate(grid, np.uint32, path=None, budget=budget,
                                         name=f"layout-residues-{k}")
            self._residues.append(array)
            if tmpdir is not None:
                self._tmpdirs.append(tmpdir)
        self._contributions = np.zeros((len(self.primes), rows), dtype=np.int64)
        self._finished = False
        # a list: finalize adds the result's directory; every directory goes with the
        # accumulator, whatever happens
        self._finalizer = weakref.finalize(self, _remove_all, self._tmpdirs)

    @property
    def ram_bytes(self) -> int:
        return sum(int(a.nbytes) for a in self._residues if not isinstance(a, np.memmap))

    def add_tile(self, prime_index: int, start: int, stop: int, values) -> None:
        """Add rows [start, stop) of an upload (reduced residues, shape (stop - start,
        ...)) mod p; ParameterError (nothing added) on a value >= p or a wrong shape."""
        if self._finished:
            raise ProtocolError("the accumulator is finalized (or aborted); no more tiles")
        k, a, b = int(prime_index), int(start), int(stop)
        if not 0 <= k < len(self.primes) or not 0 <= a < b <= self.shape[0]:
            raise ParameterError(f"tile (prime {k}, rows [{a}, {b})) is outside the result "
                                 f"{self.shape} with {len(self.primes)} primes")
        values = np.asarray(values)
        if values.shape != (b - a,) + self.shape[1:]:
            raise ParameterError(f"tile rows [{a}, {b}) needs shape "
                                 f"{(b - a,) + self.shape[1:]}, got {values.shape}")
        p = self.primes[k]
        if values.size and (values.min() < 0 or values.max() >= p):
            raise ParameterError(f"tile values must be reduced residues in [0, {p})")
        target = np.asarray(self._residues[k][a:b])
        add_reduced(target, values.astype(np.uint32).reshape(b - a, self._width), p)
        self._contributions[k, a:b] += 1

    def abort(self) -> None:
        self._finished = True
        self._residues = []
        _remove(*self._tmpdirs)

    def finalize(self) -> np.ndarray:
        """The exact entries, shape ``shape``; ProtocolError (files deleted) when a row is
        incomplete or a value exceeds the no-wrap bound.

        Decoded row block by row block (``tile_bytes``), never a second array of the
        whole result: with one prime and a bound below 2^31 the residues themselves become
        the int32 result (checked against the bound, then viewed as int32, in place);
        otherwise CRT writes an int64 array placed like the residues (RAM within
        ``memory_budget``, else memory-mapped). A memory-mapped result's file is unlinked
        as soon as it is complete: the mapping stays valid while the array lives and its
        disk space is freed with it, so nothing is left behind.
        """
        if self._finished:
            raise ProtocolError("the accumulator is finalized (or aborted) already")
        try:
            counts = self._contributions
            if counts.min() < 1 or counts.max() != counts.min():
                k, row = np.unravel_index(np.argmax(counts != counts.max()), counts.shape)
                raise ProtocolError(
                    f"incomplete result: row {row} received {counts[k, row]} contributions "
                    f"for prime {self.primes[k]}, expected {int(counts.max())} like the "
                    "others")
            rows = self.shape[0]
            dtype = storage_dtype(self.distance_bound, len(self.primes))
            in_place = dtype == np.int32
            if in_place:
                out = self._residues[0]
            else:
                budget = self.memory_budget - self.ram_bytes
                out, _, tmpdir = _allocate((rows, self._width), dtype, path=None,
                                           budget=budget, name="layout-result")
                if tmpdir is not None:
                    self._tmpdirs.append(tmpdir)
            step = max(1, self.tile_bytes // (8 * self._width * (len(self.primes) + 1)))
            for a in range(0, rows, step):
                b = min(rows, a + step)
                if in_place:
                    block = out[a:b]
                    if block.size and int(block.max()) > self.distance_bound:
                        raise ProtocolError(
                            f"decoded distances exceed the bound {self.distance_bound} "
                            f"(largest {int(block.max())}): a contribution is corrupt")
                    continue
                try:
                    out[a:b] = decode_residues([r[a:b] for r in self._residues], self.primes,
                                               self.distance_bound, what="decoded distances")
                except WrapAroundError as error:
                    raise ProtocolError(str(error)) from None
            if in_place:
                out = out.view(np.int32)
            if isinstance(out, np.memmap):
                out.flush()
        finally:
            self._finished = True
            self._residues = []
            _remove(*self._tmpdirs)  # a mapping of an unlinked file stays valid
        return out.reshape(self.shape)


def _remove_all(paths: list) -> None:
    _remove(*paths)


def _timed(party, kernel, *args) -> np.ndarray:
    started, cpu = time.perf_counter(), time.process_time()
    out = kernel(*args)
    party.timings["kernel_seconds"] += time.perf_counter() - started
    party.timings["kernel_cpu_seconds"] += time.process_time() - cpu
    return out


class _LayoutSession(DistanceSession):
    """What the two layouts share: the accumulator, the decode, the result."""

    journals = False  # the result is kept in memory, not in a file of row tiles

    def _shape(self, n_total: int) -> tuple:
        raise NotImplementedError

    def accumulator(self, n_total: int, *, parameters: dict, storage: dict):
        return EntryAccumulator(self._shape(n_total), self.plan.primes,
                                scale_bits=self.plan.quantizer.scale_bits,
                                distance_bound=self.plan.distance_bound,
                                memory_budget=storage.get("memory_budget"),
                                tile_bytes=storage.get("tile_bytes"))

    def decode(self, acc: EntryAccumulator, responders) -> tuple:
        """``(integer, values, None)``: the exact entries and their float values."""
        try:
            integer = acc.finalize()
        except (ProtocolError, ParameterError):
            raise decode_failure(out_of_bound(self.plan, responders)) from None
        return integer, None, None  # the float values are computed on access


class LandmarkSession(_LayoutSession):
    """D[:, L]: row tiles of the (n, L) block of every row against the landmark rows."""

    layout = "landmarks"
    landmarks: np.ndarray | None = None

    def bind(self, session_id: str, n_total: int, roster_digest: bytes) -> None:
        self.landmarks = resolve_layout(self.parameters, n_total, session_id, roster_digest)

    def _shape(self, n_total: int) -> tuple:
        return (n_total, len(self.landmarks))

    def tiles(self, n_total: int) -> list[tuple[int, int]]:
        """Row blocks [a, b) of the (n, L) result, ``chunk_bytes // 4`` elements at most."""
        rows = max(1, (self.parameters.chunk_bytes // 4) // len(self.landmarks))
        return [(a, min(n_total, a + rows)) for a in range(0, n_total, rows)]

    def tile_shape(self, a: int, b: int, n_total: int) -> tuple:
        return (b - a, len(self.landmarks))

    def tile_values(self, party, k: int, tiles):
        """``values(tile_index)``: rows [a, b) of D[:, L] at beta_j, mod prime k; several
        consecutive tiles are computed in one kernel call."""
        x, p = party.held[k], self.plan.primes[k]
        columns = np.ascontiguousarray(x[self.landmarks])
        width = len(self.landmarks)
        block = None  # (start, stop, values)

        def values(tile_index: int) -> np.ndarray:
            nonlocal block
            a, b = tiles[tile_index]
            if block is None or b > block[1]:
                stop = b
                for _, later in tiles[tile_index + 1:]:
                    if (later - a) * width > _BLOCK_ELEMENTS:
                        break
                    stop = later
                block = (a, stop, _timed(party, cross_sq_distances, x[a:stop], columns, p))
            return block[2][a - block[0]:b - block[0]]
        return values

    def entries(self, a: int, b: int):
        """flat index in tile [a, b) -> (global row, global column)."""
        landmarks, width = self.landmarks, len(self.landmarks)
        return lambda flat: (a + flat // width, landmarks[flat % width])

    def cluster_input(self, integer, values) -> LandmarkDistances:
        return LandmarkDistances(integer, values, self.landmarks,
                                 self.plan.quantizer.scale_bits)

    def describe(self) -> dict:
        return {"layout": "landmarks", "landmarks": self.landmarks.tolist()}


class PairSession(_LayoutSession):
    """The listed pairs: ranges of the pair list, each pair's distance at beta_j."""

    layout = "pairs"
    pairs: np.ndarray | None = None

    def bind(self, session_id: str, n_total: int, roster_digest: bytes) -> None:
        self.pairs = resolve_layout(self.parameters, n_total, session_id, roster_digest)
        self._n = n_total

    def _shape(self, n_total: int) -> tuple:
        return (len(self.pairs),)

    def tiles(self, n_total: int) -> list[tuple[int, int]]:
        return vector_tiles(len(self.pairs), self.parameters.chunk_bytes)

    def tile_shape(self, a: int, b: int, n_total: int) -> tuple:
        return (b - a,)

    def tile_values(self, party, k: int, tiles):
        x, p = party.held[k], self.plan.primes[k]
        rows, cols = self.pairs[:, 0], self.pairs[:, 1]

        def values(tile_index: int) -> np.ndarray:
            a, b = tiles[tile_index]
            return _timed(party, paired_sq_distances, x, rows[a:b], cols[a:b], p)
        return values

    def entries(self, a: int, b: int):
        pairs = self.pairs
        return lambda flat: (pairs[a + flat, 0], pairs[a + flat, 1])

    def cluster_input(self, integer, values) -> PairDistances:
        return PairDistances(integer, values, self.pairs, self._n,
                             self.plan.quantizer.scale_bits)

    def describe(self) -> dict:
        return {"layout": "pairs", "n_pairs": len(self.pairs)}


def layout_session_type(layout: str) -> type:
    """The session plan of a non-full layout."""
    return {"landmarks": LandmarkSession, "pairs": PairSession}[layout]
