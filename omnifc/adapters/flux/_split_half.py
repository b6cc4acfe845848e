"""FLUX's noise read from D alone: split descriptors (issue 24, thirteenth and twenty-second
passes).

Every client computes, beside its descriptor ``F_i``, the descriptors ``G_i0, ...,
G_i(k-1)`` of its rows without each of ``k`` disjoint random groups (the delete-a-group
jackknife, Efron & Stein 1981; at ``k = 2`` the descriptors ``A_i`` and ``B_i`` of two
halves of its rows). The coordinator gets one secure D of the ``(k + 1) n`` rows
``[G_0; ...; G_{k-1}; F]`` and nothing else; from it alone
(:func:`split_whitened_distances`) it embeds the rows by classical MDS, takes the
descriptors' noise covariance from the within-client contrasts of the ``G`` (``A_i - B_i``
at ``k = 2``; shrunk by OAS: Chen, Wiesel, Eldar & Hero 2010, as
:func:`~omnifc.adapters.flux.noise_whitening`), and returns the squared distances of the
full descriptors whitened by it. Unlike ``normalization="whitened"`` no pooled noise is
revealed and nothing depends on the coordinator's word: a coordinator that lies only spoils
its own clustering. What it learns beyond the n x n D: the distances among the ``(k + 1) n``
rows, so per client the geometry (up to a rotation) of how leaving out each group moves its
descriptor; at ``k = 2``, its half-to-half distance. With groups of one row (``k`` = the
client's rows) that is the geometry of its rows' own contributions: the price of the
better noise estimate, stated in docs/adapters.md ("What the coordinator learns").

The halves were judged against the then default on fresh seeds 3293-3304 in floating point
(``benchmarks/_flux_split_half.py``, docs/adapters.md, "The noise read from D alone") and
were ``run_flux``'s default from issue 24's fourteenth pass (``flux.SPLIT_MIN_P_RECIPE``,
judged on fresh seeds 3317-3328 and 5303-5314); ``k = 10`` (``flux.SPLIT_GROUPS_RECIPE``)
since the twenty-second (judged on fresh seeds 3433-3438 and 5315-5326).

>>> import numpy as np
>>> rng = np.random.default_rng(0)
>>> f = rng.normal(size=(6, 3)) * [5.0, 1.0, 1.0]
>>> a, b = f + rng.normal(size=(6, 3)), f + rng.normal(size=(6, 3))
>>> rows = np.vstack([a, b, f])
>>> d = ((rows[:, None] - rows[None]) ** 2).sum(-1)
>>> split_whitened_distances(d, 6, groups=2).shape
(6, 6)
"""

from __future__ import annotations

import logging

import numpy as np

from finite_field import InputError, ParameterError

from .._calibrated_k import mds_embedding
from ._paper import DEFAULT_DESCRIPTOR_FORM, DEFAULT_SPLIT_GROUPS, descriptor

logger = logging.getLogger(__name__)

__all__ = ["SECOND_TESTS", "cluster_split_clients", "second_test_for", "split_descriptors",
           "split_rows", "split_whitened_distances"]

#: The second tests of the rule on the split D: FLUX's spiked-null test
#: (:mod:`omnifc.adapters.flux._spiked_null`), asked where the rule answers one cluster, or
#: none.
SECOND_TESTS = ("spiked", "none")


def split_descriptors(latents, labels, projection, n_classes: int, *, form: str, rng,
                      groups: int = DEFAULT_SPLIT_GROUPS) -> tuple[np.ndarray, ...]:
    """``(G_0, ..., G_{k-1})`` (``k = groups``, each ``n x p``): per client, the
    descriptors (:func:`descriptor` of ``form``) of its rows without each of ``k`` random
    disjoint groups (the delete-a-group jackknife; Efron & Stein 1981). ``rng`` (a
    ``numpy.random.Generator``; client side, each client its own split) permutes a client's
    ``m`` rows; the permutation is cut into ``k`` consecutive pieces, the larger ones last
    (``m // k`` rows, or one more), and ``G_j`` leaves out piece ``k - 1 - j``. At ``k = 2``
    these are the split halves ``(A, B)``: ``A`` the permutation's first ``floor(m / 2)``
    rows, ``B`` the rest. Every client needs at least ``k`` rows.

    >>> import numpy as np
    >>> from sklearn.decomposition import PCA
    >>> z = [np.random.default_rng(1).random((5, 4))]
    >>> proj = PCA(2).fit(np.random.default_rng(2).random((20, 4)))
    >>> a, b = split_descriptors(z, [np.array([0, 1, 0, 1, 1])], proj, 2, form="weighted_all",
    ...                          rng=np.random.default_rng(3), groups=2)
    >>> a.shape == b.shape == (1, 12)
    True
    """
    k = split_group_count(groups)
    out = [[] for _ in range(k)]
    for z, y in zip(latents, labels):
        z, y = np.asarray(z), np.asarray(y)
        if len(z) < k:
            raise InputError(f"a client needs at least {k} rows to leave out {k} groups "
                             f"(normalization='split', split_groups={k}), has {len(z)}")
        order = rng.permutation(len(z))
        sizes = np.full(k, len(z) // k)
        sizes[k - len(z) % k:] += 1                      # the larger pieces last
        pieces = np.split(order, np.cumsum(sizes)[:-1])
        for j in range(k):
            left = k - 1 - j
            rows = np.concatenate(pieces[:left] + pieces[left + 1:])
            out[j].append(descriptor(z[rows], y[rows], projection, n_classes, form=form))
    return tuple(np.stack(g) for g in out)


def split_group_count(groups) -> int:
    """``groups`` (the number of groups a client leaves out in turn) as an int >= 2, or
    ``ParameterError``."""
    if isinstance(groups, bool) or not isinstance(groups, (int, np.integer)) or groups < 2:
        raise ParameterError(f"split_groups must be an integer >= 2 (2: the split halves), "
                             f"got {groups!r}")
    return int(groups)


def split_groups_for(normalization: str, split_groups=None) -> int:
    """The number of groups a pipeline of ``normalization`` leaves out:
    ``split_groups`` (checked by :func:`split_group_count`), or ``DEFAULT_SPLIT_GROUPS``
    when None; ``ParameterError`` when it is given with a normalization other than
    ``"split"`` (``run_flux`` and the Flower FLUX embedding both ask here)."""
    if split_groups is not None and normalization != "split":
        raise ParameterError(f"split_groups needs normalization='split', got normalization="
                             f"{normalization!r} with split_groups={split_groups!r}")
    return split_group_count(DEFAULT_SPLIT_GROUPS if split_groups is None else split_groups)


def split_rows(latents, labels, projection, n_classes: int, *,
               form: str = DEFAULT_DESCRIPTOR_FORM, rng=None,
               groups: int = DEFAULT_SPLIT_GROUPS) -> np.ndarray:
    """One client's rows of the split D: ``[G_0; ...; G_{k-1}; F]`` (``(k + 1) x p``, ``k =
    groups``), the descriptors of its rows without each of ``k`` random groups
    (:func:`split_descriptors`; at ``k = 2`` its two halves ``A, B``) and of all of them
    (:func:`~omnifc.adapters.flux.descriptor`). What a node sends for the Flower embedding
    ``embedding("flux")`` (its rows function returns this). ``rng``: the split's generator
    (fresh OS entropy when None; seed it only to reproduce a run).

    >>> import numpy as np
    >>> from sklearn.decomposition import PCA
    >>> z = np.random.default_rng(1).random((6, 4))
    >>> proj = PCA(2).fit(np.random.default_rng(2).random((20, 4)))
    >>> rows = split_rows(z, [0, 1, 0, 1, 1, 0], proj, 2, rng=np.random.default_rng(3), groups=3)
    >>> rows.shape, bool(np.array_equal(rows[3], descriptor(z, [0, 1, 0, 1, 1, 0], proj, 2)))
    ((4, 12), True)
    """
    rng = np.random.default_rng() if rng is None else rng
    left = split_descriptors([latents], [labels], projection, n_classes, form=form, rng=rng,
                             groups=groups)
    return np.stack([g[0] for g in left]
                    + [descriptor(latents, labels, projection, n_classes, form=form)])


def squared_distances(x) -> np.ndarray:
    """Squared Euclidean distances between the rows of ``x`` (float64, negatives of
    rounding set to 0)."""
    x = np.asarray(x, dtype=np.float64)
    g = x @ x.T
    d = np.diag(g)
    return np.maximum(d[:, None] + d[None] - 2.0 * g, 0.0)


def split_whitened_distances(distances, n: int, *, groups: int = DEFAULT_SPLIT_GROUPS,
                             order: str = "stacked") -> np.ndarray:
    """The coordinator's computation, from D only: ``distances`` is the squared-distance
    matrix of ``[G_0; ...; G_{k-1}; F]`` (``(k + 1) n`` rows, ``k = groups``: ``F`` is
    whitened) or of ``[G_0; ...; G_{k-1}]`` (``k n`` rows: the clients' means of their
    ``G_j`` are), the :func:`split_descriptors`. Returns the n x n squared distances of the
    whitened points. The noise covariance is the OAS-shrunk covariance of the ``n (k - 1)``
    within-client contrasts in D's MDS embedding (Helmert's, scaled by
    ``2 sqrt((k - 1) / k)``: a client's ``k - 1`` contrasts have outer products summing to 4
    times its delete-a-group jackknife covariance of ``F``, so their mean over all
    contrasts is ``4 / (k - 1)`` times the clients' mean jackknife, a constant that scales
    every whitened distance alike; at ``k = 2`` the contrast is ``A_i - B_i``
    exactly); directions with no noise are floored at 1e-12 of the largest variance.
    ``order="client"``: the rows come client by client instead (``G_0 of client 0, ...,
    F of client 0, G_0 of client 1, ...``: a session over the nodes' :func:`split_rows`)."""
    return oas_whitened_distances(*split_embedding(distances, n, groups=groups, order=order))


def split_embedding(distances, n: int, *, groups: int = DEFAULT_SPLIT_GROUPS,
                    order: str = "stacked") -> tuple[np.ndarray, np.ndarray]:
    """``(contrasts, points)``: what :func:`split_whitened_distances` reads from D (same
    arguments), in D's classical MDS embedding: the ``n (k - 1)`` within-client contrasts
    (one row each) and the ``n`` points it whitens."""
    d = np.asarray(distances, dtype=np.float64)
    n, k = int(n), split_group_count(groups)
    if order not in ("stacked", "client"):
        raise ParameterError(f"order must be 'stacked' or 'client', got {order!r}")
    if n < 2 or d.shape not in ((k * n, k * n), ((k + 1) * n, (k + 1) * n)):
        raise ParameterError(f"D must be kn x kn or (k + 1)n x (k + 1)n for k = {k} groups "
                             f"and n >= 2 clients (n = {n}), got shape {d.shape}; groups= "
                             f"is the number of groups each client left out "
                             f"(split_rows' groups)")
    if order == "client":        # row r * n + i of the stacked order is row i * R + r
        per = d.shape[0] // n
        stacked = (np.arange(n)[None, :] * per + np.arange(per)[:, None]).ravel()
        d = d[np.ix_(stacked, stacked)]
    x = mds_embedding(d)[0]
    left = x[:k * n].reshape(k, n, -1)
    points = left.mean(axis=0) if d.shape[0] == k * n else x[k * n:]
    return (np.einsum("rk,knd->rnd", _contrasts(k), left).reshape(-1, x.shape[1]), points)


def _contrasts(k: int) -> np.ndarray:
    """The ``(k - 1) x k`` contrast coefficients of :func:`split_whitened_distances`:
    Helmert's orthonormal rows (``sum_{j < r} g_j - r g_r``, over ``sqrt(r (r + 1))``) times
    ``2 sqrt((k - 1) / k)``, so that their outer products sum to ``4 (k - 1) / k`` times the
    centred ones, 4 times a client's delete-a-group jackknife; ``[[1, -1]]`` at ``k = 2``."""
    out = np.zeros((k - 1, k))
    for r in range(1, k):
        out[r - 1, :r] = 1.0
        out[r - 1, r] = -float(r)
        out[r - 1] *= 2.0 * np.sqrt((k - 1) / k) / np.sqrt(r * (r + 1))
    return out


def oas_whitened_points(noise_rows, points) -> tuple[np.ndarray, np.ndarray]:
    """``(whitened points, S)``: ``points`` whitened by ``S``, the OAS-shrunk covariance of
    the zero-mean ``noise_rows`` (directions with no noise floored at 1e-12 of the largest
    variance)."""
    from sklearn.covariance import oas

    noise, _ = oas(noise_rows, assume_centered=True)
    values, vectors = np.linalg.eigh(noise)
    values = np.maximum(values, values.max() * 1e-12)
    return np.asarray(points) @ vectors / np.sqrt(values), noise


def oas_whitened_distances(noise_rows, points) -> np.ndarray:
    """Squared distances between ``points`` whitened by the OAS-shrunk covariance of the
    zero-mean ``noise_rows`` (:func:`oas_whitened_points`): the coordinator's last step in
    :func:`split_whitened_distances`."""
    return squared_distances(oas_whitened_points(noise_rows, points)[0])


def second_test_for(second_test, normalization: str, k_rule: str) -> str:
    """The second test a pipeline runs (``run_flux``'s and the Flower FLUX embedding's
    ``second_test``): None picks ``"spiked"`` (the default recipe's) with
    ``normalization="split"`` and a calibrated K rule, else ``"none"``; ``"spiked"`` needs
    both (``ParameterError``: the test reads the split D and tests at the rule's level).

    >>> second_test_for(None, "split", "calibrated_axis_or_gap"), second_test_for(None, "none", "calibrated")
    ('spiked', 'none')
    """
    from ._paper import _CALIBRATED_STATISTICS

    if second_test is None:
        return ("spiked" if normalization == "split" and k_rule in _CALIBRATED_STATISTICS
                else "none")
    if second_test not in SECOND_TESTS:
        raise ParameterError(f"second_test must be one of {SECOND_TESTS} or None, got "
                             f"{second_test!r}")
    if second_test == "spiked" and (normalization != "split"
                                    or k_rule not in _CALIBRATED_STATISTICS):
        raise ParameterError(f"second_test='spiked' reads the split D and tests at the K "
                             f"rule's level: it needs normalization='split' and a calibrated "
                             f"k_rule {tuple(_CALIBRATED_STATISTICS)}, got "
                             f"normalization={normalization!r}, k_rule={k_rule!r}")
    return second_test


def cluster_split_clients(distances, n: int, *, groups: int = DEFAULT_SPLIT_GROUPS,
                          order: str = "stacked", k_rule: str | None = None,
                          k_alpha: float | None = None, k_references: int | None = None,
                          k_min_group: int | None = None, second_test: str | None = None,
                          eps_rule: str = "gap", eps_scaling: float = 1.0,
                          random_state: int = 0):
    """The coordinator's clustering from its split D (``distances``: the ``(k + 1) n`` rows
    of :func:`split_whitened_distances`, ``order`` as there): ``(whitened D, result)``.

    The K rule (``k_rule``, the default recipe's unless told; level and draws as
    :func:`~omnifc.adapters.flux.run_k_level`: 0.01 and 199 for a calibrated rule) runs on
    the whitened D (:func:`~omnifc.adapters.flux.cluster_clients`, with ``eps_rule`` and
    ``eps_scaling`` for ``k_rule="dbscan"``). With ``second_test=
    "spiked"`` (the default, :func:`second_test_for`), where it answers one cluster among 4
    to :data:`~omnifc.adapters.flux._spiked_null.SPIKED_MAX_CLIENTS` clients, the spiked-null
    test runs on the same D at the same level and draws (``random_state`` seeds it): K = 2
    where its p <= alpha, the clients cut in two by Ward's tree on the whitened D. The
    union's level is at most twice alpha. The test's evidence is ``result.second_test``
    (None where it was not asked).

    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> f = rng.normal(size=(6, 3))
    >>> rows = np.vstack([f + 0.1 * rng.normal(size=(6, 3)) for _ in range(3)] + [f])
    >>> d = ((rows[:, None] - rows[None]) ** 2).sum(-1)
    >>> whitened, found = cluster_split_clients(d, 6, groups=3, k_references=19)
    >>> whitened.shape, found.decision.k, found.n_clusters, found.second_test.p_value > 0.01
    ((6, 6), 1, 1, True)
    """
    import dataclasses

    from ._paper import DEFAULT_RECIPE, cluster_clients, run_k_level
    from ._spiked_null import SPIKED_MAX_CLIENTS, spiked_of_parts, union_k
    from ..._clustering._hierarchical import ward_from_distances

    k_rule = DEFAULT_RECIPE["k_rule"] if k_rule is None else k_rule
    second = second_test_for(second_test, "split", k_rule)
    # the pipeline's level and draws; cluster_clients checks the other options
    k_alpha, k_references = run_k_level(k_rule, k_alpha, k_references)
    parts = split_embedding(distances, n, groups=groups, order=order)   # once, for both
    whitened = oas_whitened_distances(*parts)           # split_whitened_distances(distances)
    found = cluster_clients(whitened, k_rule=k_rule, k_alpha=k_alpha,
                            k_references=k_references, k_min_group=k_min_group,
                            eps_rule=eps_rule, eps_scaling=eps_scaling,
                            random_state=random_state)
    n = whitened.shape[0]
    if second != "spiked" or found.n_clusters != 1 or not 4 <= n <= SPIKED_MAX_CLIENTS:
        return whitened, found
    test = spiked_of_parts(*parts, references=int(k_references), seed=int(random_state))
    if union_k(found.n_clusters, test.p_value, k_alpha) == 1:
        return whitened, dataclasses.replace(found, second_test=test)
    logger.info("second test: the spiked-null test finds two groups among %d clients "
                "(p = %.3g <= %.3g) where the K rule found one", n, test.p_value, k_alpha)
    return whitened, dataclasses.replace(found, labels=ward_from_distances(whitened, 2),
                                         n_clusters=2, knee_found=True, second_test=test)
