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
    distances : ndarray of float64, shape (n, n)
        Squared Euclidean distances of the quantized rows in real units (D / 4^q).
    integer_distances : ndarray of int64, shape (n, n)
        The exact integer squared distances of the quantized rows.
    party_names : list of str
        Parties in the order their rows appear.
    owners : ndarray of int, shape (n,)
        ``owners[r]`` is the index (into ``party_names``) of the party that holds row r.
    parameters : dict
        The public parameters (see :meth:`finite_field.CodingPlan.describe`) plus mode,
        transport and the responding parties.
    stats : dict of str to PhaseStats
        Per-phase seconds and bytes sent.
    clipped : dict of str to int
        Per party, how many entries were clipped to the public bound.
    clipped_fraction : dict of str to float
        Per party, the clipped entries as a fraction of the party's entries.
    labels : ndarray of int, optional
        Cluster labels in global row order when the coordinator ran a clustering
        (``secure_distance_matrix(..., cluster=...)``); each party received its own rows'.
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
