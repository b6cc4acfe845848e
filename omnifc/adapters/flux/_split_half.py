"""FLUX's noise read from D alone: split-half descriptors (issue 24, thirteenth pass).

Every client computes, beside its descriptor ``F_i``, the descriptors ``A_i`` and ``B_i`` of
two disjoint random halves of its rows. The coordinator gets one secure D of the 3n rows
``[A; B; F]`` and nothing else; from it alone (:func:`split_whitened_distances`) it embeds
the rows by classical MDS, takes the descriptors' noise covariance from the within-client
differences ``A_i - B_i`` (shrunk by OAS: Chen, Wiesel, Eldar & Hero 2010, as
:func:`~omnifc.adapters.flux.noise_whitening`), and returns the squared distances of the
full descriptors whitened by it. Unlike ``normalization="whitened"`` no pooled noise is
revealed and nothing depends on the coordinator's word: a coordinator that lies only spoils
its own clustering. What it learns beyond the n x n D: the distances among the 3n rows, so
each client's half-to-half distance (a measure of its own sampling noise).

Judged against the default on fresh seeds 3293-3304 in floating point
(``benchmarks/_flux_split_half.py``, docs/adapters.md, "The noise read from D alone"); this
is its secure path (``run_flux(normalization="split")``), ``run_flux``'s default since issue
24's fourteenth pass (``flux.SPLIT_MIN_P_RECIPE``, judged on fresh seeds 3317-3328 and
5303-5314).

>>> import numpy as np
>>> rng = np.random.default_rng(0)
>>> f = rng.normal(size=(6, 3)) * [5.0, 1.0, 1.0]
>>> a, b = f + rng.normal(size=(6, 3)), f + rng.normal(size=(6, 3))
>>> rows = np.vstack([a, b, f])
>>> d = ((rows[:, None] - rows[None]) ** 2).sum(-1)
>>> split_whitened_distances(d, 6).shape
(6, 6)
"""

from __future__ import annotations

import numpy as np

from finite_field import InputError, ParameterError

from .._calibrated_k import mds_embedding
from ._paper import DEFAULT_DESCRIPTOR_FORM, descriptor

__all__ = ["split_descriptors", "split_rows", "split_whitened_distances"]


def split_descriptors(latents, labels, projection, n_classes: int, *, form: str,
                      rng) -> tuple[np.ndarray, np.ndarray]:
    """``(A, B)``: per client, the descriptors (:func:`descriptor` of ``form``) of two
    disjoint halves of its rows, of ``floor(m / 2)`` and ``ceil(m / 2)`` rows, split by
    ``rng`` (a ``numpy.random.Generator``; client side, each client its own split).

    >>> import numpy as np
    >>> from sklearn.decomposition import PCA
    >>> z = [np.random.default_rng(1).random((5, 4))]
    >>> proj = PCA(2).fit(np.random.default_rng(2).random((20, 4)))
    >>> a, b = split_descriptors(z, [np.array([0, 1, 0, 1, 1])], proj, 2, form="weighted_all",
    ...                          rng=np.random.default_rng(3))
    >>> a.shape == b.shape == (1, 12)
    True
    """
    a, b = [], []
    for z, y in zip(latents, labels):
        z, y = np.asarray(z), np.asarray(y)
        if len(z) < 2:
            raise InputError(f"a client needs at least 2 rows to split (run_flux's default, "
                             f"normalization='split'), has {len(z)}")
        order = rng.permutation(len(z))
        half = len(z) // 2
        for out, rows in ((a, order[:half]), (b, order[half:])):
            out.append(descriptor(z[rows], y[rows], projection, n_classes, form=form))
    return np.stack(a), np.stack(b)


def split_rows(latents, labels, projection, n_classes: int, *,
               form: str = DEFAULT_DESCRIPTOR_FORM, rng=None) -> np.ndarray:
    """One client's rows of the split D: ``[A; B; F]`` (3 x p), the descriptors of two
    disjoint random halves of its rows (:func:`split_descriptors`) and of all of them
    (:func:`~omnifc.adapters.flux.descriptor`). What a node sends for the Flower embedding
    ``embedding("flux")`` (its rows function returns this). ``rng``: the split's generator
    (fresh OS entropy when None; seed it only to reproduce a run).

    >>> import numpy as np
    >>> from sklearn.decomposition import PCA
    >>> z = np.random.default_rng(1).random((6, 4))
    >>> proj = PCA(2).fit(np.random.default_rng(2).random((20, 4)))
    >>> rows = split_rows(z, [0, 1, 0, 1, 1, 0], proj, 2, rng=np.random.default_rng(3))
    >>> rows.shape, bool(np.array_equal(rows[2], descriptor(z, [0, 1, 0, 1, 1, 0], proj, 2)))
    ((3, 12), True)
    """
    rng = np.random.default_rng() if rng is None else rng
    (a,), (b,) = split_descriptors([latents], [labels], projection, n_classes, form=form,
                                   rng=rng)
    return np.stack([a, b, descriptor(latents, labels, projection, n_classes, form=form)])


def squared_distances(x) -> np.ndarray:
    """Squared Euclidean distances between the rows of ``x`` (float64, negatives of
    rounding set to 0)."""
    x = np.asarray(x, dtype=np.float64)
    g = x @ x.T
    d = np.diag(g)
    return np.maximum(d[:, None] + d[None] - 2.0 * g, 0.0)


def split_whitened_distances(distances, n: int, *, order: str = "stacked") -> np.ndarray:
    """The coordinator's computation, from D only: ``distances`` is the squared-distance
    matrix of ``[A; B; F]`` (3n rows: ``F`` is whitened) or of ``[A; B]`` (2n rows: the
    midpoints ``(A + B) / 2`` are). Returns the n x n squared distances of the whitened
    points: the noise covariance is the OAS-shrunk covariance of ``A_i - B_i`` in D's MDS
    embedding (directions with no noise floored at 1e-12 of the largest variance).
    ``order="client"``: the rows come client by client instead (``A_0, B_0, F_0, A_1, ...``:
    a session over the nodes' :func:`split_rows`)."""
    d = np.asarray(distances, dtype=np.float64)
    n = int(n)
    if order not in ("stacked", "client"):
        raise ParameterError(f"order must be 'stacked' or 'client', got {order!r}")
    if n < 2 or d.shape not in ((2 * n, 2 * n), (3 * n, 3 * n)):
        raise ParameterError(f"D must be 2n x 2n or 3n x 3n for n >= 2 clients (n = {n}), "
                             f"got shape {d.shape}")
    if order == "client":        # row k * n + i of the stacked order is row i * r + k
        r = d.shape[0] // n
        stacked = (np.arange(n)[None, :] * r + np.arange(r)[:, None]).ravel()
        d = d[np.ix_(stacked, stacked)]
    x = mds_embedding(d)[0]
    points = (x[:n] + x[n:2 * n]) / 2.0 if d.shape[0] == 2 * n else x[2 * n:]
    return oas_whitened_distances(x[:n] - x[n:2 * n], points)


def oas_whitened_distances(noise_rows, points) -> np.ndarray:
    """Squared distances between ``points`` whitened by the OAS-shrunk covariance of the
    zero-mean ``noise_rows`` (directions with no noise floored at 1e-12 of the largest
    variance): the coordinator's last step in :func:`split_whitened_distances`."""
    from sklearn.covariance import oas

    noise, _ = oas(noise_rows, assume_centered=True)
    values, vectors = np.linalg.eigh(noise)
    values = np.maximum(values, values.max() * 1e-12)
    return squared_distances(np.asarray(points) @ vectors / np.sqrt(values))
