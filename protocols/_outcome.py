"""What a finished session produced at the coordinator (:class:`Outcome`).

The coordinator (:mod:`protocols._coordinator`) builds one when the whole matrix (or sum)
is decoded and clustered; the transports return it, and ``omnifc serve`` reports it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from ._accumulator import DistanceStore

__all__ = ["Outcome"]


class Outcome:
    """What a finished session produced at the coordinator.

    Attributes
    ----------
    store : DistanceStore or None
        Distance sessions: the one integer result matrix the coordinator accumulated every
        tile into (in RAM below ``memory_budget``, else memory-mapped; at ``out`` when
        given). None for sum sessions.
    integer : ndarray of int64
        Distance sessions: the exact integer squared distances (n, n), **materialized on
        access** from :attr:`store` (an int64 copy: fine for small results; use
        ``store.integer`` for large ones). Sum sessions: the exact signed integer sum,
        shape (rows, k).
    values : ndarray of float64
        ``integer`` dequantized (distances / 4^q, or sum / 2^q); for distance sessions
        also materialized on access (``store.distances`` is the lazy, tile-wise view).
    labels : ndarray or None
        Cluster labels of every row, when a clustering callback was given.
    party_names, row_offsets, rows
        Roster order, first global row and row count of every party.
    responders : list of str
        The responding set B of the successful round.
    round : int
        The successful round (1 when nobody dropped, no deviation was excluded).
    integrity : str
        What the checks covered in the successful round ("checked: s = ..." , "unchecked:
        r = 0" or "off").
    deviations : list of dict
        Every deviation the checks detected (round, named parties, suspect sets, action
        "corrected" or "excluded", description); empty when every syndrome was zero.
    parameters : dict
        Public parameters, primes and points included.
    stats : dict of str to [seconds, bytes]
        Per phase (see :data:`PHASES`): wall-clock seconds and bytes of every message the
        coordinator received or sent.
    undelivered : dict of str to str
        Parties whose result did not reach them, each with the reason: those lost before
        the result (a dropout the session survived) and, filled in by the transport, those
        whose connection ended before they confirmed receipt (over gRPC a party confirms by
        closing its side of the stream after the result). Empty when every party got its
        result; :class:`~protocols.CoordinatorServer` and ``omnifc serve`` report it.
    memory : dict of str to int
        The coordinator's n x n memory (docs/scale.md, "Coordinator memory"):
        ``memory_budget``, ``result_ram_bytes`` (the result and residues held in RAM, 0
        when memory-mapped), ``open_sum_budget`` (what is left for open tile sums),
        ``peak_open_sum_bytes`` and ``peak_open_sum_disk_bytes`` (the most open tile sums
        held in RAM, and memory-mapped, at once, over every round; zero in rounds without
        checks, which keep no open sums). Empty for sum sessions.
    layout : str
        Which entries of D (docs/protocol.md, "Layouts"): "full" (``store``), "landmarks"
        (``integer`` and ``values`` are (n, L) arrays of D[:, landmarks]) or "pairs"
        (``integer`` and ``values`` are (P,) vectors of the distances of ``pairs``). A
        layout's ``integer`` is int32 with one prime and a bound below 2^31 (else int64),
        memory-mapped beyond ``memory_budget``; its ``values`` are computed on access.
    landmarks : ndarray of int64 (L,) or None
        The landmark rows of a "landmarks" session (column c is row ``landmarks[c]``).
    pairs : ndarray of int64 (P, 2) or None
        The global rows (i, j) of every entry of a "pairs" session, in order.
    """

    def __init__(self, integer=None, values=None, labels=None, party_names=(),
                 row_offsets=(), rows=(), responders=(), round=0, parameters=None,
                 stats=None, lost=None, integrity: str = "off", deviations=None,
                 store: DistanceStore | None = None, memory=None, layout: str = "full",
                 landmarks=None, pairs=None) -> None:
        self._integer = integer
        self._values = values
        self.store = store
        self.labels = labels
        self.party_names = list(party_names)
        self.row_offsets = list(row_offsets)
        self.rows = list(rows)
        self.responders = list(responders)
        self.round = round
        self.parameters = dict(parameters or {})
        self.stats = dict(stats or {})
        self.lost = list(lost or [])
        self.integrity = integrity
        self.deviations = list(deviations or [])
        self.memory = dict(memory or {})
        self.layout = layout
        self.landmarks = None if landmarks is None else np.array(landmarks, dtype=np.int64)
        self.pairs = None if pairs is None else np.array(pairs, dtype=np.int64)
        self.resumes = 0
        self.undelivered = {name: "lost before the result (it dropped out; the session went "
                                  "on without it)" for name in self.lost}

    @property
    def integer(self) -> np.ndarray:
        if self._integer is None and self.store is not None:
            return np.array(self.store.integer, dtype=np.int64)
        return self._integer

    @property
    def values(self) -> np.ndarray:
        if self._values is None and self.store is not None:
            return np.asarray(self.store.distances)
        if self._values is None and self._integer is not None and self.layout != "full":
            # a layout's float entries, computed on access from its integer result
            return np.asarray(self._integer) * (1.0 / 4.0 ** self.parameters["scale_bits"])
        return self._values

    def __repr__(self) -> str:
        what = self.store if self.store is not None else \
            f"sum {getattr(self._integer, 'shape', None)}"
        return (f"Outcome({what}, round={self.round}, responders={self.responders}, "
                f"integrity={self.integrity!r})")
