"""k-means from D[:, L] alone: landmark (Nyström) MDS, then Lloyd (issue 22).

A ``landmarks`` session returns the squared distances from every row to L landmark rows,
``C = D[:, L]`` (n, L); its rows ``C[L]`` are D[L, L]. Landmark MDS (de Silva & Tenenbaum,
2004; the Nyström extension of classical MDS, Platt 2005):

1. classical MDS of the landmarks: B = -1/2 J D[L, L] J = V Λ V^T (positive eigenvalues);
2. every row x from its distances δ_x = C[x] to the landmarks:

       y_x = 1/2 Λ^{-1/2} V^T (μ - δ_x),   μ = the column means of D[L, L].

For a landmark this is its classical-MDS coordinate V Λ^{1/2}; for Euclidean data whose
landmarks affinely span the data (in general position, L >= rank + 1) every y_x is exact:
the embedding is isometric to the rows, so k-means on it is k-means on the data. With fewer
landmarks it is the projection onto their affine hull (Nyström). The seeds are chosen by
k-means++ on the embedding's squared distances, read a row at a time (never n x n), with
the rule and random stream of :func:`~omnifc._clustering._common.kmeans_plusplus_indices`:
with the landmark set = all rows, the seeds and labels are those of the exact k-means
(``omnifc.cluster(D, "kmeans")`` before its canonical row order).

>>> import numpy as np
>>> x = np.array([[0.0, 0.0], [0.0, 1.0], [5.0, 5.0], [5.0, 6.0], [1.0, 0.0]])
>>> c = ((x[:, None, :] - x[None, [0, 2, 3], :]) ** 2).sum(-1)      # D[:, L], L = 0, 2, 3
>>> landmark_kmeans(c, [0, 2, 3], 2, random_state=0)["labels"].tolist()
[0, 0, 1, 1, 0]
"""

from __future__ import annotations

import numpy as np

from finite_field import ParameterError

from ._common import as_generator, check_n_clusters, kmeans_plusplus_indices
from ._kmeans import best_lloyd

__all__ = ["landmark_mds", "landmark_kmeans"]


#: Bytes of float64 D[:, L] rows read at once by the streamed embedding.
BLOCK_BYTES = 32 * 2**20


class _Columns:
    """D[:, L] read a row block at a time as float64 (never all n x L floats at once).

    The source is an (n, L) array (dense, or a ``numpy.memmap``), or a landmarks
    session's result: a ``LandmarkDistances`` (its exact ``integer`` entries and their
    scale ``4^q``, so the floats are made block by block) or an ``omnifc.DistanceResult``
    (``distances`` and ``landmarks``).
    """

    def __init__(self, columns, landmarks) -> None:
        self.factor = 1.0
        if landmarks is None:
            if getattr(columns, "landmarks", None) is None:
                raise ParameterError("landmarks are needed: pass D[:, L] and the landmark "
                                     "rows L, or a landmarks session's result")
            landmarks = columns.landmarks
            if getattr(columns, "scale_bits", None) is not None and \
                    getattr(columns, "integer", None) is not None:  # LandmarkDistances
                self.factor = 1.0 / float(4 ** int(columns.scale_bits))
                columns = columns.integer
            else:  # values (a LandmarkDistances of floats) or an omnifc DistanceResult
                columns = columns.values if hasattr(columns, "values") else columns.distances
        if not hasattr(columns, "shape") or not hasattr(columns, "__getitem__"):
            columns = np.asarray(columns, dtype=np.float64)
        self.source = columns
        index = np.asarray(landmarks)
        shape = tuple(columns.shape)
        if len(shape) != 2 or index.ndim != 1 or shape[1] != index.size or not index.size:
            raise ParameterError(f"D[:, L] must have one column per landmark: got shape "
                                 f"{shape} and {index.size} landmarks")
        if index.dtype.kind not in "iu" or index.min() < 0 or index.max() >= shape[0] or \
                np.unique(index).size != index.size:
            raise ParameterError(f"landmarks must be distinct row indices in [0, {shape[0]})")
        self.shape = shape
        self.index = index.astype(np.int64)
        self.step = max(1, BLOCK_BYTES // (8 * shape[1]))

    def _checked(self, block) -> np.ndarray:
        c = np.asarray(block, dtype=np.float64)
        if self.factor != 1.0:
            c = c * self.factor
        if not np.isfinite(c).all() or (c < 0).any():
            raise ParameterError("D[:, L] must hold finite squared distances >= 0")
        return c

    def raw_rows(self, start: int, stop: int) -> np.ndarray:
        """Rows [start, stop) as stored, unscaled (x ``factor`` gives the distances):
        integers are checked (>= 0) without a float copy; floats as in :meth:`rows`."""
        block = np.asarray(self.source[start:stop])
        if block.dtype.kind in "iu":
            if block.size and block.min() < 0:
                raise ParameterError("D[:, L] must hold finite squared distances >= 0")
            return block
        c = np.asarray(block, dtype=np.float64)
        if not np.isfinite(c).all() or (c < 0).any():
            raise ParameterError("D[:, L] must hold finite squared distances >= 0")
        return c

    def rows(self, start: int, stop: int) -> np.ndarray:
        return self._checked(self.source[start:stop])

    def take(self, indices) -> np.ndarray:
        return self._checked(self.source[np.asarray(indices, dtype=np.int64)])

    def blocks(self):
        """(start, stop, float64 rows) for every row block, in order."""
        n = self.shape[0]
        for a in range(0, n, self.step):
            b = min(n, a + self.step)
            yield a, b, self.rows(a, b)

    def dense(self) -> np.ndarray:
        return np.concatenate([block for _, _, block in self.blocks()]) if self.shape[0] \
            else np.empty(self.shape)


def _columns(columns, landmarks):
    """(C as float64 (n, L), landmarks as int64 (L,)): the whole of D[:, L] in RAM (for
    callers that need it; the embedding itself streams :class:`_Columns`)."""
    reader = _Columns(columns, landmarks)
    return reader.dense(), reader.index


def landmark_mds(columns, landmarks=None, n_components: int | None = None) -> np.ndarray:
    """Coordinates (n, k) of every row from its squared distances to the landmarks.

    D[:, L] is read one row block at a time (``BLOCK_BYTES`` of float64), so besides the
    (n, k) result only one block and the L x L landmark block are held: with an (n, L)
    integer result memory-mapped on disk this is out of core.

    Parameters
    ----------
    columns : array-like (n, L), or a landmarks session's result
        D[:, L]: column c holds the squared distances to row ``landmarks[c]``.
    landmarks : sequence of int, optional
        The landmark rows (taken from ``columns.landmarks`` when omitted).
    n_components : int, optional
        Keep the top k directions (default: every positive eigenvalue of the landmarks'
        classical MDS).
    """
    reader = _Columns(columns, landmarks)
    index = reader.index
    block = reader.take(index)
    block = (block + block.T) / 2
    mean = block.mean(axis=0)
    centered = block - mean[None, :]
    centered -= centered.mean(axis=1, keepdims=True)
    values, vectors = np.linalg.eigh(-0.5 * centered)
    order = np.argsort(values)[::-1]
    values, vectors = values[order], vectors[:, order]
    tolerance = max(index.size, 1) * np.finfo(np.float64).eps * max(abs(values[0]), 1.0) * 16
    keep = values > tolerance
    if n_components is not None:
        keep[int(n_components):] = False
    n = reader.shape[0]
    if not keep.any():
        for _ in reader.blocks():  # still every entry checked
            pass
        return np.zeros((n, 1))
    weights = vectors[:, keep] / np.sqrt(values[keep])
    # y = 1/2 (mean - factor * raw) W = 1/2 mean W + raw (-factor/2 W): one GEMM per block
    # on the stored values (an integer block is converted once, inside the product)
    offset = 0.5 * (mean @ weights)
    scaled = weights * (-0.5 * reader.factor)
    out = np.empty((n, int(keep.sum())), dtype=np.float64)
    for a in range(0, n, reader.step):
        b = min(n, a + reader.step)
        np.matmul(reader.raw_rows(a, b), scaled, out=out[a:b])
        out[a:b] += offset
    return out


class _EmbeddedRows:
    """Rows of the squared-distance matrix of an embedding, computed on demand."""

    def __init__(self, points: np.ndarray) -> None:
        self.points = points
        self.norms = np.einsum("ij,ij->i", points, points)
        self.shape = (points.shape[0], points.shape[0])

    def take_rows(self, indices) -> np.ndarray:
        indices = np.asarray(indices, dtype=np.int64)
        rows = self.norms[indices, None] + self.norms[None, :] \
            - 2.0 * self.points[indices] @ self.points.T
        return np.maximum(rows, 0.0)

    def __getitem__(self, index):
        if isinstance(index, (int, np.integer)):
            return self.take_rows([index])[0]
        return self.take_rows(index)


def landmark_kmeans(columns, landmarks=None, n_clusters: int = 8, *, random_state=None,
                    n_init: int = 10, max_iter: int = 300, tol: float = 0.0,
                    n_components: int | None = None) -> dict:
    """k-means on the landmark-MDS coordinates of D[:, L]; best of ``n_init`` seedings.

    The embedding streams D[:, L] by row blocks (:func:`landmark_mds`); the seeding reads
    rows of the embedding's squared distances one candidate set at a time; Lloyd runs on
    the (n, k) embedding. ``n_components`` keeps the top k directions (default all: with
    L landmarks up to L - 1 of them, so at n = 1,000,000 and L = 1,000 an (n, k) float64
    embedding of up to 8 GB; 64 keeps it at 0.5 GB).

    Returns a dict like ``omnifc.cluster(..., return_details=True)``: ``labels``,
    ``init_indices`` (rows), ``inertia``, ``cluster_centers``, ``embedding``, ``n_iter``.

    >>> import numpy as np
    >>> x = np.array([[0.0], [1.0], [9.0], [10.0]])
    >>> c = (x - x[[0, 3]].T) ** 2                        # D[:, L], L = rows 0 and 3
    >>> landmark_kmeans(c, [0, 3], 2, random_state=0, n_init=1)["labels"].tolist() in (
    ...     [0, 0, 1, 1], [1, 1, 0, 0])
    True
    """
    embedding = landmark_mds(columns, landmarks, n_components)
    n_clusters = check_n_clusters(n_clusters, embedding.shape[0])
    rng = as_generator(random_state)
    rows = _EmbeddedRows(embedding)
    seed_sets = [kmeans_plusplus_indices(rows, n_clusters, rng) for _ in range(int(n_init))]
    return best_lloyd(embedding, seed_sets, n_clusters, max_iter=max_iter, tol=tol)


_OPTIONS = {"kmeans": ("n_init", "max_iter", "tol", "n_components"),
            "spectral": ("n_neighbors", "bandwidth", "bandwidth_scale", "n_init")}
#: The methods a ``landmarks`` result supports.
LANDMARK_METHODS = tuple(_OPTIONS)


def _by_first_appearance(raw) -> tuple:
    """Labels renumbered in order of first appearance, and the old label of each new one."""
    raw = np.asarray(raw)
    _, first = np.unique(raw, return_index=True)
    old = raw[np.sort(first)]
    mapping = np.empty(int(raw.max()) + 1, dtype=np.int64)
    mapping[old] = np.arange(old.size)
    return mapping[raw], old


def fit_layout(result, method: str, n_clusters=None, *, random_state=None,
               **options) -> dict:
    """:func:`omnifc.cluster` on a layout's result (what ``fit_method`` hands over).

    A ``landmarks`` result (D[:, L] with its landmarks) supports ``"kmeans"``: k-means on
    the landmark-MDS coordinates (:func:`landmark_kmeans`), and ``"spectral"``: landmark
    spectral clustering (Chen & Cai 2011,
    :func:`~omnifc._clustering._landmark_spectral.landmark_spectral`), both in the rows'
    own order (there is no full D to put them in canonical order); labels renumbered by
    first appearance. Every other method, and a ``pairs`` result, raise
    :class:`ParameterError`.
    """
    if getattr(result, "pairs", None) is not None:
        raise ParameterError("the result of a 'pairs' session holds listed entries of D, "
                             "not every distance a clustering method needs; cluster a "
                             "'landmarks' or 'full' session's result")
    if method not in _OPTIONS:
        raise ParameterError(f"the result of a 'landmarks' session (D[:, L]) supports "
                             f"methods 'kmeans' (landmark MDS, then Lloyd) and 'spectral' "
                             f"(landmark spectral clustering); method {method!r} needs "
                             f"the full D (layout = 'full')")
    if n_clusters is None:
        raise ParameterError(f"method {method!r} needs n_clusters")
    unknown = sorted(set(options) - set(_OPTIONS[method]))
    if unknown:
        raise ParameterError(f"{method} on landmarks does not take option(s) {unknown}; it "
                             f"takes {list(_OPTIONS[method])}")
    if method == "spectral":
        from ._landmark_spectral import landmark_spectral

        details = landmark_spectral(result, n_clusters=n_clusters,
                                    random_state=random_state, **options)
        details["labels"], _ = _by_first_appearance(details["labels"])
        return details
    details = landmark_kmeans(result, n_clusters=n_clusters, random_state=random_state,
                              **options)
    details["labels"], old = _by_first_appearance(details["labels"])
    for key in ("cluster_centers", "init_indices"):
        details[key] = np.asarray(details[key])[old]
    return details
