"""Agglomerative clustering with scipy on the condensed Euclidean distances sqrt(D).

Ward, average, complete, single (and scipy's other linkages) all run on the condensed
vector of E = sqrt(D); Ward's Lance-Williams update is valid because E is Euclidean.
The tree is cut with ``fcluster(criterion="maxclust")``, which can return fewer than
``n_clusters`` clusters when merge heights tie.
"""

from __future__ import annotations

import numpy as np

from finite_field import ParameterError

from .._geometry import check_distance_matrix, to_euclidean

__all__ = ["hierarchical", "LINKAGES", "ward_from_distances", "average_linkage_labels"]

LINKAGES = ("ward", "average", "complete", "single", "weighted", "centroid", "median")


def hierarchical(distances: np.ndarray, n_clusters: int, rng=None, *,
                 linkage: str = "ward") -> dict:
    from scipy.cluster.hierarchy import fcluster
    from scipy.cluster.hierarchy import linkage as scipy_linkage

    if linkage not in LINKAGES:
        raise ParameterError(f"linkage must be one of {list(LINKAGES)}, got {linkage!r}")
    n = distances.shape[0]
    if n == 1:
        return {"labels": np.zeros(1, dtype=np.int64), "linkage_matrix": np.zeros((0, 4))}
    condensed = to_euclidean(distances[np.triu_indices(n, 1)])
    tree = scipy_linkage(condensed, method=linkage)
    labels = fcluster(tree, t=n_clusters, criterion="maxclust") - 1
    return {"labels": labels, "linkage_matrix": tree}


# The adapters' Ward and average linkage (moved from omnifc/adapters/_common.py and fmcl.py).
# ward_from_distances cuts with cut_tree (exactly n_clusters clusters, numbered by first
# appearance) where hierarchical uses fcluster(maxclust), which can return fewer on ties;
# average_linkage_labels runs scikit-learn on d itself where hierarchical runs scipy on
# sqrt(d). The adapters keep their paper's behaviour, omnifc.cluster keeps its own.

def ward_from_distances(distances, n_clusters: int) -> np.ndarray:
    """Ward agglomerative clustering cut at ``n_clusters``, from squared distances.

    scipy's ward linkage on the condensed Euclidean distances (Lance-Williams update) is
    the same tree sklearn's ``AgglomerativeClustering(linkage="ward")`` builds from vectors.
    """
    from scipy.cluster.hierarchy import cut_tree, linkage
    from scipy.spatial.distance import squareform

    e = to_euclidean(check_distance_matrix(distances))
    n = e.shape[0]
    if n == 1:
        return np.zeros(1, dtype=np.int64)
    z = linkage(squareform(e, checks=False), method="ward")
    return cut_tree(z, n_clusters=int(n_clusters)).ravel().astype(np.int64)


def average_linkage_labels(distances, k):
    """Average-linkage agglomerative labels of a precomputed dissimilarity ``d`` (used as is,
    not square-rooted: FMCL's distance), scikit-learn's ``AgglomerativeClustering``."""
    from sklearn.cluster import AgglomerativeClustering

    if k == 1:
        return np.zeros(distances.shape[0], dtype=np.int64)
    model = AgglomerativeClustering(n_clusters=k, metric="precomputed", linkage="average")
    return model.fit_predict(distances).astype(np.int64)
