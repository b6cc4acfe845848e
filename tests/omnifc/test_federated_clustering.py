"""FederatedClustering: secure reconstruction then clustering; per-party and global labels."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.spatial.distance import cdist

import omnifc


def quantize(x, bound, scale_bits=16):
    return np.floor(np.clip(x, 0.0, bound) * 2.0**scale_bits + 0.5) / 2.0**scale_bits


@pytest.fixture(scope="module")
def iris_parties():
    data = omnifc.load_dataset("iris")
    parts = omnifc.split_non_iid(data.labels, 3, 0.5)
    return data, parts


def test_labels_per_party_and_global(iris_parties):
    data, parts = iris_parties
    parties = {f"org-{i}": data.features[p] for i, p in enumerate(parts)}
    model = omnifc.FederatedClustering(method="hierarchical", n_clusters=3, bound=data.bound,
                                       nonnegative=True, options={"linkage": "average"})
    global_labels = model.fit_predict(parties)
    per_party = model.party_labels_
    assert np.array_equal(global_labels, model.labels_)
    assert model.party_names_ == ["org-0", "org-1", "org-2"]
    # a dict in, a dict out (as clipped_); a list in, a list out
    assert isinstance(per_party, dict) and list(per_party) == model.party_names_
    assert list(model.clipped_) == model.party_names_
    assert [len(labels) for labels in per_party.values()] == [len(p) for p in parts]
    assert np.array_equal(np.concatenate(list(per_party.values())), model.labels_global_)
    as_list = omnifc.FederatedClustering(method="hierarchical", n_clusters=3,
                                         bound=data.bound, nonnegative=True,
                                         options={"linkage": "average"}).fit(
        list(parties.values()))
    assert isinstance(as_list.party_labels_, list)
    assert [labels.tolist() for labels in as_list.party_labels_] == \
        [labels.tolist() for labels in per_party.values()]
    plain = quantize(np.concatenate([data.features[p] for p in parts]), data.bound)
    expected = omnifc.cluster(cdist(plain, plain, "sqeuclidean"), "hierarchical", 3,
                              linkage="average")
    assert model.labels_global_.tolist() == expected.tolist()
    result = model.distance_result_
    assert result.owners.tolist() == sum(([i] * len(p) for i, p in enumerate(parts)), [])
    assert result.parameters["segments"] == 1 and result.parameters["noise_segments"] == 1


def test_kmeans_details_and_parameters_pass_through(iris_parties):
    data, parts = iris_parties
    model = omnifc.FederatedClustering(method="kmeans", n_clusters=3, bound=data.bound,
                                       nonnegative=True, scale_bits=10, random_state=4)
    model.fit([data.features[p] for p in parts])
    assert model.distance_result_.parameters["scale_bits"] == 10
    seeds = model.details_["init_indices"]
    assert seeds.shape == (3,)
    assert omnifc.kappa(data.labels[np.concatenate(parts)], model.labels_global_) > 0.8


def test_more_segments_needs_more_parties(iris_parties):
    data, parts = iris_parties
    model = omnifc.FederatedClustering(method="kmeans", n_clusters=3, bound=data.bound,
                                       segments=2, noise_segments=1)
    with pytest.raises(omnifc.ParameterError):
        model.fit([data.features[p] for p in parts])


def test_bad_input_is_refused(iris_parties):
    data, parts = iris_parties
    arrays = [data.features[p] for p in parts]
    with pytest.raises(omnifc.ParameterError, match="bound"):
        omnifc.FederatedClustering(n_clusters=3).fit(arrays)
    empty = arrays[:2] + [np.zeros((0, 4))]
    with pytest.raises(omnifc.InputError, match="empty"):
        omnifc.FederatedClustering(n_clusters=3, bound=8.0).fit(empty)
    with pytest.raises(omnifc.InputError, match="d must be equal"):
        omnifc.FederatedClustering(n_clusters=3, bound=8.0).fit(arrays[:2] + [arrays[2][:, :3]])
    with pytest.raises(omnifc.ParameterError, match="n_clusters"):
        omnifc.FederatedClustering(n_clusters=500, bound=8.0, nonnegative=True).fit(arrays)
    with pytest.raises(omnifc.ParameterError, match="unknown clustering method"):
        omnifc.FederatedClustering(method="birch", n_clusters=3, bound=8.0,
                                   nonnegative=True).fit(arrays)


# -- folded in from test_first_day.py -----------------------------------------------------
# Issue 13, a new user's first day: API-side fixes (one array refused, clipping reported
# and bounded, predict). Its scikit-learn conformance run is in test_clustering_sklearn.py,
# its audit figure texts in tests/audit/test_audit_leakage.py and test_audit_privacy.py.

def three_blobs(seed=0, n=30):
    rng = np.random.Generator(np.random.PCG64(seed))
    centres = np.array([[0.0, 0.0, 0.0, 0.0], [5.0, 5.0, 0.0, 0.0], [0.0, 5.0, 5.0, 0.0]])
    y = np.repeat(np.arange(3), n // 3)
    return centres[y] + rng.normal(scale=0.3, size=(n, 4)), y


# -- item 1: one 2-D array is not "one party per row" ----------------------------------
@pytest.mark.parametrize("fit", [
    lambda x: omnifc.FederatedClustering(n_clusters=3, bound=10.0).fit(x),
    lambda x: omnifc.KFed(n_clusters=3).fit(x),
    lambda x: omnifc.secure_distance_matrix(x, bound=10.0),
    lambda x: omnifc.FederatedClustering(n_clusters=3, bound=10.0).fit(list(x)),
])
def test_one_array_is_refused_with_the_fix_in_the_message(fit):
    x, _ = three_blobs()
    with pytest.raises(omnifc.InputError, match=r"list \(or dict name -> array\)"):
        fit(x)


def test_one_array_with_owners_gives_labels_in_the_rows_order():
    x, _ = three_blobs()
    owners = np.array(["a", "b", "c"] * 10)       # interleaved: row order != party order
    model = omnifc.FederatedClustering(n_clusters=3, bound=10.0, method="hierarchical",
                                       options={"linkage": "average"}).fit(x, owners=owners)
    assert model.party_names_ == ["a", "b", "c"]
    q = np.round(x * 2**16) / 2**16
    expected = omnifc.cluster(cdist(q, q, "sqeuclidean"), "hierarchical", 3,
                              linkage="average")
    assert omnifc.adjusted_rand(expected, model.labels_) == 1.0
    assert model.labels_.shape == (30,)
    for name, labels in zip("abc", model.party_labels_):
        assert np.array_equal(labels, model.labels_[owners == name])
    kfed = omnifc.KFed(n_clusters=3, local_clusters=1, random_state=0).fit(x, owners=owners)
    for name, labels in zip("abc", kfed.party_labels_):
        assert np.array_equal(labels, kfed.labels_[owners == name])


def test_labels_is_one_array_in_global_order():
    x, y = three_blobs()
    parts = [x[:7], x[7:20], x[20:]]
    model = omnifc.FederatedClustering(n_clusters=3, bound=10.0, random_state=0).fit(parts)
    assert isinstance(model.labels_, np.ndarray) and model.labels_.shape == (30,)
    assert np.array_equal(np.concatenate(model.party_labels_), model.labels_)
    assert omnifc.adjusted_rand(y, model.labels_) == 1.0
    assert model.n_features_in_ == 4


# -- item 3: clipping is reported per party and bounded --------------------------------
def test_clipping_reported_per_party_and_refused_above_the_limit():
    x, _ = three_blobs()
    parts = {"a": x[:10], "b": x[10:20], "c": x[20:].copy()}
    parts["c"][:, 0] = 50.0                        # a quarter of party c's entries
    with pytest.raises(omnifc.InputError, match=r"party 'c'.*10 of 40 entries \(25\.0%\)"):
        omnifc.FederatedClustering(n_clusters=3, bound=10.0).fit(parts)
    with pytest.raises(omnifc.InputError, match=r"party 'c'"):
        omnifc.secure_distance_matrix(parts, bound=10.0)
    model = omnifc.FederatedClustering(n_clusters=3, bound=10.0, max_clipped=1.0).fit(parts)
    assert model.clipped_ == {"a": (0, 0.0), "b": (0, 0.0), "c": (10, 0.25)}
    result = model.distance_result_
    assert result.clipped == {"a": 0, "b": 0, "c": 10}
    assert result.clipped_fraction == {"a": 0.0, "b": 0.0, "c": 0.25}


def test_clip_error_is_reachable_from_the_estimator():
    x, _ = three_blobs()
    big = [np.vstack([p] * 20) for p in (x[:10], x[10:20], x[20:])]
    big[2][0, 0] = 10.5                            # 1 of 800 entries: under the 1% limit
    model = omnifc.FederatedClustering(n_clusters=3, bound=10.0).fit(big)
    assert model.clipped_["party-2"] == (1, 1 / 800)
    with pytest.raises(omnifc.InputError, match=r"found 10\.5 at row 0"):
        omnifc.FederatedClustering(n_clusters=3, bound=10.0, clip="error").fit(big)


def test_predict_where_the_method_has_one():
    x, _ = three_blobs(n=30)
    model = omnifc.FederatedClustering(n_clusters=3, bound=10.0, random_state=0,
                                       scale_bits=12).fit([x[:10], x[10:20], x[20:]])
    assert np.array_equal(model.predict([x[:10], x[10:20], x[20:]]), model.labels_)
    new = np.random.Generator(np.random.PCG64(5)).uniform(-1, 6, (9, 4))
    predicted = model.predict([new[:4], new[4:]])
    # independent oracle: nearest centroid of the quantized training rows, in plaintext
    q = np.round(x * 2**12) / 2**12
    centres = np.array([q[model.labels_ == k].mean(axis=0) for k in range(3)])
    qn = np.round(new * 2**12) / 2**12
    expected = ((qn[:, None, :] - centres[None]) ** 2).sum(-1).argmin(axis=1)
    assert predicted.tolist() == expected.tolist()
    medoids = omnifc.FederatedClustering(method="kmedoids", n_clusters=3, bound=10.0,
                                         scale_bits=12).fit([x[:10], x[10:20], x[20:]])
    m = medoids.details_["medoid_indices"]
    model_free = medoids.labels_[m][((qn[:, None] - q[m][None]) ** 2).sum(-1)
                                                .argmin(axis=1)]
    assert medoids.predict([new[:4], new[4:]]).tolist() == model_free.tolist()
    assert not hasattr(omnifc.FederatedClustering(method="spectral"), "predict")


