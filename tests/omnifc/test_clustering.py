"""Clustering the securely reconstructed D equals clustering the plaintext quantized data.

For each data set (iris; a 300-row subset of digits) and each split (p = 0 and p = 1),
D comes from ``omnifc.secure_distance_matrix``; the reference runs the same algorithm on
the plaintext quantized rows, concatenated in party order, with an independent library
call where one exists (scikit-learn KMeans / DBSCAN / SpectralClustering, scipy linkage
on the observation vectors). Partitions must be identical (ARI = 1).
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.cluster.hierarchy import fcluster, linkage
from scipy.spatial.distance import cdist
from sklearn.cluster import DBSCAN, KMeans, SpectralClustering
from sklearn.metrics import adjusted_rand_score

import omnifc
from omnifc._clustering import fcm_points, fit_method, pam
from omnifc._clustering._common import as_generator, seed_from

CASES = [("iris", 3, None), ("digits", 10, 300)]


def quantize(x, bound, scale_bits=16):
    """The quantizer's rounding in the clear: multiples of 2^-q in [0, R]."""
    return np.floor(np.clip(x, 0.0, bound) * 2.0**scale_bits + 0.5) / 2.0**scale_bits


def same_partition(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    pairs = set(zip(a.tolist(), b.tolist()))
    return len(pairs) == len(set(a.tolist())) == len(set(b.tolist())) and \
        adjusted_rand_score(a, b) == 1.0


class Case:
    def __init__(self, name, parties, subset, level):
        data = omnifc.load_dataset(name)
        x, y = data.features, data.labels
        if subset:
            x, y = x[:subset], y[:subset]
        self.parts = omnifc.split_non_iid(y, parties, level)
        self.index = np.concatenate(self.parts)          # original sample of each global row
        self.labels = y[self.index]
        self.k = int(np.unique(y).size)
        result = omnifc.secure_distance_matrix([x[i] for i in self.parts], bound=data.bound,
                                               nonnegative=data.nonnegative, scale_bits=16)
        self.secure = result.distances
        self.plain = quantize(x[self.index], data.bound)


@pytest.fixture(scope="module", params=[(c, p) for c in CASES for p in (0.0, 1.0)],
                ids=lambda cp: f"{cp[0][0]}-p{cp[1]}")
def case(request):
    (name, parties, subset), level = request.param
    return Case(name, parties, subset, level)


def test_secure_matrix_is_the_plaintext_quantized_matrix(case):
    assert np.array_equal(case.secure, cdist(case.plain, case.plain, "sqeuclidean"))


@pytest.mark.slow
def test_exact_kmeans_equals_sklearn_kmeans_on_plaintext(case):
    details = fit_method(case.secure, "kmeans", case.k, random_state=3, n_init=4)
    seeds = details["init_indices"]
    reference = KMeans(case.k, init=case.plain[seeds], n_init=1, tol=0.0,
                       algorithm="lloyd").fit(case.plain)
    assert same_partition(details["labels"], reference.labels_)
    assert details["inertia"] == pytest.approx(reference.inertia_, rel=1e-9)


@pytest.mark.parametrize("method", ["ward", "average", "complete", "single"])
def test_hierarchical_equals_scipy_linkage_on_plaintext(case, method):
    details = fit_method(case.secure, "hierarchical", case.k, linkage=method)
    order = details["order"]
    reference = np.empty(len(case.plain), dtype=np.int64)
    reference[order] = fcluster(linkage(case.plain[order], method), case.k, "maxclust")
    assert same_partition(details["labels"], reference)


def test_dbscan_equals_sklearn_dbscan_on_plaintext(case):
    details = fit_method(case.secure, "dbscan", min_samples=5)
    order = details["order"]
    reference = np.empty(len(case.plain), dtype=np.int64)
    reference[order] = DBSCAN(eps=details["eps"], min_samples=5).fit(case.plain[order]).labels_
    assert np.array_equal(details["labels"] == -1, reference == -1)
    assert same_partition(details["labels"], reference)
    assert len(set(details["labels"].tolist()) - {-1}) >= 1


@pytest.mark.slow
def test_spectral_equals_sklearn_rbf_spectral_on_plaintext(case):
    details = fit_method(case.secure, "spectral", case.k, random_state=5)
    sigma = details["bandwidth"]
    reference_sigma = np.sqrt(cdist(case.plain, case.plain, "sqeuclidean")[
        np.triu_indices(len(case.plain), 1)]).mean()
    assert sigma == pytest.approx(reference_sigma, rel=1e-12)
    order = details["order"]
    model = SpectralClustering(case.k, affinity="rbf", gamma=1.0 / (2.0 * sigma**2),
                               random_state=seed_from(as_generator(5)))
    reference = np.empty(len(case.plain), dtype=np.int64)
    reference[order] = model.fit(case.plain[order]).labels_
    assert same_partition(details["labels"], reference)


def test_kmedoids_equals_pam_on_plaintext_distances(case):
    details = fit_method(case.secure, "kmedoids", case.k)
    reference = pam(cdist(case.plain, case.plain), case.k)
    assert sorted(details["medoid_indices"].tolist()) == \
        sorted(reference["medoid_indices"].tolist())
    assert same_partition(details["labels"], reference["labels"])


@pytest.mark.slow
def test_fcm_on_embedding_equals_fcm_on_plaintext(case):
    details = fit_method(case.secure, "fcm", case.k, random_state=2)
    reference = fcm_points(case.plain, case.plain[details["init_indices"]])
    assert same_partition(details["labels"], reference["labels"])
    np.testing.assert_allclose(details["memberships"], reference["memberships"], atol=1e-8)


@pytest.mark.slow
@pytest.mark.parametrize("method", ["nmf", "kmeans-rows"])
def test_surrogates_equal_on_plaintext_matrix(case, method):
    details = fit_method(case.secure, method, case.k, random_state=1)
    reference = fit_method(cdist(case.plain, case.plain, "sqeuclidean"), method, case.k,
                           random_state=1)
    assert same_partition(details["labels"], reference["labels"])


@pytest.mark.slow
@pytest.mark.parametrize("name,parties,subset", CASES, ids=[c[0] for c in CASES])
def test_federated_partition_does_not_depend_on_the_split(name, parties, subset):
    """p = 0 and p = 1 put the rows in different parties and orders; same partition."""
    data = omnifc.load_dataset(name)
    x, y = data.features[:subset], data.labels[:subset]
    splits = [omnifc.split_non_iid(y, parties, level) for level in (0.0, 1.0)]
    index = [np.concatenate(parts) for parts in splits]
    assert sorted(index[0].tolist()) == sorted(index[1].tolist())
    assert not np.array_equal(index[0], index[1])
    k = int(np.unique(y).size)
    results = []
    for parts in splits:
        model = omnifc.FederatedClustering(method="kmeans", n_clusters=k, bound=data.bound,
                                           nonnegative=True, random_state=0)
        model.fit([x[i] for i in parts])
        results.append(model)
    for method in omnifc.METHODS:
        by_sample = []
        for model, rows in zip(results, index):
            if method == "kmeans":
                labels = model.labels_global_
            else:  # the same reconstructed D, clustered by another method
                labels = omnifc.cluster(model.distance_result_.distances, method,
                                        None if method == "dbscan" else k, random_state=0)
            out = np.empty_like(labels)
            out[rows] = labels          # back to the original sample order
            by_sample.append(out)
        assert np.array_equal(by_sample[0], by_sample[1]), method


# ---------------------------------------------------------------- bad input


GOOD = np.array([[0.0, 1.0, 4.0], [1.0, 0.0, 1.0], [4.0, 1.0, 0.0]])


@pytest.mark.parametrize("matrix,message", [
    (np.zeros((2, 3)), "square"),
    (np.array([[0.0, 1.0], [2.0, 0.0]]), "symmetric"),
    (np.array([[0.0, -1.0], [-1.0, 0.0]]), "non-negative"),
    (np.array([[0.0, np.nan], [np.nan, 0.0]]), "finite"),
    (np.array([[1.0, 1.0], [1.0, 1.0]]), "zero diagonal"),
    (np.zeros((0, 0)), "empty"),
    (np.zeros(3), "square"),
])
@pytest.mark.parametrize("method", omnifc.METHODS)
def test_bad_matrix_is_refused(matrix, message, method):
    with pytest.raises(omnifc.InputError, match=message):
        omnifc.cluster(matrix, method, n_clusters=1)


@pytest.mark.parametrize("method", omnifc.METHODS)
@pytest.mark.parametrize("k", [4, 0, -1, 1.5, True])
def test_bad_n_clusters_is_refused(method, k):
    with pytest.raises(omnifc.ParameterError, match="n_clusters"):
        omnifc.cluster(GOOD, method, n_clusters=k)


def test_missing_n_clusters_unknown_method_and_option():
    with pytest.raises(omnifc.ParameterError, match="needs n_clusters"):
        omnifc.cluster(GOOD, "kmeans")
    with pytest.raises(omnifc.ParameterError, match="unknown clustering method"):
        omnifc.cluster(GOOD, "birch", n_clusters=2)
    with pytest.raises(omnifc.ParameterError, match="does not take"):
        omnifc.cluster(GOOD, "kmeans", n_clusters=2, linkage="ward")
    with pytest.raises(omnifc.ParameterError, match="linkage"):
        omnifc.cluster(GOOD, "hierarchical", n_clusters=2, linkage="wards")
    with pytest.raises(omnifc.ParameterError, match="bandwidth"):
        omnifc.cluster(GOOD, "spectral", n_clusters=2, bandwidth=-1.0)
    with pytest.raises(omnifc.ParameterError, match="eps"):
        omnifc.cluster(GOOD, "dbscan", eps=0.0)


def test_errors_are_value_errors():
    with pytest.raises(ValueError):
        omnifc.cluster(np.zeros((2, 3)), "kmeans", n_clusters=1)
