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


# ---------------------------------------------------------------- index network and FL loop

def test_index_network_gradients_match_finite_differences():
    rng = np.random.default_rng(0)
    e = rng.normal(size=(12, 5))
    y = rng.integers(0, 3, 12)
    lv = c2v.label_embeddings(3, 4)
    params = [rng.normal(size=(5, 4)) * .3, rng.normal(size=(5, 4)) * .3,
              rng.normal(size=(8, 5)) * .3]
    noise = 0.1 * rng.normal(size=(2, 12, 5))
    _, grads = c2v._simulation._index_losses(params, e, y, lv, noise, 0.5)
    for which in range(3):
        for idx in [(0, 0), (2, 1), (4, 3)]:
            up = [p.copy() for p in params]
            down = [p.copy() for p in params]
            up[which][idx] += 1e-6
            down[which][idx] -= 1e-6
            numeric = (c2v._simulation._index_losses(up, e, y, lv, noise, .5)[0][0]
                       - c2v._simulation._index_losses(down, e, y, lv, noise, .5)[0][0]) / 2e-6
            assert numeric == pytest.approx(grads[which][idx], rel=1e-5, abs=1e-7)


def test_index_network_training_lowers_every_loss():
    from omnifc import fl
    from omnifc.adapters.fmcl import fixed_encoder

    x, y = fl.load_pool("digits")
    e = fixed_encoder(64, 32)(x[:400])
    net = c2v.fit_index_network(e, y[:400], c2v.label_embeddings(10, 16), steps=150)
    first, last = np.array(net.losses[0]), np.mean(net.losses[-10:], axis=0)
    assert np.all(last[[0, 2, 4]] < first[[0, 2, 4]])   # total, L_sim, L_recon
    assert last[3] < 0.1 and last[1] < first[1]         # L_orth small, L_div down


def _minority_federation(seed):
    from omnifc import fl
    data = fl.make_federated("digits", shift="feature", n_groups=2, clients_per_group=7,
                             train_samples=100, test_samples=60, seed=seed,
                             feature_transform="permute")
    return [c for c in data.clients if c.group == 0] + [c for c in data.clients
                                                        if c.group == 1][:3]


@pytest.mark.parametrize("seed", [0, 1])
def test_mwu_aggregation_beats_uniform_on_a_minority_domain_federation(seed):
    """Its case: 7 clients of one domain, 3 of another; the same sampled sets each round.

    MWU moves aggregation weight toward clients similar to the sampled sets, so the global
    model serves the majority domain better than data-size (uniform per sample) FedAvg.
    Measured over seeds 0-5: better on 6/6, mean +0.029 majority accuracy.
    """
    from omnifc import fl
    from omnifc.adapters.fmcl import fixed_encoder

    clients = _minority_federation(seed)
    common = dict(n_features=64, n_classes=10, rounds=20, per_round=4, sampling=False,
                  regularizer=False, secure=False, seed=seed, encoder_dim=64)
    uniform = c2v.run_federated_client2vec(clients, mwu=False, **common)
    weighted = c2v.run_federated_client2vec(clients, mwu=True, **common)
    assert all(np.array_equal(a, b) for a, b in zip(uniform["sampled"], weighted["sampled"]))
    s = weighted["similarity"]
    off = ~np.eye(7, dtype=bool)
    assert s[:7, :7][off].mean() > 1.0 > 0.5 > s[:7, 7:].mean()   # the index sees the domains
    model = fl.SoftmaxRegression(64, 10)
    encode = fixed_encoder(64, 64, seed=seed)

    def majority_accuracy(result):
        g = result["run"].models[0]
        return np.mean([model.accuracy(g, encode(c.x_test), c.y_test) for c in clients[:7]])

    assert majority_accuracy(weighted) > majority_accuracy(uniform)


def test_client2vec_loop_secure_equals_plaintext():
    clients = _minority_federation(0)[:6] + _minority_federation(0)[7:9]
    common = dict(n_features=64, n_classes=10, rounds=4, per_round=3, seed=0)
    secure = c2v.run_federated_client2vec(clients, secure=True, **common)
    plain = c2v.run_federated_client2vec(clients, secure=False, **common)
    assert np.array_equal(secure["distances"], plain["distances"])
    assert all(np.array_equal(a, b) for a, b in zip(secure["sampled"], plain["sampled"]))
    assert np.array_equal(secure["run"].models[0], plain["run"].models[0])
