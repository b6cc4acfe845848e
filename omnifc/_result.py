"""The result of a secure distance reconstruction."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

__all__ = ["DistanceResult", "PhaseStats"]


@dataclass
class PhaseStats:
    """Wall-clock seconds and bytes sent in one protocol phase."""

    seconds: float = 0.0
    bytes_sent: int = 0


@dataclass
class DistanceResult:
    """What :func:`omnifc.secure_distance_matrix` returns.

    Attributes
    ----------
    distances : ndarray of float64 or TiledDistances, shape (n, n)
        Squared Euclidean distances of the quantized rows in real units (D / 4^q). For a
        result held in a :class:`~omnifc.DistanceStore` (:meth:`from_store`), a lazy
        :class:`~omnifc.TiledDistances` view computed on access, never a second copy.
    integer_distances : ndarray (or numpy.memmap) of int64 or int32, shape (n, n)
        The exact integer squared distances of the quantized rows.
    party_names : list of str
        Parties in the order their rows appear.
    owners : ndarray of int, shape (n,)
        ``owners[r]`` is the index (into ``party_names``) of the party that holds row r.
    parameters : dict
        The public parameters (see :meth:`finite_field.CodingPlan.describe`) plus mode,
        transport and the responding parties; ``"undelivered"``: the parties that did not
        confirm receiving the result (over gRPC), with the reason (D itself is whole).
    stats : dict of str to PhaseStats
        Per-phase seconds and bytes sent.
    clipped : dict of str to int
        Per party, how many entries were clipped to the public bound.
    clipped_fraction : dict of str to float
        Per party, the clipped entries as a fraction of the party's entries.
    labels : ndarray of int, optional
        Cluster labels in global row order when the coordinator ran a clustering
        (``secure_distance_matrix(..., cluster=...)``); each party received its own rows'.
    store : DistanceStore, optional
        The one integer matrix (in RAM or memory-mapped) behind ``integer_distances`` and
        ``distances`` when the result was built out of core.
    layout : str
        Which entries of D were computed (docs/protocol.md, "Layouts"): "full" (the
        shapes above), "landmarks" (``distances`` and ``integer_distances`` are (n, L)
        arrays of D[:, landmarks]) or "pairs" ((P,) vectors of the distances of
        ``pairs``).
    landmarks : ndarray of int64 (L,), optional
        The landmark rows of a "landmarks" result: column c is row ``landmarks[c]``.
    pairs : ndarray of int64 (P, 2), optional
        The global rows (i, j) of every entry of a "pairs" result.
    """

    distances: np.ndarray
    integer_distances: np.ndarray
    party_names: list
    owners: np.ndarray
    parameters: dict
    stats: dict = field(default_factory=dict)
    clipped: dict = field(default_factory=dict)
    labels: np.ndarray | None = None
    clipped_fraction: dict = field(default_factory=dict)
    store: object = None
    layout: str = "full"
    landmarks: np.ndarray | None = None
    pairs: np.ndarray | None = None

    @classmethod
    def from_store(cls, store, *, party_names=None, owners=None, parameters=None,
                   **fields) -> "DistanceResult":
        """A result over a :class:`~omnifc.DistanceStore`: ``distances`` is its lazy float
        view and ``integer_distances`` its integer matrix (no copy).

        >>> import numpy as np, omnifc
        >>> store = omnifc.plaintext_distance_store(np.array([[0, 0], [0, 2]]), scale_bits=1)
        >>> result = DistanceResult.from_store(store)
        >>> float(result.distances[0, 1]), int(result.integer_distances[0, 1])
        (1.0, 4)
        """
        n = store.n
        names = list(party_names) if party_names is not None else ["party-0"]
        owners = np.zeros(n, dtype=np.int64) if owners is None else np.asarray(owners)
        return cls(distances=store.distances, integer_distances=store.integer,
                   party_names=names, owners=owners,
                   parameters=dict(store.parameters if parameters is None else parameters),
                   store=store, **fields)

    def rows_of(self, party) -> np.ndarray:
        """Global row indices of one party (by name or index)."""
        if isinstance(party, (int, np.integer)) and not isinstance(party, bool):
            index = int(party)
        else:
            index = self.party_names.index(party)
        return np.flatnonzero(self.owners == index)

    def total_seconds(self) -> float:
        return sum(s.seconds for s in self.stats.values())

    def total_bytes(self) -> int:
        return sum(s.bytes_sent for s in self.stats.values())
