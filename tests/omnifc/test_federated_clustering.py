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
