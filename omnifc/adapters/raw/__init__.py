"""OmniFC itself (NeurIPS 2025, arXiv 2505.13071): raw samples through secure reconstruction.

Client side: the vectors to protect are the party's raw samples (one row per sample), with
the data set's public clip bound. Server side: any centralized clustering on the exact
squared-distance matrix (:func:`omnifc.cluster`); each party gets back the labels of its own
rows. Same interface as the other adapters: client rows -> :func:`protect`-style
reconstruction -> server function on D.

What the coordinator learns beyond the distances
------------------------------------------------
Nothing beyond D (which determines the samples up to a rigid motion) and how many rows each
party holds.

Examples
--------
>>> import numpy as np
>>> from omnifc.adapters import raw
>>> parties = {"a": np.array([[0.0, 0.0], [0.1, 0.0]]), "b": np.array([[5.0, 5.0]]),
...            "c": np.array([[5.1, 5.0], [0.0, 0.1]])}
>>> out = raw.run(parties, bound=8.0, n_clusters=2, random_state=0)
>>> sorted(len(set(v.tolist())) for v in out.party_labels.values())
[1, 1, 2]
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..._secure import normalize_parties, secure_distance_matrix
from .._common import plaintext_distances, quantize_rows

__all__ = ["COORDINATOR_LEARNS", "client_rows", "cluster_samples", "RawResult", "run"]

COORDINATOR_LEARNS = "nothing beyond D (and each party's row count)"


def client_rows(samples) -> np.ndarray:
    """Client side: the rows to protect are the samples themselves (float64, (n_i, d))."""
    return np.atleast_2d(np.asarray(samples, dtype=np.float64))


def cluster_samples(distances, *, method: str = "kmeans", n_clusters=None, random_state=0,
                    **options) -> np.ndarray:
    """Server side: any clustering of :func:`omnifc.cluster` on the squared distances."""
    from ..._clustering import cluster

    return np.asarray(cluster(distances, method=method, n_clusters=n_clusters,
                              random_state=random_state, **options))


@dataclass
class RawResult:
    """Labels of all rows (party order), per party, and the distance matrix clustered."""

    labels: np.ndarray
    party_labels: dict
    distances: np.ndarray


def run(parties, *, bound: float, n_clusters=None, method: str = "kmeans",
        scale_bits: int = 16, nonnegative: bool = False, random_state=0, secure: bool = True,
        protocol_options=None, **cluster_options) -> RawResult:
    """Protect every party's samples, cluster the reconstructed D, return labels per party.

    ``secure=False`` clusters the plaintext distances of the same quantized samples (the
    reference the tests compare against).
    """
    names, arrays = normalize_parties(parties)
    rows = [client_rows(a) for a in arrays]
    if secure:
        d = secure_distance_matrix(dict(zip(names, rows)), bound=bound, scale_bits=scale_bits,
                                   nonnegative=nonnegative, **(protocol_options or {})).distances
    else:
        d = plaintext_distances(quantize_rows(np.concatenate(rows), bound=bound,
                                              scale_bits=scale_bits, nonnegative=nonnegative))
    labels = cluster_samples(d, method=method, n_clusters=n_clusters,
                             random_state=random_state, **cluster_options)
    bounds = np.cumsum([0] + [r.shape[0] for r in rows])
    per_party = {name: labels[bounds[i]:bounds[i + 1]] for i, name in enumerate(names)}
    return RawResult(labels=labels, party_labels=per_party, distances=d)
