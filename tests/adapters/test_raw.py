"""OmniFC raw samples through the same interface, and the ``simulate --adapter`` examples."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import adjusted_rand_score

from finite_field import InputError
from omnifc.adapters import raw
from omnifc.cli import main

pytestmark = pytest.mark.timeout(120)


def test_raw_secure_labels_equal_plaintext_labels():
    rng = np.random.Generator(np.random.PCG64(0))
    x = np.concatenate([rng.normal(c, 0.4, (12, 3)) for c in (-2.0, 0.0, 2.0)])
    truth = np.repeat([0, 1, 2], 12)
    order = rng.permutation(36)
    parties = {"a": x[order[:10]], "b": x[order[10:25]], "c": x[order[25:]]}
    secure = raw.run(parties, bound=5.0, n_clusters=3, random_state=1)
    plain = raw.run(parties, bound=5.0, n_clusters=3, random_state=1, secure=False)
    assert np.array_equal(secure.labels, plain.labels)
    assert np.array_equal(secure.distances, plain.distances)
    assert [len(v) for v in secure.party_labels.values()] == [10, 15, 11]
    assert adjusted_rand_score(truth[order], secure.labels) == 1.0
    hier = raw.run(parties, bound=5.0, n_clusters=3, method="hierarchical", secure=False)
    assert adjusted_rand_score(truth[order], hier.labels) == 1.0


@pytest.mark.parametrize("name", ["raw", "client2vec"])
def test_simulate_adapter_prints_the_claim_next_to_the_results(name, capsys):
    assert main(["simulate", "--adapter", name]) == 0
    out = capsys.readouterr().out
    assert "claim" in out and "secure" in out
    assert f"adapter          {name}" in out


def test_simulate_without_adapter_is_unchanged(capsys):
    assert main(["simulate", "--dataset", "iris"]) == 0
    assert "exact         yes" in capsys.readouterr().out


# -- folded in from test_raw_bites.py -----------------------------------------------------
# omnifc.adapters.raw pinned against independent expectations (mutation testing, issue 14).
#
# Each test kills mutants of raw.py that the adapter tests let survive: the dtype and shape of
# the client rows, every argument reaching the protocol and the clustering, the per-party
# split of the labels. Expected values come from numpy on the plaintext rows (quantized by
# hand: round(2^q clip(x)) / 2^q) and from exact hand-made partitions.

def _hand_distances(x):
    x = np.asarray(x, dtype=np.float64)
    diff = x[:, None, :] - x[None, :, :]
    return (diff * diff).sum(axis=2)


def _same_partition(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    pairs = set(zip(a.tolist(), b.tolist()))
    return len(pairs) == len(set(a.tolist())) == len(set(b.tolist()))


def _blobs():
    # three tight, far-apart groups; rows listed party by party
    return {"a": np.array([[0.0, 0.0], [0.25, 0.0]]),
            "b": np.array([[3.0, 3.0], [3.25, 3.0], [0.0, 0.25]]),
            "c": np.array([[-3.0, 3.0]])}


def test_client_rows_are_float64_and_two_dimensional():
    one = raw.client_rows([1, 2, 3])
    assert one.dtype == np.float64 and one.shape == (1, 3)
    assert one.tolist() == [[1.0, 2.0, 3.0]]
    many = raw.client_rows(np.array([[1, 2], [3, 4]], dtype=np.int32))
    assert many.dtype == np.float64 and many.tolist() == [[1.0, 2.0], [3.0, 4.0]]


def test_cluster_samples_passes_method_k_and_options():
    x = np.concatenate(list(_blobs().values()))
    d = _hand_distances(x)
    truth = [0, 0, 1, 1, 0, 2]
    assert _same_partition(raw.cluster_samples(d, n_clusters=3), truth)  # kmeans by default
    assert _same_partition(raw.cluster_samples(d, method="hierarchical", n_clusters=3), truth)
    two = raw.cluster_samples(d, n_clusters=2)
    assert len(set(two.tolist())) == 2
    # options reach the method: with eps far below every distance DBSCAN marks all as noise
    assert raw.cluster_samples(d, method="dbscan", eps=1e-3, min_samples=2).tolist() == [-1] * 6
    assert raw.cluster_samples(d, method="dbscan", eps=0.5, min_samples=2).tolist() != [-1] * 6


def test_cluster_samples_default_seed_is_zero():
    rng = np.random.default_rng(5)
    d = _hand_distances(rng.uniform(0, 1, (40, 2)))
    runs = {seed: raw.cluster_samples(d, n_clusters=6, n_init=1, random_state=seed).tolist()
            for seed in range(6)}
    assert len({tuple(v) for v in runs.values()}) > 1   # the seed matters on these data
    assert raw.cluster_samples(d, n_clusters=6, n_init=1).tolist() == runs[0]


def test_run_default_seed_is_zero_and_seed_reaches_the_clustering():
    rng = np.random.default_rng(7)
    parties = {n: rng.uniform(0, 1, (12, 2)) for n in "abc"}
    seeded = {s: raw.run(parties, bound=1.0, n_clusters=6, n_init=1, random_state=s,
                         secure=False).labels.tolist() for s in range(6)}
    assert len({tuple(v) for v in seeded.values()}) > 1
    assert raw.run(parties, bound=1.0, n_clusters=6, n_init=1, secure=False).labels.tolist() \
        == seeded[0]


@pytest.mark.parametrize("secure", [True, False])
def test_run_uses_bound_scale_bits_and_nonnegative(secure):
    parties = {"a": np.array([[-0.3, 0.3], [1.7, 0.1]]), "b": np.array([[0.55, 0.9]]),
               "c": np.array([[0.2, -2.0], [0.8, 0.45]])}
    x = np.concatenate(list(parties.values()))
    for bound, bits, nonneg in [(1.0, 4, True), (1.0, 3, False), (0.5, 5, False)]:
        low = 0.0 if nonneg else -bound
        q = np.round(np.clip(x, low, bound) * 2**bits) / 2**bits   # no ties in these values
        out = raw.run(parties, bound=bound, scale_bits=bits, nonnegative=nonneg,
                      n_clusters=2, secure=secure, protocol_options={"max_clipped": 1.0})
        assert np.array_equal(out.distances, _hand_distances(q)), (bound, bits, nonneg)


def test_run_splits_the_labels_by_party_in_order():
    parties = _blobs()
    out = raw.run(parties, bound=4.0, n_clusters=3, method="hierarchical")
    assert _same_partition(out.labels, [0, 0, 1, 1, 0, 2])
    assert list(out.party_labels) == ["a", "b", "c"]
    assert out.party_labels["a"].tolist() == out.labels[0:2].tolist()
    assert out.party_labels["b"].tolist() == out.labels[2:5].tolist()
    assert out.party_labels["c"].tolist() == out.labels[5:6].tolist()
    # the method and options reach the clustering from run() too
    noise = raw.run(parties, bound=4.0, method="dbscan", eps=1e-3, min_samples=2)
    assert noise.labels.tolist() == [-1] * 6
    assert len(set(raw.run(parties, bound=4.0, n_clusters=2).labels.tolist())) == 2


def test_run_passes_protocol_options():
    parties = {"a": np.array([[0.0, 3.0]]), "b": np.array([[0.5, 0.5]]),
               "c": np.array([[0.25, 0.0]])}
    # half of party a's entries lie outside the bound: refused unless the protocol option
    # max_clipped allows it, and then clipped to 1.0
    with pytest.raises(InputError, match="outside the public bound"):
        raw.run(parties, bound=1.0, n_clusters=2)
    out = raw.run(parties, bound=1.0, n_clusters=2, protocol_options={"max_clipped": 1.0})
    assert out.distances[0, 1] == 0.25 + 0.25


@pytest.mark.parametrize("secure", [True, False])
def test_run_default_step_is_two_to_the_minus_16(secure):
    parties = {"a": np.array([[1 / 3]]), "b": np.array([[0.0]]), "c": np.array([[0.5]])}
    out = raw.run(parties, bound=1.0, n_clusters=2, secure=secure)
    third = 21845 / 65536                       # round(2^16 / 3) / 2^16
    assert out.distances[0, 1] == third ** 2
    assert out.distances[0, 2] == (0.5 - third) ** 2
