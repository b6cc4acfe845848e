"""Landmark spectral clustering (Chen & Cai 2011) from D[:, L] alone (issue 22).

References are independent of the code under test: the dense n x n affinity and its
normalized eigenvectors built with numpy from the plaintext rows, scikit-learn's
SpectralClustering on dense affinities, the project's exact spectral clustering on the
full D, a stable argsort for the nearest landmarks, and the planted labels.
"""

from __future__ import annotations

import numpy as np
import pytest

import omnifc
from finite_field import ParameterError
from omnifc._clustering import landmark_spectral
from omnifc._clustering._landmark_spectral import _nearest, landmark_representation

pytestmark = pytest.mark.timeout(120)


def _blobs(n_per=25, k=3, dim=4, spread=0.3, seed=0):
    rng = np.random.default_rng(seed)
    centres = rng.normal(0, 1, (k, dim)) * 6
    labels = np.repeat(np.arange(k), n_per)
    x = centres[labels] + rng.normal(0, spread, (n_per * k, dim))
    perm = rng.permutation(len(x))
    return x[perm], labels[perm]


def _sq(x, y):
    return ((x[:, None, :] - y[None, :, :]) ** 2).sum(-1)


def _dense_w(x, sigma):
    """Chen & Cai's affinity with every row a landmark and r = n, built densely."""
    k = np.exp(-_sq(x, x) / (2 * sigma ** 2))
    p = k / k.sum(axis=1, keepdims=True)
    return p @ np.diag(1.0 / p.sum(axis=0)) @ p.T


def _projector(u):
    q = np.linalg.qr(u)[0]
    return q @ q.T


@pytest.mark.slow
def test_every_row_a_landmark_and_r_n_is_the_spectral_embedding_of_the_same_affinity():
    x, planted = _blobs(seed=1)
    n, k = len(x), 3
    d = _sq(x, x)
    sigma = np.sqrt(d[~np.eye(n, dtype=bool)]).mean()  # the "mean" rule, zeros left out
    details = landmark_spectral(d, np.arange(n), k, n_neighbors=n, random_state=0)
    assert details["bandwidth"] == pytest.approx(sigma, rel=1e-12)
    # the independent route: normalized affinity D^-1/2 W D^-1/2 and its top eigenvectors
    w = _dense_w(x, sigma)
    degree = w.sum(axis=1)
    assert np.allclose(degree, 1.0)  # (what the module text claims)
    m = w / np.sqrt(np.outer(degree, degree))
    values, vectors = np.linalg.eigh(m)
    top = vectors[:, np.argsort(values)[::-1][:k]]
    assert np.allclose(np.sort(details["singular_values"] ** 2)[::-1],
                       np.sort(values)[::-1][:k], rtol=1e-9, atol=1e-12)
    # the same subspace (rotation and signs aside)
    assert np.max(np.abs(_projector(details["embedding"]) - _projector(top))) < 1e-8
    # and the same clustering as scikit-learn's spectral clustering of that affinity,
    # and of the plain Gaussian affinity, on these well separated blobs
    from sklearn.cluster import SpectralClustering

    on_w = SpectralClustering(k, affinity="precomputed", random_state=0).fit(w).labels_
    gauss = np.exp(-d / (2 * sigma ** 2))
    on_k = SpectralClustering(k, affinity="precomputed", random_state=0).fit(gauss).labels_
    labels = details["labels"]
    assert omnifc.adjusted_rand(on_w, labels) == 1.0
    assert omnifc.adjusted_rand(on_k, labels) == 1.0
    assert omnifc.adjusted_rand(planted, labels) == 1.0


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 2, 3])
def test_few_landmarks_recover_planted_clusters_where_exact_spectral_does(seed):
    x, planted = _blobs(n_per=40, k=4, seed=seed)
    d = _sq(x, x)
    exact = omnifc.cluster(d, "spectral", 4, random_state=0)
    assert omnifc.adjusted_rand(planted, exact) == 1.0
    landmarks = np.random.default_rng(seed).choice(len(x), 20, replace=False)
    labels = omnifc.cluster(_Columns(d[:, landmarks], landmarks), "spectral", 4,
                            random_state=0, n_neighbors=3)
    assert omnifc.adjusted_rand(planted, labels) == 1.0
    assert labels[0] == 0  # renumbered by first appearance
    assert sorted(set(labels.tolist())) == [0, 1, 2, 3]


class _Columns:
    def __init__(self, values, landmarks):
        self.values, self.landmarks = values, np.asarray(landmarks)


def test_representation_is_sparse_row_stochastic_before_normalization():
    x, _ = _blobs(n_per=10, seed=4)
    landmarks = np.arange(0, 30, 3)
    c = _sq(x, x[landmarks])
    zhat, sigma, r = landmark_representation(c, landmarks, n_neighbors=4)
    assert r == 4 and zhat.shape == (30, 10) and np.all(np.diff(zhat.indptr) == 4)
    # independent: Z from the 4 nearest columns (stable sort), Gaussian, rows summing to 1
    near = np.argsort(c, axis=1, kind="stable")[:, :4]
    z = np.zeros_like(c)
    rows = np.arange(30)[:, None]
    z[rows, near] = np.exp(-c[rows, near] / (2 * sigma ** 2))
    z /= z.sum(axis=1, keepdims=True)
    expected = z / np.sqrt(z.sum(axis=0))
    assert np.allclose(zhat.toarray(), expected, rtol=1e-12, atol=1e-15)
    assert sigma == pytest.approx(np.sqrt(c[rows, near][c[rows, near] > 0]).mean(), rel=1e-12)


def test_ties_at_the_rth_distance_go_to_the_lower_column():
    rng = np.random.default_rng(5)
    block = rng.integers(0, 4, (200, 9)).astype(np.float64)  # many ties
    for r in (1, 3, 8, 9):
        cols, values = _nearest(block, r)
        stable = np.sort(np.argsort(block, axis=1, kind="stable")[:, :r], axis=1)
        assert np.array_equal(cols, stable)
        assert np.array_equal(values, np.take_along_axis(block, stable, axis=1))


def test_a_default_r_and_a_given_bandwidth():
    x, planted = _blobs(seed=6)
    landmarks = np.arange(0, 75, 5)
    c = _sq(x, x[landmarks])
    details = landmark_spectral(c, landmarks, 3, bandwidth=2.0, bandwidth_scale=0.5,
                                random_state=1)
    assert details["n_neighbors"] == 5 and details["bandwidth"] == 1.0
    assert omnifc.adjusted_rand(planted, details["labels"]) == 1.0
    three = landmark_spectral(c[:, :3], landmarks[:3], 3, random_state=1)
    assert three["n_neighbors"] == 3  # the default 5 clipped to L


@pytest.mark.parametrize("kwargs, match", [
    (dict(n_clusters=4, landmarks=3), "needs at least 4 landmarks, got L = 3"),
    (dict(n_clusters=2, landmarks=3, n_neighbors=4), "only L = 3 landmarks"),
    (dict(n_clusters=2, landmarks=3, n_neighbors=0), "positive integer"),
    (dict(n_clusters=2, landmarks=3, bandwidth=-1.0), "bandwidth must be positive"),
    (dict(n_clusters=2, landmarks=3, bandwidth="median"), "'mean' or a positive number"),
    (dict(n_clusters=31, landmarks=3), "n_clusters must be an integer in"),
])
def test_edge_cases_give_clear_errors(kwargs, match):
    x, _ = _blobs(n_per=10, seed=7)
    landmarks = np.arange(kwargs.pop("landmarks"))
    c = _sq(x, x[landmarks])
    with pytest.raises(ParameterError, match=match):
        landmark_spectral(c, landmarks, **kwargs)


def test_degenerate_inputs_give_clear_errors():
    # every row on its landmark: no distance to estimate a bandwidth from
    with pytest.raises(ParameterError, match="pass bandwidth="):
        landmark_spectral(np.zeros((4, 2)), [0, 1], 2, n_neighbors=1)
    # two landmarks at the same point: with r = 1 the second is nobody's nearest (ties go
    # to the lower column), so the representation has rank 2 < 3 clusters
    x = np.array([[0.0], [0.0], [5.0], [0.1], [5.1]])
    with pytest.raises(ParameterError, match="rank 2 < n_clusters = 3"):
        landmark_spectral(_sq(x, x[:3]), [0, 1, 2], 3, n_neighbors=1)
    with pytest.raises(ParameterError, match="finite squared distances"):
        landmark_spectral(-np.ones((4, 2)), [0, 1], 2)
    with pytest.raises(ParameterError, match="distinct row indices"):
        landmark_spectral(np.ones((4, 2)), [0, 0], 2)


def test_omnifc_cluster_options_on_a_landmarks_result():
    x, _ = _blobs(n_per=8, seed=8)
    view = _Columns(_sq(x, x[:6]), np.arange(6))
    with pytest.raises(ParameterError, match="does not take option"):
        omnifc.cluster(view, "spectral", 3, max_iter=5)
    with pytest.raises(ParameterError, match="'spectral' needs n_clusters"):
        omnifc.cluster(view, "spectral")


# -- through a secure landmarks session ------------------------------------------------
def _parties(seed=0):
    rng = np.random.default_rng(seed)
    centres = np.array([[0.2, 0.2, 0.2], [0.8, 0.8, 0.2], [0.2, 0.8, 0.8]])
    planted = rng.integers(3, size=45)
    x = centres[planted] + rng.normal(0, 0.05, (45, 3))
    return [x[:15], x[15:27], x[27:]], x, planted


def _exact(rows, scale_bits=12):
    q = np.floor(np.clip(rows, -1, 1) * 2.0 ** scale_bits + 0.5)
    return ((q[:, None, :] - q[None, :, :]) ** 2).sum(-1) / 4.0 ** scale_bits


@pytest.mark.slow
def test_secure_landmarks_result_and_federated_clustering():
    parties, x, planted = _parties()
    # The landmarks are drawn from the run's public randomness, new in every session: with
    # L = 36 of 45 rows every planted cluster (18, 14, 13 rows) holds at least 5 landmarks
    # (the rows' default neighbour count) except with probability below 1e-6
    # (hypergeometric), so the planted clusters are recovered whatever the draw; with L = 9
    # one draw in a few missed (ARI 0.80 seen once under the whole suite).
    L = 36
    result = omnifc.secure_distance_matrix(parties, bound=1.0, scale_bits=12,
                                           layout="landmarks", n_landmarks=L)
    landmarks = result.landmarks
    exact = _exact(x)[:, landmarks]
    assert np.array_equal(result.distances, exact)
    labels = omnifc.cluster(result, "spectral", 3, random_state=0)
    expected = omnifc.cluster(_Columns(exact, landmarks), "spectral", 3, random_state=0)
    assert labels.tolist() == expected.tolist()
    assert omnifc.adjusted_rand(planted, labels) == 1.0
    model = omnifc.FederatedClustering("spectral", 3, bound=1.0, scale_bits=12,
                                       random_state=0, distances="landmarks",
                                       n_landmarks=L).fit(parties)
    fitted = model.distance_result_
    assert fitted.layout == "landmarks" and fitted.distances.shape == (45, L)
    again = omnifc.cluster(fitted, "spectral", 3, random_state=0)
    assert model.labels_.tolist() == again.tolist()
    assert omnifc.adjusted_rand(planted, model.labels_) == 1.0
    assert "singular_values" in model.details_
    assert not hasattr(model, "predict")  # no rule for new rows
