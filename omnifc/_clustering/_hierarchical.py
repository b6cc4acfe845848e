"""Agglomerative clustering with scipy on the condensed Euclidean distances sqrt(D).

Ward, average, complete, single (and scipy's other linkages) all run on the condensed
vector of E = sqrt(D); Ward's Lance-Williams update is valid because E is Euclidean.
The tree is cut with ``fcluster(criterion="maxclust")``, which can return fewer than
``n_clusters`` clusters when merge heights tie.
"""

from __future__ import annotations

import numpy as np

from finite_field import ParameterError

__all__ = ["hierarchical", "LINKAGES"]

LINKAGES = ("ward", "average", "complete", "single", "weighted", "centroid", "median")


def hierarchical(d: np.ndarray, n_clusters: int, rng=None, *, linkage: str = "ward") -> dict:
    from scipy.cluster.hierarchy import fcluster
    from scipy.cluster.hierarchy import linkage as scipy_linkage

    if linkage not in LINKAGES:
        raise ParameterError(f"linkage must be one of {list(LINKAGES)}, got {linkage!r}")
    n = d.shape[0]
    if n == 1:
        return {"labels": np.zeros(1, dtype=np.int64), "linkage_matrix": np.zeros((0, 4))}
    condensed = np.sqrt(np.maximum(d[np.triu_indices(n, 1)], 0.0))
    tree = scipy_linkage(condensed, method=linkage)
    labels = fcluster(tree, t=n_clusters, criterion="maxclust") - 1
    return {"labels": labels, "linkage_matrix": tree}
