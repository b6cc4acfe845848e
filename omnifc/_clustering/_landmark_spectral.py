"""Landmark spectral clustering from D[:, L] alone (Chen & Cai 2011; issue 22).

"Large scale spectral clustering with landmark-based representation" (X. Chen and D. Cai,
AAAI 2011) replaces the n x n affinity of spectral clustering by a sparse representation
of every row over L landmarks, which needs exactly what a ``landmarks`` session returns:
the squared distances C = D[:, L] (n, L).

1. **Representation.** Each row i keeps its r nearest landmarks N(i) (``n_neighbors``;
   ties at the r-th distance go to the lower column) with Gaussian weights, normalized
   to sum to one:

       Z[i, j] = exp(-C[i, j] / (2 sigma^2)) / sum_{j' in N(i)} exp(-C[i, j'] / (2 sigma^2))

   for j in N(i), else 0 (computed with C[i, j] minus the row's smallest kept distance
   in the exponent, which cancels in the ratio, so no row underflows to 0/0).
   ``bandwidth="mean"`` (default): sigma = ``bandwidth_scale`` x the mean Euclidean
   distance sqrt(C[i, j]) over the kept entries (i, j in N(i)) that are not zero (a
   landmark's distance to itself, duplicates); a positive number is sigma itself.
2. **Normalization.** Ẑ = Z Λ^{-1/2}, Λ = diag(column sums of Z) (a landmark no row
   keeps is a zero column). The affinity this implies, W = Ẑ Ẑ^T (n x n, never formed),
   has every degree equal to 1, so its normalized affinity is W itself.
3. **Embedding.** The top ``n_clusters`` left singular vectors U of Ẑ: the top
   eigenvectors of W, i.e. the spectral embedding of W. Computed from the L x L matrix
   Ẑ^T Ẑ = V S^2 V^T (its top eigenpairs), U = Ẑ V S^{-1}.
4. **Labels.** k-means (scikit-learn, k-means++ seeds, ``n_init`` restarts) on the rows
   of U, as scikit-learn's ``SpectralClustering`` does on its embedding.

With every row a landmark and r = n, W is the dense affinity P Λ^{-1} P^T of the row-
normalized Gaussian kernel P = diag(K 1)^{-1} K, K = exp(-D / (2 sigma^2)), and the
embedding equals the ordinary spectral embedding of that W (up to a rotation of equal
singular values and the signs). With fewer landmarks it is Chen & Cai's approximation.

**Cost.** Besides C: O(n r) memory for Z (sparse), O(L^2) for Ẑ^T Ẑ and O(n k) for the
embedding; time O(n L) to pick the r nearest landmarks (row blocks, no n x L float copy
of C at once beyond one block), O(n r^2) to form Ẑ^T Ẑ, O(L^2 k) for its top k
eigenpairs, O(n r k) for U and O(n k^2 x iterations) for k-means. Nothing n x n.

>>> import numpy as np
>>> x = np.array([[0.0, 0.0], [0.0, 1.0], [1.0, 0.0], [9.0, 9.0], [9.0, 8.0], [8.0, 9.0]])
>>> c = ((x[:, None, :] - x[None, [0, 1, 3, 4], :]) ** 2).sum(-1)      # L = rows 0, 1, 3, 4
>>> landmark_spectral(c, [0, 1, 3, 4], 2, n_neighbors=2, random_state=0)["labels"].tolist()
[0, 0, 0, 1, 1, 1]
"""

from __future__ import annotations

import logging
import numbers
import warnings

import numpy as np

from finite_field import ParameterError

from ._common import as_generator, check_n_clusters, seed_from

__all__ = ["landmark_spectral", "landmark_representation", "DEFAULT_LANDMARK_NEIGHBORS"]

logger = logging.getLogger(__name__)

#: r, the nearest landmarks each row keeps, by default (Chen & Cai's default); at most L.
DEFAULT_LANDMARK_NEIGHBORS = 5
_BLOCK_ENTRIES = 1 << 22  # entries of C converted to float64 at once (32 MiB)


def _landmark_columns(columns, landmarks):
    """(C as given (n, L), landmarks (L,) int64), checked; C is not copied."""
    if landmarks is None:
        if getattr(columns, "landmarks", None) is None:
            raise ParameterError("landmarks are needed: pass D[:, L] and the landmark rows "
                                 "L, or a landmarks session's result")
        landmarks = columns.landmarks
        columns = columns.values if hasattr(columns, "values") else columns.distances
    c = columns if isinstance(columns, np.ndarray) else np.asarray(columns)
    index = np.asarray(landmarks)
    if c.ndim != 2 or index.ndim != 1 or c.shape[1] != index.size or not index.size:
        raise ParameterError(f"D[:, L] must have one column per landmark: got shape "
                             f"{c.shape} and {index.size} landmarks")
    if index.dtype.kind not in "iu" or index.min() < 0 or index.max() >= c.shape[0] or \
            np.unique(index).size != index.size:
        raise ParameterError(f"landmarks must be distinct row indices in [0, {c.shape[0]})")
    if c.dtype.kind not in "iuf":
        raise ParameterError(f"D[:, L] must hold numbers, got {c.dtype}")
    return c, index.astype(np.int64)


def _nearest(block: np.ndarray, r: int) -> tuple[np.ndarray, np.ndarray]:
    """Per row, the columns of its r smallest entries (ties at the r-th value to the lower
    columns), in column order, and those entries."""
    rows, width = block.shape
    if r == width:
        cols = np.broadcast_to(np.arange(width), block.shape)
        return np.array(cols), block.copy()
    kth = np.partition(block, r - 1, axis=1)[:, r - 1:r]
    less = block < kth
    ties = block == kth
    need = r - less.sum(axis=1, keepdims=True)
    keep = less | (ties & (np.cumsum(ties, axis=1) <= need))
    cols = np.nonzero(keep)[1].reshape(rows, r)
    return cols, np.take_along_axis(block, cols, axis=1)


def _check_r(n_neighbors, n_landmarks: int) -> int:
    if n_neighbors is None:
        return min(DEFAULT_LANDMARK_NEIGHBORS, n_landmarks)
    if isinstance(n_neighbors, bool) or not isinstance(n_neighbors, numbers.Integral) \
            or n_neighbors < 1:
        raise ParameterError(f"n_neighbors (r, the nearest landmarks of each row) must be a "
                             f"positive integer, got {n_neighbors!r}")
    if n_neighbors > n_landmarks:
        raise ParameterError(f"n_neighbors = {n_neighbors} nearest landmarks per row, but "
                             f"there are only L = {n_landmarks} landmarks; choose "
                             f"n_neighbors <= {n_landmarks}")
    return int(n_neighbors)


def landmark_representation(columns, landmarks=None, *, n_neighbors=None, bandwidth="mean",
                            bandwidth_scale: float = 1.0):
    """Chen & Cai's normalized representation Ẑ = Z Λ^{-1/2} of D[:, L] (steps 1 and 2).

    Returns ``(zhat, sigma, r)``: a scipy CSR matrix (n, L) with r entries per row, the
    Gaussian bandwidth and r.
    """
    from scipy import sparse

    c, index = _landmark_columns(columns, landmarks)
    n, n_landmarks = c.shape
    r = _check_r(n_neighbors, n_landmarks)
    cols = np.empty((n, r), dtype=np.int64)
    sq = np.empty((n, r), dtype=np.float64)
    step = max(1, _BLOCK_ENTRIES // n_landmarks)
    for a in range(0, n, step):
        block = np.asarray(c[a:a + step], dtype=np.float64)
        if not np.isfinite(block).all() or (block < 0).any():
            raise ParameterError("D[:, L] must hold finite squared distances >= 0")
        cols[a:a + step], sq[a:a + step] = _nearest(block, r)
    if isinstance(bandwidth, numbers.Real) and not isinstance(bandwidth, bool):
        if not bandwidth > 0:
            raise ParameterError(f"bandwidth must be positive, got {bandwidth}")
        sigma = float(bandwidth) * float(bandwidth_scale)
    elif bandwidth == "mean":
        positive = sq[sq > 0]
        if not positive.size:
            raise ParameterError("every row is at distance 0 from its nearest landmarks: no "
                                 "bandwidth can be estimated from the data; pass bandwidth=")
        sigma = float(np.sqrt(positive).mean()) * float(bandwidth_scale)
    else:
        raise ParameterError(f"bandwidth must be 'mean' or a positive number, got "
                             f"{bandwidth!r}")
    if not sigma > 0 or not np.isfinite(sigma):
        raise ParameterError(f"bandwidth must be positive and finite, got sigma = {sigma}")
    weights = np.exp(-(sq - sq.min(axis=1, keepdims=True)) / (2.0 * sigma * sigma))
    weights /= weights.sum(axis=1, keepdims=True)  # the smallest entry is exp(0) = 1
    mass = np.bincount(cols.ravel(), weights=weights.ravel(), minlength=n_landmarks)
    scale = np.zeros(n_landmarks)
    scale[mass > 0] = 1.0 / np.sqrt(mass[mass > 0])
    weights *= scale[cols]
    zhat = sparse.csr_matrix((weights.ravel(), cols.ravel(), np.arange(0, n * r + 1, r)),
                             shape=(n, n_landmarks))
    return zhat, sigma, r


def landmark_spectral(columns, landmarks=None, n_clusters: int = 8, *, n_neighbors=None,
                      bandwidth="mean", bandwidth_scale: float = 1.0, n_init: int = 10,
                      random_state=None) -> dict:
    """Landmark spectral clustering (Chen & Cai 2011) of D[:, L]: see the module text.

    Parameters
    ----------
    columns : array-like (n, L), or a landmarks session's result
        D[:, L]: column c holds the squared distances to row ``landmarks[c]``.
    landmarks : sequence of int, optional
        The landmark rows (taken from ``columns.landmarks`` when omitted).
    n_clusters : int
        k; needs at least k landmarks.
    n_neighbors : int, optional
        r, the nearest landmarks each row keeps (default min(5, L); at most L).
    bandwidth, bandwidth_scale
        sigma of the Gaussian kernel: ``"mean"`` (the mean nonzero Euclidean distance of
        the rows to their r nearest landmarks) times the scale, or a positive number.
    n_init : int
        k-means restarts on the embedding.

    Returns
    -------
    dict
        ``labels``, ``embedding`` (n, k: the top left singular vectors of Ẑ),
        ``singular_values`` (k,), ``bandwidth`` (sigma), ``n_neighbors`` (r),
        ``inertia`` (of k-means on the embedding).
    """
    from scipy.linalg import eigh
    from sklearn.cluster import KMeans

    c, index = _landmark_columns(columns, landmarks)
    n, n_landmarks = c.shape
    k = check_n_clusters(n_clusters, n)
    if n_landmarks < k:
        raise ParameterError(f"landmark spectral clustering into n_clusters = {k} clusters "
                             f"needs at least {k} landmarks, got L = {n_landmarks}")
    rng = as_generator(random_state)
    zhat, sigma, r = landmark_representation(c, index, n_neighbors=n_neighbors,
                                             bandwidth=bandwidth,
                                             bandwidth_scale=bandwidth_scale)
    gram = (zhat.T @ zhat).toarray()
    values, vectors = eigh((gram + gram.T) / 2, subset_by_index=[n_landmarks - k,
                                                                  n_landmarks - 1])
    values, vectors = values[::-1], vectors[:, ::-1]
    tolerance = n_landmarks * np.finfo(np.float64).eps * max(values[0], 1.0) * 16
    if values[-1] <= tolerance:
        rank = int((values > tolerance).sum())
        raise ParameterError(f"the landmark representation has rank {rank} < n_clusters = "
                             f"{k} (too few landmarks are any row's nearest: raise "
                             "n_neighbors or the number of landmarks)")
    singular = np.sqrt(values)
    embedding = (zhat @ vectors) / singular
    if k == 1:
        labels, inertia = np.zeros(n, dtype=np.int64), 0.0
    else:
        model = KMeans(n_clusters=k, n_init=int(n_init), random_state=seed_from(rng))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # ConvergenceWarning on duplicate points
            model.fit(embedding)
        labels, inertia = model.labels_.astype(np.int64), float(model.inertia_)
    logger.debug("landmark spectral: n = %d, L = %d, r = %d, sigma = %.6g, singular values "
                 "%s", n, n_landmarks, r, sigma, np.round(singular, 6).tolist())
    return {"labels": labels, "embedding": embedding, "singular_values": singular,
            "bandwidth": sigma, "n_neighbors": r, "inertia": inertia}
