"""FederatedClustering(distances="landmarks", n_landmarks=L): the session computes only
D[:, L] (L rows drawn from its public randomness) and k-means runs on landmark MDS
coordinates; predict places new rows with the fit's landmarks and centroids."""

from __future__ import annotations

import numpy as np
import pytest

import omnifc
from finite_field import ParameterError
from omnifc._clustering import landmark_kmeans, landmark_mds

pytestmark = pytest.mark.timeout(180)


def _parties(seed=0):
    rng = np.random.default_rng(seed)
    centers = np.array([[0.2, 0.2, 0.2], [0.8, 0.8, 0.2], [0.2, 0.8, 0.8]])
    x = centers[rng.integers(3, size=30)] + rng.normal(0, 0.08, (30, 3))
    return [x[:10], x[10:18], x[18:]], x


def _exact(rows, scale_bits=12):
    q = np.floor(np.clip(rows, -1, 1) * 2.0 ** scale_bits + 0.5)
    return ((q[:, None, :] - q[None, :, :]) ** 2).sum(-1) / 4.0 ** scale_bits


def test_fit_computes_only_landmark_columns_and_clusters_them_exactly():
    parties, x = _parties()
    model = omnifc.FederatedClustering(n_clusters=3, bound=1.0, scale_bits=12,
                                       random_state=0, distances="landmarks",
                                       n_landmarks=6).fit(parties)
    result = model.distance_result_
    assert result.layout == "landmarks" and result.distances.shape == (30, 6)
    landmarks = result.landmarks
    exact = _exact(x)[:, landmarks]
    assert np.array_equal(result.distances, exact)
    expected = omnifc.cluster(_Columns(exact, landmarks), "kmeans", 3, random_state=0)
    assert model.labels_.tolist() == expected.tolist()
    assert [len(p) for p in model.party_labels_] == [10, 8, 12]


class _Columns:
    def __init__(self, values, landmarks):
        self.values, self.landmarks = values, landmarks


def test_predict_places_new_rows_by_the_fits_landmarks_and_centroids():
    parties, x = _parties(seed=1)
    model = omnifc.FederatedClustering(n_clusters=3, bound=1.0, scale_bits=12,
                                       random_state=0, distances="landmarks",
                                       n_landmarks=5).fit(parties)
    new = np.array([[0.21, 0.19, 0.2], [0.79, 0.81, 0.22], [0.2, 0.77, 0.8]])
    labels = model.predict(new)
    # the oracle: the plaintext landmark MDS of the new rows, nearest fitted centroid
    landmarks = model.distance_result_.landmarks
    everything = _exact(np.concatenate([x, new]))[:, landmarks]
    embedding = landmark_mds(everything, landmarks)[30:]
    centers = model.details_["cluster_centers"]
    expected = np.argmin(((embedding[:, None] - centers[None]) ** 2).sum(-1), axis=1)
    assert labels.tolist() == expected.tolist()
    assert sorted(labels.tolist()) == [0, 1, 2]
    # the fitted rows themselves land in their own clusters (Lloyd's fixed point)
    assert model.predict(x[:10]).tolist() == model.party_labels_[0].tolist()


@pytest.mark.parametrize("kwargs, match", [
    (dict(distances="landmarks", n_landmarks=4, method="dbscan"),
     "method must be 'kmeans' or 'spectral'"),
    (dict(distances="landmarks"), "needs n_landmarks"),
    (dict(distances="sparse", n_landmarks=4), "distances must be 'full' or 'landmarks'"),
])
def test_bad_landmark_settings_are_refused_before_anything_runs(kwargs, match):
    parties, _ = _parties()
    with pytest.raises(ParameterError, match=match):
        omnifc.FederatedClustering(n_clusters=3, bound=1.0, **kwargs).fit(parties)
