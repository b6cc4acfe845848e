"""secure_distance_matrix(out=..., memory_budget=...) and the estimators on an on-disk result."""

from __future__ import annotations

import numpy as np
import pytest

import omnifc
from finite_field import InputError, ParameterError
from omnifc import DistanceStore, TiledDistances


@pytest.fixture(scope="module")
def parties():
    rng = np.random.default_rng(11)
    centers = np.array([[0.1, 0.1, 0.2], [0.8, 0.7, 0.9], [0.2, 0.9, 0.1]])
    x = np.vstack([c + 0.03 * rng.standard_normal((20, 3)) for c in centers])
    x = x[rng.permutation(60)]
    return {"a": x[:25], "b": x[25:40], "c": x[40:]}


@pytest.mark.slow
def test_secure_result_on_disk_equals_in_memory(parties, tmp_path):
    kwargs = dict(bound=1.0, scale_bits=10, nonnegative=True)
    dense = omnifc.secure_distance_matrix(parties, **kwargs)
    on_disk = omnifc.secure_distance_matrix(parties, out=tmp_path / "d.npy", **kwargs)
    assert isinstance(on_disk.store, DistanceStore) and on_disk.store.on_disk
    assert isinstance(on_disk.distances, TiledDistances)
    assert isinstance(on_disk.integer_distances, np.memmap)
    assert on_disk.integer_distances.dtype == np.int32
    assert np.array_equal(np.asarray(on_disk.integer_distances), dense.integer_distances)
    assert np.array_equal(np.asarray(on_disk.distances), dense.distances)
    assert np.array_equal(on_disk.rows_of("b"), dense.rows_of("b"))
    assert on_disk.parameters == dense.parameters
    reopened = DistanceStore.open(tmp_path / "d.npy")
    assert np.array_equal(np.asarray(reopened.integer), dense.integer_distances)
    in_ram = omnifc.secure_distance_matrix(parties, memory_budget=2**30, **kwargs)
    assert not in_ram.store.on_disk
    for method in ("kmeans", "kmedoids", "dbscan"):
        k = None if method == "dbscan" else 3
        expected = omnifc.cluster(dense.distances, method, k, random_state=0)
        for result in (on_disk, in_ram):
            assert np.array_equal(
                omnifc.cluster(result, method, k, random_state=0, out_of_core=True), expected)


@pytest.mark.slow
def test_estimators_accept_the_on_disk_result(parties):
    result = omnifc.secure_distance_matrix(parties, bound=1.0, scale_bits=10,
                                           nonnegative=True, memory_budget=0)
    dense = np.asarray(result.distances)
    assert result.store.on_disk  # budget 0: streamed methods are chosen automatically
    a = omnifc.DistanceKMeans(3, random_state=0).fit(result.distances)
    b = omnifc.DistanceKMeans(3, random_state=0).fit(dense)
    assert np.array_equal(a.labels_, b.labels_)
    assert np.array_equal(a.init_indices_, b.init_indices_)
    c = omnifc.DistanceDBSCAN(min_samples=4).fit(result.store)
    assert np.array_equal(c.labels_, omnifc.DistanceDBSCAN(min_samples=4).fit(dense).labels_)
    with pytest.raises(ParameterError, match="needs all of D in memory"):
        omnifc.DistanceHierarchical(3).fit(result.distances)


def test_from_integer_checks_its_input(tmp_path):
    with pytest.raises(InputError, match="integer square"):
        DistanceStore.from_integer(np.zeros((2, 3), dtype=np.int64), scale_bits=0)
    with pytest.raises(InputError, match=r"\[0, 5\]"):
        DistanceStore.from_integer(np.array([[0, 6], [6, 0]]), scale_bits=0, distance_bound=5,
                                   out=tmp_path / "d.npy")
    assert not list(tmp_path.iterdir())
    big = DistanceStore.from_integer(np.array([[0, 2**40], [2**40, 0]]), scale_bits=0)
    assert big.integer.dtype == np.int64 and big.integer[0, 1] == 2**40
