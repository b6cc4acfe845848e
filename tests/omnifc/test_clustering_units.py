"""Unit tests of the pieces behind omnifc.cluster: seeding, PAM, FCM, eps, order, estimators."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy.spatial.distance import cdist
from sklearn.base import clone
from sklearn.cluster import AgglomerativeClustering

import omnifc
from omnifc._clustering import (auto_eps, canonical_order, fcm_points, fit_method,
                                gaussian_bandwidth, kmeans_plusplus_indices, pam)
from omnifc._clustering._fcm import fcm_memberships, fcm_objective


def blobs(seed=0, n=30, centers=((0, 0), (6, 0), (0, 6))):
    rng = np.random.Generator(np.random.PCG64(seed))
    x = np.concatenate([rng.normal(c, 0.5, size=(n, 2)) for c in centers])
    return x, np.repeat(np.arange(len(centers)), n)


def sq(x):
    return cdist(x, x, "sqeuclidean")


def test_kmeans_plusplus_indices_are_distinct_rows_and_seeded():
    x, _ = blobs()
    d = sq(x)
    a = kmeans_plusplus_indices(d, 3, np.random.default_rng(1))
    b = kmeans_plusplus_indices(d, 3, np.random.default_rng(1))
    assert a.tolist() == b.tolist() and len(set(a.tolist())) == 3
    # well-separated blobs: one seed per blob
    assert sorted(a // 30) == [0, 1, 2]
    # all points identical except seeds already taken: falls back to unused rows
    same = np.zeros((4, 4))
    assert len(set(kmeans_plusplus_indices(same, 3, np.random.default_rng(0)).tolist())) == 3


def test_exact_kmeans_recovers_blobs_and_matches_plaintext_objective():
    x, y = blobs()
    details = fit_method(sq(x), "kmeans", 3, random_state=0)
    assert omnifc.adjusted_rand(y, details["labels"]) == 1.0
    centers = np.array([x[details["labels"] == j].mean(axis=0) for j in range(3)])
    inertia = ((x - centers[details["labels"]]) ** 2).sum()
    assert details["inertia"] == pytest.approx(inertia, rel=1e-9)


def brute_force_kmedoids(dist, k):
    best = None
    for medoids in itertools.combinations(range(dist.shape[0]), k):
        cost = dist[:, medoids].min(axis=1).sum()
        if best is None or cost < best[0] - 1e-12:
            best = (cost, medoids)
    return best


@pytest.mark.parametrize("seed", range(4))
def test_pam_is_a_swap_local_optimum_and_near_brute_force(seed):
    rng = np.random.Generator(np.random.PCG64(seed))
    x = rng.normal(size=(11, 2))
    dist = np.sqrt(sq(x))
    result = pam(dist, 3)
    medoids = result["medoid_indices"].tolist()
    cost = dist[:, medoids].min(axis=1).sum()
    assert result["inertia"] == pytest.approx(cost)
    # no single swap improves (checked by brute force over all swaps)
    for position, candidate in itertools.product(range(3), range(11)):
        if candidate in medoids:
            continue
        trial = list(medoids)
        trial[position] = candidate
        assert dist[:, trial].min(axis=1).sum() >= cost - 1e-9
    optimum, _ = brute_force_kmedoids(dist, 3)
    assert cost <= optimum * 1.2
    assert result["labels"].tolist() == np.argmin(dist[:, medoids], axis=1).tolist()


def test_pam_finds_optimum_on_separated_data():
    x, y = blobs(n=6)
    dist = np.sqrt(sq(x))
    result = pam(dist, 3)
    optimum, best = brute_force_kmedoids(dist, 3)
    assert result["inertia"] == pytest.approx(optimum)
    assert sorted(result["medoid_indices"].tolist()) == sorted(best)


def test_kmedoids_squared_option_uses_d():
    x, _ = blobs(n=8)
    d = sq(x)
    details = fit_method(d, "kmedoids", 3, squared=True)
    assert details["inertia"] == pytest.approx(d[:, details["medoid_indices"]].min(axis=1).sum())


def test_fcm_fixed_point_and_monotone_objective():
    x, y = blobs(seed=3)
    init = x[[0, 30, 60]]
    objectives = []
    centers = init
    memberships = fcm_memberships(x, centers, 2.0)
    for _ in range(15):
        weights = memberships**2
        centers = weights.T @ x / weights.sum(axis=0)[:, None]
        objectives.append(fcm_objective(x, centers, memberships, 2.0))
        memberships = fcm_memberships(x, centers, 2.0)
    assert all(b <= a + 1e-9 for a, b in zip(objectives, objectives[1:]))
    result = fcm_points(x, init, tol=1e-10, max_iter=1000)
    u, c = result["memberships"], result["cluster_centers"]
    np.testing.assert_allclose(u.sum(axis=1), 1.0)
    np.testing.assert_allclose(c, (u**2).T @ x / (u**2).sum(axis=0)[:, None], atol=1e-8)
    np.testing.assert_allclose(u, fcm_memberships(x, c, 2.0), atol=1e-8)
    assert omnifc.adjusted_rand(y, result["labels"]) == 1.0
    # hand-checked memberships: point at distances 1 and 2 (squared 1 and 4), m = 2
    u1 = fcm_memberships(np.array([[0.0, 0.0]]), np.array([[1.0, 0.0], [0.0, 2.0]]), 2.0)
    np.testing.assert_allclose(u1, [[0.8, 0.2]])
    # a point on a centre belongs to it fully
    u2 = fcm_memberships(np.array([[1.0, 0.0]]), np.array([[1.0, 0.0], [0.0, 2.0]]), 2.0)
    assert u2.tolist() == [[1.0, 0.0]]
    with pytest.raises(omnifc.ParameterError, match="fuzzifier"):
        fcm_points(x, init, fuzzifier=1.0)


def test_auto_eps_avoids_ties_and_finds_blobs():
    x, y = blobs()
    dist = np.sqrt(sq(x))
    eps = auto_eps(dist, 5)
    assert not np.isclose(dist, eps, rtol=0, atol=1e-12).any()
    labels = fit_method(sq(x), "dbscan")["labels"]
    assert omnifc.adjusted_rand(y[labels >= 0], labels[labels >= 0]) == 1.0
    assert (labels >= 0).mean() > 0.9


def test_bandwidth_rules():
    d = np.array([[0.0, 1.0, 4.0], [1.0, 0.0, 9.0], [4.0, 9.0, 0.0]])
    assert gaussian_bandwidth(d, "mean") == pytest.approx(2.0)       # (1 + 2 + 3) / 3
    assert gaussian_bandwidth(d, "median") == pytest.approx(2.0)
    assert gaussian_bandwidth(d, "mean", 0.5) == pytest.approx(1.0)
    assert gaussian_bandwidth(d, 3.0) == 3.0
    with pytest.raises(omnifc.ParameterError):
        gaussian_bandwidth(d, "max")


def test_hierarchical_average_matches_sklearn():
    x, _ = blobs(seed=5, centers=((0, 0), (3, 0), (0, 3), (3, 3)))
    ours = omnifc.cluster(sq(x), "hierarchical", 4, linkage="average")
    theirs = AgglomerativeClustering(4, linkage="average").fit_predict(x)
    assert omnifc.adjusted_rand(ours, theirs) == 1.0


def test_canonical_order_is_permutation_equivariant():
    x, _ = blobs(seed=2)
    d = sq(x)
    perm = np.random.Generator(np.random.PCG64(9)).permutation(len(x))
    order = canonical_order(d)
    order_perm = canonical_order(d[np.ix_(perm, perm)])
    assert perm[order_perm].tolist() == order.tolist()


def test_single_cluster_and_single_row():
    x, _ = blobs(n=5)
    for method in omnifc.METHODS:
        if method == "dbscan":
            continue
        assert set(omnifc.cluster(sq(x), method, 1, random_state=0).tolist()) == {0}
        assert omnifc.cluster(np.zeros((1, 1)), method, 1, random_state=0).tolist() == [0]


# ---------------------------------------------------------------- estimators

ESTIMATORS = [
    (omnifc.DistanceKMeans, {"n_clusters": 3, "random_state": 0}, "kmeans"),
    (omnifc.DistanceKMeans, {"n_clusters": 3, "random_state": 0, "variant": "rows"},
     "kmeans-rows"),
    (omnifc.DistanceSpectral, {"n_clusters": 3, "random_state": 0}, "spectral"),
    (omnifc.DistanceFuzzyCMeans, {"n_clusters": 3, "random_state": 0}, "fcm"),
    (omnifc.DistanceNMF, {"n_clusters": 3, "random_state": 0}, "nmf"),
    (omnifc.DistanceDBSCAN, {}, "dbscan"),
    (omnifc.DistanceHierarchical, {"n_clusters": 3}, "hierarchical"),
    (omnifc.DistanceKMedoids, {"n_clusters": 3}, "kmedoids"),
]


@pytest.mark.parametrize("cls,params,method", ESTIMATORS,
                         ids=[e[2] for e in ESTIMATORS])
def test_estimator_matches_cluster_and_follows_conventions(cls, params, method):
    x, y = blobs(seed=4)
    d = sq(x)
    model = cls(**params)
    assert model.get_params()["metric"] == "precomputed"
    assert not [a for a in vars(model) if a.endswith("_")]       # nothing learned yet
    assert model.fit(d) is model
    expected = omnifc.cluster(d, method, params.get("n_clusters"), random_state=0)
    assert model.labels_.tolist() == expected.tolist()
    assert clone(model).fit_predict(d).tolist() == expected.tolist()
    on_vectors = cls(**params, metric="euclidean").fit(x)
    assert on_vectors.labels_.tolist() == expected.tolist()
    assert on_vectors.n_features_in_ == 2
    assert model.__sklearn_tags__().input_tags.pairwise is True
    assert on_vectors.__sklearn_tags__().input_tags.pairwise is False
    with pytest.raises(omnifc.InputError, match="square"):
        cls(**params).fit(x)
    with pytest.raises(omnifc.ParameterError, match="metric"):
        cls(**params, metric="cosine").fit(x)


def test_estimator_attributes():
    x, y = blobs(seed=6)
    d = sq(x)
    km = omnifc.DistanceKMeans(3, random_state=0).fit(d)
    assert km.init_indices_.shape == (3,) and km.cluster_centers_.shape[0] == 3
    kmed = omnifc.DistanceKMedoids(3).fit(d)
    assert kmed.labels_.tolist() == np.argmin(d[:, kmed.medoid_indices_], axis=1).tolist()
    fcm = omnifc.DistanceFuzzyCMeans(3, random_state=0).fit(d)
    np.testing.assert_allclose(fcm.memberships_.sum(axis=1), 1.0)
    db = omnifc.DistanceDBSCAN().fit(d)
    assert db.eps_ > 0 and db.core_sample_indices_.size > 0
    hc = omnifc.DistanceHierarchical(3, linkage="single").fit(d)
    assert hc.linkage_matrix_.shape == (len(x) - 1, 4)
    sc = omnifc.DistanceSpectral(3, random_state=0).fit(d)
    assert sc.affinity_matrix_.shape == d.shape and sc.bandwidth_ > 0
    with pytest.raises(omnifc.ParameterError, match="variant"):
        omnifc.DistanceKMeans(3, variant="mds").fit(d)


def test_the_distance_matrix_parameter_is_called_distances_everywhere():
    # `d` is the feature count everywhere else in omnifc; the matrix is `distances`
    import importlib
    import inspect
    import pkgutil

    import omnifc._clustering as package
    from omnifc._clustering._api import _FUNCTIONS

    modules = [importlib.import_module(f"{package.__name__}.{info.name}")
               for info in pkgutil.iter_modules(package.__path__)]
    named_d = [f"{module.__name__}.{name}" for module in modules
               for name, function in vars(module).items()
               if inspect.isfunction(function) and function.__module__ == module.__name__
               and "d" in inspect.signature(function).parameters]
    assert named_d == []
    for method, function in _FUNCTIONS.items():
        assert next(iter(inspect.signature(function).parameters)) == "distances", method
    for function in (omnifc.cluster, omnifc.canonical_order, omnifc.classical_mds,
                     omnifc.check_distance_matrix, omnifc.centroid_sq_distances,
                     omnifc.to_euclidean, package.fit_method,
                     package.average_linkage_labels):
        assert next(iter(inspect.signature(function).parameters)) == "distances"
    # the dispatcher does not offer the matrix as an option of a method
    with pytest.raises(omnifc.ParameterError, match=r"takes \['linkage'\]"):
        omnifc.cluster(np.zeros((2, 2)), "hierarchical", 1, distances2=1)
