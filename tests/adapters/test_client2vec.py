"""Client2Vec on protected client indices: similarities, sampling and MWU weights from D."""

from __future__ import annotations

import numpy as np
import pytest

from omnifc.adapters import client2vec as c2v
from omnifc.adapters import plaintext_distances, protect, quantize_rows


@pytest.fixture(scope="module")
def domains():
    clients, labels = c2v.synthetic_domains(seed=0)
    indices = [c2v.client_index(f, lab) for f, lab in clients]
    rows = np.stack([c2v.protected_vector(i) for i in indices])
    secure = protect(rows, bound=c2v.protection_bound(), parties=np.arange(len(rows)) % 4)
    return indices, labels, rows, secure


def _direct_set_similarity(indices, i, members):
    """Independent reference: mean over j in C, j != i of cos_f + cos_l."""
    def cos(a, b):
        return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))
    others = [j for j in members if j != i]
    if not others:
        return 0.0
    return float(np.mean([cos(indices[i][0], indices[j][0]) + cos(indices[i][1], indices[j][1])
                          for j in others]))


def test_within_domain_feature_cosine_near_one_cross_domain_low(domains):
    indices, labels, _, _ = domains
    unit = np.stack([i[0] / np.linalg.norm(i[0]) for i in indices])
    cos_f = 1.0 - protect(unit, bound=1.0, parties=np.arange(len(unit)) % 3).distances / 2.0
    same = labels[:, None] == labels[None, :]
    off = ~np.eye(len(labels), dtype=bool)
    assert cos_f[same & off].min() > 0.99
    assert np.abs(cos_f[~same]).max() < 0.3


def test_secure_outputs_equal_plaintext_outputs_exactly(domains):
    indices, _, rows, secure = domains
    plain = plaintext_distances(quantize_rows(rows, bound=c2v.protection_bound()))
    assert np.array_equal(secure.distances, plain)
    s_secure, s_plain = c2v.pair_similarity(secure.distances), c2v.pair_similarity(plain)
    previous = [0, 5, 10, 15]
    history = [[1, 6], [0, 5, 10, 15], [3, 4, 19]]
    assert np.array_equal(c2v.sampling_probabilities(s_secure, previous),
                          c2v.sampling_probabilities(s_plain, previous))
    assert np.array_equal(c2v.mwu_weights(s_secure, history), c2v.mwu_weights(s_plain, history))


def test_sampling_and_mwu_from_distances_equal_direct_computation(domains):
    indices, _, _, secure = domains
    n = len(indices)
    s = c2v.pair_similarity(secure.distances)
    previous = [0, 5, 10, 15]
    history = [[1, 6], [0, 5, 10, 15], [3, 4, 19]]
    q = np.linspace(1.0, 2.0, n)
    tau, lam, gamma = c2v.DEFAULT_TAU, c2v.DEFAULT_LAMBDA, c2v.DEFAULT_GAMMA
    direct_s = np.array([_direct_set_similarity(indices, i, previous) for i in range(n)])
    p = np.exp(direct_s / tau)
    p /= p.sum()
    score = sum(gamma ** (len(history) - t) * np.array(
        [_direct_set_similarity(indices, i, c) for i in range(n)])
        for t, c in enumerate(history, start=1))
    w = q * np.exp(score / lam)
    w /= w.sum()
    # Quantization of unit vectors at 2^-16 moves similarities by < 1e-4.
    np.testing.assert_allclose(c2v.sampling_probabilities(s, previous), p, atol=1e-5)
    np.testing.assert_allclose(c2v.mwu_weights(s, history, data_weights=q), w, atol=1e-5)
    # The server formulas on exact similarities equal the reference to 1e-12.
    np.testing.assert_allclose(
        c2v.sampling_probabilities(c2v.direct_pair_similarity(indices), previous), p, atol=1e-12)


def test_mwu_concentrates_on_clients_close_to_the_sampled_sets(domains):
    _, labels, _, secure = domains
    s = c2v.pair_similarity(secure.distances)
    history = [np.flatnonzero(labels == 2)[:3], np.flatnonzero(labels == 2)[2:5]]
    w = c2v.mwu_weights(s, history)
    assert w[labels == 2].sum() > 0.5
    among = np.arange(8)
    restricted = c2v.mwu_weights(s, history, among=among)
    assert restricted[8:].sum() == 0 and restricted.sum() == pytest.approx(1.0)


def test_weighted_parts_by_prescaling():
    rng = np.random.Generator(np.random.PCG64(5))
    indices = [(rng.normal(size=6), rng.normal(size=3)) for _ in range(4)]
    rows = np.stack([c2v.protected_vector(i, weights=(2.0, 0.5)) for i in indices])
    d = ((rows[:, None] - rows[None]) ** 2).sum(-1)
    np.testing.assert_allclose(c2v.pair_similarity(d, weights=(2.0, 0.5)),
                               c2v.direct_pair_similarity(indices, weights=(2.0, 0.5)), atol=1e-12)
    with pytest.raises(ValueError):
        c2v.protected_vector(indices[0], weights=(1.0, -1.0))


def test_set_similarity_excludes_self_and_handles_empty_sets():
    s = np.array([[2.0, 1.0, 0.0], [1.0, 2.0, -1.0], [0.0, -1.0, 2.0]])
    assert c2v.set_similarity(s, [0]).tolist() == [0.0, 1.0, 0.0]
    assert c2v.set_similarity(s, [0, 1]).tolist() == [1.0, 1.0, -0.5]
