"""``omnifc.secure_distance_matrix(out="D.zarr")``: the public path to the Zarr result
(issue 22), clustered like the in-memory and ``.npy`` results. References: exact squared
distances of the quantized rows in numpy integers, and the labels of the dense result."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("zarr")
da = pytest.importorskip("dask.array")

import omnifc  # noqa: E402

pytestmark = pytest.mark.timeout(120)


def _quantized_sq(x, scale_bits):
    q = np.floor(np.clip(x, -16, 16) * 2.0 ** scale_bits + 0.5).astype(np.int64)
    return ((q[:, None, :] - q[None, :, :]) ** 2).sum(-1)


@pytest.mark.slow
def test_the_public_path_writes_a_store_that_dask_reads_and_that_clusters(tmp_path):
    rng = np.random.default_rng(4)
    centres = rng.normal(0, 4, (3, 4))
    x = np.vstack([c + rng.normal(0, 0.5, (20, 4)) for c in centres])
    x = x[rng.permutation(len(x))]
    parties = [x[:25], x[25:40], x[40:]]
    kwargs = dict(bound=16.0, scale_bits=6)
    dense = omnifc.secure_distance_matrix(parties, **kwargs)
    zarr = omnifc.secure_distance_matrix(parties, out=tmp_path / "D.zarr", **kwargs)
    npy = omnifc.secure_distance_matrix(parties, out=tmp_path / "D.npy", **kwargs)
    exact = _quantized_sq(x, 6)
    assert zarr.store.format == "zarr" and zarr.integer_distances is zarr.store.integer
    lazy = da.from_zarr(str(tmp_path / "D.zarr"), component="integer")
    assert np.array_equal(lazy.compute(), exact)
    assert lazy.compute().tobytes() == np.load(tmp_path / "D.npy").tobytes()
    expected = omnifc.cluster(dense.distances, "kmeans", 3, random_state=0, n_init=4)
    for result in (zarr, npy, omnifc.DistanceStore.open(tmp_path / "D.zarr")):
        assert np.array_equal(omnifc.cluster(result, "kmeans", 3, random_state=0, n_init=4),
                              expected)
        assert np.array_equal(omnifc.cluster(result, "kmeans", 3, random_state=0, n_init=4,
                                             out_of_core=True, n_components=4),
                              omnifc.cluster(dense.distances, "kmeans", 3, random_state=0,
                                             n_init=4))
    on_dask = omnifc.cluster(zarr, "kmeans", 3, random_state=0, n_init=4, n_components=4,
                             dask="synchronous")
    assert np.array_equal(on_dask, expected)
