"""k-means from D[:, L] (omnifc/_clustering/_landmarks.py): landmark MDS is exact when the
landmarks span the data, and with the landmark set = all rows the labels are those of
k-means via exact classical MDS, checked against an oracle on the plaintext vectors."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from sklearn.cluster import KMeans

from finite_field import ParameterError
from omnifc._clustering import landmark_kmeans, landmark_mds
from omnifc._clustering._common import kmeans_plusplus_indices
from omnifc._clustering._kmeans import exact_kmeans

pytestmark = pytest.mark.timeout(120)


def _blobs(seed=0, n=60, d=3, k=3):
    rng = np.random.default_rng(seed)
    centers = rng.normal(0, 3, (k, d))
    x = centers[rng.integers(k, size=n)] + rng.normal(0, 1.2, (n, d))  # overlapping
    return x, ((x[:, None, :] - x[None, :, :]) ** 2).sum(-1)


def _oracle_labels(x, d, k, seed, n_init=10):
    """Lloyd on the plaintext rows from the k-means++ seeds of D (numpy + scikit-learn)."""
    rng = np.random.default_rng(seed)
    best = None
    for _ in range(n_init):
        seeds = kmeans_plusplus_indices(d, k, rng)
        model = KMeans(n_clusters=k, init=x[seeds], n_init=1, tol=0.0, algorithm="lloyd")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model.fit(x)
        if best is None or model.inertia_ < best.inertia_:
            best = model
    return best.labels_, best.inertia_


def test_with_every_row_a_landmark_it_is_kmeans_via_exact_mds():
    x, d = _blobs()
    n = len(x)
    found = landmark_kmeans(d, np.arange(n), 3, random_state=5)
    expected, inertia = _oracle_labels(x, d, 3, seed=5)
    assert found["labels"].tolist() == expected.tolist()
    assert found["inertia"] == pytest.approx(inertia, rel=1e-9)
    exact = exact_kmeans(d, 3, np.random.default_rng(5))
    assert found["labels"].tolist() == exact["labels"].tolist()
    assert found["init_indices"].tolist() == exact["init_indices"].tolist()


def test_every_row_as_landmark_in_any_order_gives_the_same_labels():
    x, d = _blobs(seed=1)
    order = np.random.default_rng(2).permutation(len(x))
    found = landmark_kmeans(d[:, order], order, 3, random_state=3)
    expected, _ = _oracle_labels(x, d, 3, seed=3)
    assert found["labels"].tolist() == expected.tolist()


def test_landmarks_that_span_the_data_give_an_isometric_embedding_and_the_same_labels():
    x, d = _blobs(seed=4)
    landmarks = np.array([3, 17, 29, 41, 55, 8, 12, 33])  # 8 >= d + 1 in general position
    y = landmark_mds(d[:, landmarks], landmarks)
    embedded = ((y[:, None, :] - y[None, :, :]) ** 2).sum(-1)
    np.testing.assert_allclose(embedded, d, rtol=1e-9, atol=1e-9)
    assert y.shape == (60, 3)
    found = landmark_kmeans(d[:, landmarks], landmarks, 3, random_state=7)
    expected, _ = _oracle_labels(x, d, 3, seed=7)
    assert found["labels"].tolist() == expected.tolist()


def test_too_few_landmarks_project_onto_their_hull():
    x, d = _blobs(seed=6)
    landmarks = np.array([0, 1, 2])  # a plane through three rows: a projection
    y = landmark_mds(d[:, landmarks], landmarks)
    assert y.shape[1] == 2
    embedded = ((y[:, None, :] - y[None, :, :]) ** 2).sum(-1)
    np.testing.assert_allclose(embedded[np.ix_(landmarks, landmarks)],
                               d[np.ix_(landmarks, landmarks)], rtol=1e-9)
    assert (embedded <= d + 1e-9).all()  # a projection never lengthens a distance


def test_a_landmarks_session_result_is_accepted_as_is():
    from protocols._layout_plans import LandmarkDistances

    _, d = _blobs(seed=8)
    landmarks = np.arange(0, 60, 6)
    view = LandmarkDistances(None, d[:, landmarks], landmarks, 0)
    assert landmark_kmeans(view, n_clusters=3, random_state=1)["labels"].tolist() == \
        landmark_kmeans(d[:, landmarks], landmarks, 3, random_state=1)["labels"].tolist()


@pytest.mark.parametrize("columns, landmarks, match", [
    (np.zeros((4, 2)), [0], "one column per landmark"),
    (np.zeros((4, 2)), [0, 0], "distinct row indices"),
    (np.zeros((4, 2)), [0, 4], "distinct row indices"),
    (-np.ones((4, 2)), [0, 1], "finite squared distances"),
    (np.zeros((4, 2)), None, "landmarks are needed"),
])
def test_bad_inputs_are_refused(columns, landmarks, match):
    with pytest.raises(ParameterError, match=match):
        landmark_mds(columns, landmarks)


def test_the_coordinator_clusters_a_landmarks_session_and_each_party_gets_its_labels():
    from protocols import SessionParameters, run_memory_session

    x, _ = _blobs(seed=9, n=24)
    parts = {f"party-{i}": x[i * 6:(i + 1) * 6] / 8 for i in range(4)}
    params = SessionParameters(dim=3, bound=1.0, scale_bits=12, layout="landmarks",
                               n_landmarks=6)
    outcome, transcript = run_memory_session(
        parts, params, cluster=lambda view: landmark_kmeans(view, n_clusters=3,
                                                            random_state=0)["labels"])
    q = np.floor(np.clip(np.concatenate(list(parts.values())), -1, 1) * 4096 + 0.5)
    exact = ((q[:, None, :] - q[None, :, :]) ** 2).sum(-1) / 4.0 ** 12
    expected = landmark_kmeans(exact[:, outcome.landmarks], outcome.landmarks, 3,
                               random_state=0)["labels"]
    assert outcome.labels.tolist() == expected.tolist()
    assert transcript.parties["party-1"].labels.tolist() == expected[6:12].tolist()


def test_omnifc_cluster_runs_kmeans_on_a_landmarks_result_and_refuses_the_rest():
    import omnifc
    from protocols._layout_plans import LandmarkDistances, PairDistances

    _, d = _blobs(seed=10)
    landmarks = np.arange(0, 60, 5)
    view = LandmarkDistances(None, d[:, landmarks], landmarks, 0)
    raw = landmark_kmeans(d[:, landmarks], landmarks, 3, random_state=2)["labels"]
    labels = omnifc.cluster(view, "kmeans", 3, random_state=2)
    _, first = np.unique(raw, return_index=True)
    renumber = {old: new for new, old in enumerate(raw[np.sort(first)])}
    assert labels.tolist() == [renumber[v] for v in raw.tolist()]
    assert labels[0] == 0 and set(labels.tolist()) == {0, 1, 2}
    with pytest.raises(ParameterError, match="method 'dbscan' needs the full D"):
        omnifc.cluster(view, "dbscan", 3)  # ("spectral" runs: test_landmark_spectral.py)
    with pytest.raises(ParameterError, match="does not take option"):
        omnifc.cluster(view, "kmeans", 3, bandwidth=1.0)
    pairs = PairDistances(None, np.ones(2), [[0, 1], [1, 2]], 3, 0)
    with pytest.raises(ParameterError, match="'pairs' session"):
        omnifc.cluster(pairs, "kmeans", 2)


def test_secure_distance_matrix_computes_a_layout_and_omnifc_cluster_takes_it():
    import omnifc

    x, _ = _blobs(seed=11, n=18)
    parts = [x[:6] / 8, x[6:11] / 8, x[11:] / 8]
    q = np.floor(np.clip(np.concatenate(parts), -1, 1) * 256 + 0.5)
    exact = ((q[:, None, :] - q[None, :, :]) ** 2).sum(-1)
    result = omnifc.secure_distance_matrix(parts, bound=1.0, scale_bits=8,
                                           layout="landmarks", landmarks=[17, 3, 8, 0, 12])
    assert result.layout == "landmarks" and result.landmarks.tolist() == [17, 3, 8, 0, 12]
    assert np.array_equal(result.integer_distances, exact[:, [17, 3, 8, 0, 12]])
    assert np.array_equal(result.distances, exact[:, [17, 3, 8, 0, 12]] / 4.0 ** 8)
    assert result.owners.tolist() == [0] * 6 + [1] * 5 + [2] * 7
    labels = omnifc.cluster(result, "kmeans", 3, random_state=0)
    assert labels.tolist() == omnifc.cluster(
        _view(result.distances, result.landmarks), "kmeans", 3, random_state=0).tolist()
    pairs = omnifc.secure_distance_matrix(parts, bound=1.0, scale_bits=8, layout="pairs",
                                          pairs=[(0, 17), (4, 5)])
    assert pairs.integer_distances.tolist() == [exact[0, 17], exact[4, 5]]
    assert pairs.pairs.tolist() == [[0, 17], [4, 5]]
    drawn = omnifc.secure_distance_matrix(parts, bound=1.0, scale_bits=8,
                                          layout="landmarks", n_landmarks=4)
    assert np.array_equal(drawn.integer_distances, exact[:, drawn.landmarks])
    with pytest.raises(ParameterError, match="pairs= is for layout='pairs'"):
        omnifc.secure_distance_matrix(parts, bound=1.0, layout="landmarks", pairs=[(0, 1)])


def _view(values, landmarks):
    from protocols._layout_plans import LandmarkDistances

    return LandmarkDistances(None, values, landmarks, 0)
