"""Integrity of a round: Reed-Solomon checks on the uploads, mask groups, the verdict.

Every party of the responding set B and the coordinator derive the same public structure
from (the plan, the ordered roster, B, the session parameters) with :func:`round_checks`:

* s = r = |B| - K checks (K = 2l+2t-1), the rows W = [c; mu_1..mu_s] per prime
  (:func:`finite_field.integrity_rows`);
* masked mode: the mask groups per prime (:func:`finite_field.choose_mask_groups` with
  t colluders), and the distinct member sets, each with a *leader* (its first member in
  roster order) who draws the group's seed for the round.

A party uploads U_j = g(beta_j) + M_j (:func:`finite_field.masked_upload_streams` over
the rho_G streams of :func:`group_streams`, the same values as
:func:`finite_field.integrity_upload` of :func:`group_coefficients`), the raw g(beta_j) in
transparent mode. The coordinator
adds every upload into running accumulators w.U for w in W, tile by tile
(:class:`TileAccumulator`; the open tiles' sums beyond the memory budget are memory-mapped,
:class:`OpenTileSums`), and decodes each finished tile's syndromes; the verdict over
the whole round is :func:`verdict`. No checks (``integrity="off"``, a sum, or r = 0):
:func:`round_checks` returns None and the round runs the weighted pairwise masks.
See docs/protocol.md ("Integrity") and docs/integrity.md for the math.
"""

from __future__ import annotations

import functools
import logging
import tempfile
import weakref
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from finite_field import (ReedSolomonCheck, add_reduced, attribute, choose_mask_groups,
                          decoding_radius, integrity_rows, weighted_sums)

from ._accumulator import _remove
from ._crypto import ElementStream, MaskView, group_mask_key

__all__ = ["RoundChecks", "round_checks", "group_coefficients", "group_streams",
           "TileAccumulator", "OpenTileSums",
           "Findings", "verdict"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class RoundChecks:
    """The public integrity structure of one round.

    Attributes
    ----------
    responders : tuple of str
        B in roster order.
    checks : int
        s = |B| - K parity checks (all the redundancy).
    radius : int
        tau = min(floor(s/2), s - A) for the A deviating parties the round withstands:
        errors per entry that are located (and, with "correct", corrected); never a
        mislocated pattern of up to A wrong evaluators (:func:`finite_field.decoding_radius`).
    rows : list of ndarray
        Per prime, W = [c; mu_1..mu_s], shape (s+1, |B|).
    codes : list of ReedSolomonCheck
        Per prime.
    groups : list of list of MaskGroup
        Per prime (masked mode; empty lists in transparent mode).
    member_sets : tuple of tuple of str
        Distinct groups (sorted by roster order), the order of the seed nonces.
    """

    responders: tuple
    checks: int
    radius: int
    rows: list
    codes: list
    groups: list
    member_sets: tuple

    def index(self, name: str) -> int:
        return self.responders.index(name)

    def my_sets(self, name: str) -> list[tuple[int, tuple]]:
        """(seed index, members) of every group ``name`` belongs to."""
        return [(i, m) for i, m in enumerate(self.member_sets) if name in m]


def round_checks(plan, parameters, names, responders, *,
                 adversaries: int | None = None) -> RoundChecks | None:
    """The integrity structure of the round with responding set ``responders`` (or None).

    None when there is nothing to check: ``integrity="off"``, a secure sum, or
    r = |B| - K = 0 (the caller says so, loudly). ``adversaries``: the deviating parties
    this round must withstand (default: the session's A), which sets the decoding radius
    :func:`finite_field.decoding_radius` (the coordinator never starts a round with fewer
    checks than that; a party's view of the structure does not depend on it).
    """
    if parameters.integrity == "off" or parameters.kind != "distance":
        return None
    order = tuple(sorted(responders, key=names.index))
    position = [names.index(r) for r in order]
    k = plan.min_responders
    s = len(order) - k
    if s < 1:
        return None
    rows, codes, groups, sets = [], [], [], set()
    masked = parameters.mode == "masked"
    for code in plan.codes:
        check = ReedSolomonCheck.for_responders(code, position)
        w = integrity_rows(code.decoding_weights(position), check.parity_rows(s), code.prime)
        rows.append(w)
        codes.append(check)
        if masked:
            chosen = list(_mask_groups(np.ascontiguousarray(w, dtype=np.int64).tobytes(),
                                       w.shape, code.prime, parameters.noise_segments))
            groups.append(chosen)
            sets.update(tuple(order[j] for j in sorted(g.members)) for g in chosen)
        else:
            groups.append([])
    member_sets = tuple(sorted(sets, key=lambda m: [names.index(x) for x in m]))
    a = parameters.adversary_bound(len(names)) if adversaries is None else int(adversaries)
    radius = decoding_radius(s, a) if a <= s else 0
    return RoundChecks(responders=order, checks=s, radius=radius, rows=rows, codes=codes,
                       groups=groups, member_sets=member_sets)


@functools.lru_cache(maxsize=64)
def _mask_groups(rows: bytes, shape: tuple, prime: int, colluders: int) -> tuple:
    """:func:`finite_field.choose_mask_groups` of public values, computed once per process
    (an in-memory session has every party derive the same structure every round)."""
    w = np.frombuffer(rows, dtype=np.int64).reshape(shape)
    return tuple(choose_mask_groups(w, prime, colluders=colluders))


def group_streams(checks: RoundChecks, prime_index: int, me: str, seeds: dict,
                  view: MaskView, tile_index: int) -> list:
    """[(group index, rho_G stream, z_G[me])] for every group of prime ``prime_index``
    containing ``me``: the streams are drawn chunk by chunk
    (:class:`protocols._crypto.ElementStream`, :func:`finite_field.masked_upload_streams`).

    ``seeds`` maps a member set (tuple of names) to its 32-byte seed for this round.
    """
    j = checks.index(me)
    prime = checks.codes[prime_index].prime
    out, seen = [], {}
    for i, group in enumerate(checks.groups[prime_index]):
        members = tuple(checks.responders[x] for x in sorted(group.members))
        which = seen.get(members, 0)  # which null vector of that member set
        seen[members] = which + 1
        if j not in group.members:
            continue
        key = group_mask_key(seeds[members], view, members, which, prime, tile_index)
        out.append((i, ElementStream(key, prime), group.coefficient(j) % prime))
    return out


def group_coefficients(checks: RoundChecks, prime_index: int, me: str, seeds: dict,
                       view: MaskView, tile_index: int, size: int) -> dict:
    """{group index: rho_G} for every group of prime ``prime_index`` containing ``me``
    (the whole streams of :func:`group_streams`, as int64 arrays of ``size``)."""
    return {i: stream.fill(np.empty(size, dtype=np.uint32)).astype(np.int64)
            for i, stream, _ in group_streams(checks, prime_index, me, seeds, view,
                                              tile_index)}


class TileAccumulator:
    """Running sums w.U (w in W) of one tile and one prime; memory (s+1) x the tile, uint32.

    Each upload is added as it arrives (:func:`finite_field.weighted_sums` of its column
    of W, reduced), so the coordinator never holds |B| uploads. The sums are reduced on
    every add: both terms are residues < p < 2^31, so their sum is below 2^32 and fits
    the uint32 element; every stored value is a residue, whatever the number of uploads.
    In RAM, or with ``path`` in a ``.npy`` file there, memory-mapped only while an
    upload is added or the tile is finished (the same exact values; no mapping stays
    open, so any number of open tiles fits the process's mapping limit;
    :class:`OpenTileSums` decides which).
    """

    __slots__ = ("sums", "prime", "path", "nbytes")

    def __init__(self, rows: int, prime: int, shape: tuple, *, path=None) -> None:
        shape = (rows,) + tuple(shape)
        self.sums = None  # on disk: see _mapped
        if path is None:
            self.sums = np.zeros(shape, dtype=np.uint32)
        else:
            # zero-filled (a sparse file), then unmapped again
            np.lib.format.open_memmap(path, mode="w+", dtype=np.uint32, shape=shape)
        self.prime = prime
        self.path = path
        self.nbytes = int(np.prod(shape, dtype=np.int64)) * 4

    @property
    def on_disk(self) -> bool:
        return self.path is not None

    def _mapped(self, mode: str = "r+") -> np.ndarray:
        return self.sums if self.path is None else np.load(self.path, mmap_mode=mode)

    def add(self, column, upload) -> None:
        """Add ``column[q] * upload`` to every running sum q mod p (``upload`` reduced)."""
        if len(column) == 1 and int(column[0]) == 1:  # one plain sum (a journaled round)
            sums = self._mapped()
            add_reduced(np.asarray(sums).reshape(sums.shape[1:]), upload, self.prime)
            return
        contribution = weighted_sums(np.asarray(column, dtype=np.int64).reshape(-1, 1),
                                     np.asarray(upload)[np.newaxis], self.prime)
        sums = self._mapped()
        target = np.asarray(sums).reshape(sums.shape[0], -1)  # a view
        add_reduced(target, contribution.astype(np.uint32).reshape(target.shape), self.prime)

    def finish(self) -> np.ndarray:
        """The reduced sums (s+1, ...) as int64: D's tile, then the syndromes."""
        return np.array(self._mapped("r"), dtype=np.int64)

    def discard(self) -> None:
        """Drop the sums (and delete their file)."""
        self.sums = None
        if self.path is not None:
            _remove(self.path)


class OpenTileSums:
    """The running sums of every open tile of a round, within a RAM budget.

    A tile (prime, tile index) is *open* from its first upload until its last; a party
    that delays its stream decides how many are open at once, so their memory must not
    depend on it. The sums of a newly opened tile stay in RAM while the RAM of all open
    sums, this one included, is at most ``budget`` bytes; beyond it they are a
    memory-mapped ``.npy`` file (:class:`TileAccumulator` ``path``) in a temporary
    directory made in ``directory`` (the system's temporary directory by default). The
    directory exists only while some open sum is on disk: a finished tile's file is
    deleted at once, :meth:`close` (abort, rerun) deletes every file, and so does garbage
    collection of a pool that was never closed.

    Attributes
    ----------
    ram_bytes, disk_bytes : int
        Bytes of the open sums now in RAM and on disk.
    peak_ram_bytes, peak_disk_bytes : int
        Their largest values so far.
    """

    def __init__(self, rows: int, budget: int, directory=None) -> None:
        self.rows = int(rows)
        self.budget = max(0, int(budget))
        self.directory = None if directory is None else Path(directory)
        self._open: dict = {}
        self.ram_bytes = self.disk_bytes = 0
        self.peak_ram_bytes = self.peak_disk_bytes = 0
        self._tmpdir: Path | None = None
        self._finalizer = None
        self._serial = 0

    def __len__(self) -> int:
        return len(self._open)

    def __contains__(self, key) -> bool:
        return key in self._open

    def add(self, key, prime: int, shape: tuple, column, upload) -> None:
        """Add one upload (its column of W) to the sums of tile ``key``, opening them."""
        acc = self._open.get(key)
        if acc is None:
            acc = self._open_tile(key, prime, shape)
        acc.add(column, upload)

    def _open_tile(self, key, prime: int, shape: tuple) -> TileAccumulator:
        nbytes = self.rows * int(np.prod(shape, dtype=np.int64)) * 4
        path = None
        if self.ram_bytes + nbytes > self.budget:
            self._serial += 1
            path = self._spill_directory() / f"tile-{self._serial}.npy"
        acc = self._open[key] = TileAccumulator(self.rows, prime, shape, path=path)
        if path is None:
            self.ram_bytes += nbytes
            self.peak_ram_bytes = max(self.peak_ram_bytes, self.ram_bytes)
        else:
            self.disk_bytes += nbytes
            self.peak_disk_bytes = max(self.peak_disk_bytes, self.disk_bytes)
        return acc

    def _spill_directory(self) -> Path:
        if self._tmpdir is None:
            self._tmpdir = Path(tempfile.mkdtemp(prefix="omnifc-open-sums-",
                                                 dir=self.directory))
            self._finalizer = weakref.finalize(self, _remove, self._tmpdir)
            logger.info("open tile sums beyond the memory budget (%d bytes) go to %s",
                        self.budget, self._tmpdir)
        return self._tmpdir

    def finish(self, key) -> np.ndarray:
        """The reduced sums of tile ``key`` (:meth:`TileAccumulator.finish`); closes it."""
        acc = self._open.pop(key)
        try:
            return acc.finish()
        finally:
            if acc.on_disk:
                self.disk_bytes -= acc.nbytes
            else:
                self.ram_bytes -= acc.nbytes
            acc.discard()
            if not self.disk_bytes:
                self._remove_directory()

    def close(self) -> None:
        """Drop every open sum, files included (an aborted or rerun round)."""
        for acc in self._open.values():
            acc.discard()
        self._open.clear()
        self.ram_bytes = self.disk_bytes = 0
        self._remove_directory()

    def _remove_directory(self) -> None:
        if self._finalizer is not None:
            self._finalizer()  # removes the directory once
            self._finalizer, self._tmpdir = None, None


@dataclass
class Findings:
    """What the checks found in one round, over every tile and prime."""

    flagged: int = 0
    uncorrectable: int = 0
    triples: set = field(default_factory=set)   # (owner index, owner index, evaluator name)

    def add(self, decoding, row_offset: int, col_offset: int, owners: np.ndarray,
            responders, *, entries=None) -> None:
        """Record a tile's :class:`~finite_field.Decoding` (global rows via the offsets,
        or ``entries(flat) -> (rows, columns)`` for a layout's tile)."""
        self.flagged += int(decoding.flagged.size)
        self.uncorrectable += int(decoding.uncorrectable.size)
        if not decoding.flagged.size:
            return
        rows_idx, slots = np.nonzero(decoding.positions >= 0)
        if not rows_idx.size:
            return
        flat = decoding.flagged[rows_idx]
        if entries is not None:
            a, b = (np.asarray(v, dtype=np.int64) for v in entries(flat))
        else:
            cols = decoding.shape[1]
            a = row_offset + flat // cols
            b = col_offset + flat % cols
        evaluators = decoding.positions[rows_idx, slots]
        owner_a = np.searchsorted(owners, a, side="right") - 1
        owner_b = np.searchsorted(owners, b, side="right") - 1
        lo, hi = np.minimum(owner_a, owner_b), np.maximum(owner_a, owner_b)
        for x, y, e in np.unique(np.stack([lo, hi, evaluators]), axis=1).T.tolist():
            self.triples.add((int(x), int(y), responders[int(e)]))

    @property
    def clean(self) -> bool:
        return self.flagged == 0


def verdict(findings: Findings, names, adversaries: int, known=()):
    """The :class:`~finite_field.Attribution` of the located errors (party names).

    ``adversaries`` is the session's declared A; ``known`` the parties excluded for
    deviating in earlier rounds (they count against A and explain what they can).
    """
    return attribute(sorted(findings.triples, key=lambda t: (t[0], t[1], t[2])), list(names),
                     adversaries=int(adversaries), known=known)
