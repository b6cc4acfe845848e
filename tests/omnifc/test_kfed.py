"""k-FED baseline: local centres, farthest-point seeding, one Lloyd step."""

from __future__ import annotations

import numpy as np
import pytest

import omnifc


def mixture(seed=0, per=40):
    rng = np.random.Generator(np.random.PCG64(seed))
    centers = np.array([[0.0, 0.0], [10.0, 0.0], [0.0, 10.0], [10.0, 10.0]])
    x = np.concatenate([rng.normal(c, 0.6, size=(per, 2)) for c in centers])
    return x, np.repeat(np.arange(4), per)


def test_one_class_per_party_is_recovered():
    x, y = mixture()
    parties = [x[y == c] for c in range(4)]
    model = omnifc.KFed(n_clusters=4, random_state=0).fit(parties)
    assert [c.shape for c in model.local_centers_] == [(2, 2)] * 4     # k' = floor(sqrt 4)
    assert omnifc.adjusted_rand(np.repeat(np.arange(4), 40), model.labels_global_) == 1.0
    assert model.cluster_centers_.shape == (4, 2)


def test_hand_checked_server_step():
    # each party one point per cluster at k' = 1: centres are the points themselves
    parties = [np.array([[0.0, 0.0]]), np.array([[0.0, 1.0]]), np.array([[10.0, 0.0]]),
               np.array([[10.0, 1.0]])]
    model = omnifc.KFed(n_clusters=2, local_clusters=1, random_state=0).fit(parties)
    labels = model.labels_global_.tolist()
    assert labels[0] == labels[1] != labels[2] == labels[3]
    # one Lloyd step: centres are the means of the assigned uploaded centres
    centres = sorted(map(tuple, model.cluster_centers_.tolist()))
    assert centres == [(0.0, 0.5), (10.0, 0.5)]


def test_mixed_parties_defeat_proxy_aggregation():
    """IID parties with k' = 1: every party's points share one label (what OmniFC fixes)."""
    x, y = mixture(seed=1)
    order = np.random.Generator(np.random.PCG64(2)).permutation(len(x))
    parties = np.array_split(x[order], 4)
    model = omnifc.KFed(n_clusters=4, local_clusters=1, random_state=0).fit(parties)
    for labels in model.party_labels_:
        assert len(set(labels.tolist())) == 1
    assert omnifc.adjusted_rand(y[order], model.labels_global_) < 0.2
    exact = omnifc.FederatedClustering(method="kmeans", n_clusters=4, bound=16.0,
                                       random_state=0).fit(parties)
    assert omnifc.adjusted_rand(y[order], exact.labels_global_) == 1.0


def test_bad_parameters():
    x, _ = mixture()
    with pytest.raises(omnifc.ParameterError, match="local_clusters"):
        omnifc.KFed(n_clusters=2, local_clusters=3).fit([x, x])
    with pytest.raises(omnifc.ParameterError, match="n_clusters"):
        omnifc.KFed(n_clusters=0).fit([x])
    with pytest.raises(omnifc.ParameterError, match="uploaded centres"):
        omnifc.KFed(n_clusters=9, local_clusters=3).fit([x, x])
    with pytest.raises(omnifc.InputError, match="empty"):
        omnifc.KFed(n_clusters=2).fit([x, np.zeros((0, 2))])
