"""Client2Vec on protected client indices: similarities, sampling and MWU weights from D."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
from sklearn.cluster import KMeans

from finite_field import InputError, ParameterError
from omnifc.adapters import client2vec as c2v
from omnifc.adapters import plaintext_distances, protect, quantize_rows

from oracles import sq_distances

pytestmark = pytest.mark.timeout(120)


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
    common = dict(n_features=64, n_classes=10, rounds=4, per_round=3, seed=0, uses="paper")
    secure = c2v.run_federated_client2vec(clients, secure=True, **common)
    plain = c2v.run_federated_client2vec(clients, secure=False, **common)
    assert np.array_equal(secure["distances"], plain["distances"])
    assert all(np.array_equal(a, b) for a, b in zip(secure["sampled"], plain["sampled"]))
    assert np.array_equal(secure["run"].models[0], plain["run"].models[0])


# -- folded in from test_client2vec_bites.py ----------------------------------------------
# omnifc.adapters.client2vec pinned against independent expectations (mutation testing,
# issue 14).
#
# Every expectation is recomputed here from the module's documented formulas: the protected
# row ``[sqrt(a) f/|f|; sqrt(b) l/|l|]``, ``s = (a + b) - D/2``, the mean set similarity
# without the client itself, ``p ∝ exp(S / tau)`` and the MWU weights
# ``∝ q exp((1/lambda_1) sum gamma^(t - tau) S)`` with Python floats and ``math.exp`` on small
# hand-made inputs; the DSA-IGN losses with per-sample Python loops; the regularized local
# step written out (cross-entropy, L1 orthogonality, distillation); k-means with
# scikit-learn on the vectors.


# ----------------------------------------------------------------------------- client side

def test_client_index_means_and_refusals():
    f = [[1.0, 2.0], [3.0, 6.0]]
    lab = [[0.0, 1.0, 2.0], [2.0, 1.0, 0.0]]
    beta_f, beta_l = c2v.client_index(f, lab)
    assert beta_f.tolist() == [2.0, 4.0] and beta_l.tolist() == [1.0, 1.0, 1.0]
    beta_f, _ = c2v.client_index(np.array([[1, 2]], dtype=np.int64), [[1]])
    assert beta_f.dtype == np.float64
    message = ("expected per-sample embeddings of shape (N, d_f) and (N, d_l) with N >= 1, "
               "got {} and {}")
    for bad_f, bad_l in (([1.0, 2.0], [[1.0], [2.0]]),          # 1-D features
                         ([[1.0], [2.0]], [1.0, 2.0]),          # 1-D labels
                         ([[1.0], [2.0]], [[1.0]]),             # different N
                         (np.zeros((0, 2)), np.zeros((0, 3)))):  # N = 0
        with pytest.raises(InputError, match=re.escape(message.format(
                np.asarray(bad_f).shape, np.asarray(bad_l).shape))):
            c2v.client_index(bad_f, bad_l)


def test_protected_vector_and_bound_by_hand():
    index = ([3.0, 4.0], [[0.0], [2.0]])
    assert c2v.protected_vector(index).tolist() == [0.6, 0.8, 0.0, 1.0]
    assert c2v.protected_vector(index, weights=(4.0, 9.0)).tolist() == [1.2, 1.6, 0.0, 3.0]
    assert c2v.protected_vector(index, weights=(9, 4)).tolist() == \
        pytest.approx([1.8, 2.4, 0.0, 2.0], rel=1e-15)
    with pytest.raises(InputError, match=re.escape(
            "an index part is the zero vector; it has no direction")):
        c2v.protected_vector(([0.0, 0.0], [1.0]))
    with pytest.raises(InputError, match="zero vector"):
        c2v.protected_vector(([1.0], [0.0, 0.0]))
    assert c2v.protection_bound() == 1.0 and isinstance(c2v.protection_bound(), float)
    assert c2v.protection_bound((4.0, 9.0)) == 3.0 and c2v.protection_bound((9, 4)) == 3.0
    assert c2v.protection_bound((0.25, 0.01)) == 0.5


@pytest.mark.parametrize("weights", [(1.0, 0.0), (0.0, 1.0), (-1.0, 2.0), (2.0, -0.5),
                                     (float("nan"), 1.0)])
def test_part_weights_must_be_positive(weights):
    message = f"part weights must be positive (pre-scaling), got {weights}"
    for call in (lambda: c2v.protection_bound(weights),
                 lambda: c2v.protected_vector(([1.0], [1.0]), weights=weights),
                 lambda: c2v.pair_similarity(np.zeros((2, 2)), weights=weights),
                 lambda: c2v.direct_pair_similarity([([1.0], [1.0])], weights=weights)):
        with pytest.raises(ParameterError, match=re.escape(message)):
            call()


# ----------------------------------------------------------------------------- server side

def test_pair_similarity_from_distances_by_hand():
    d = np.array([[0.0, 1.0, 4.0], [1.0, 0.0, 2.5], [4.0, 2.5, 0.0]])
    assert c2v.pair_similarity(d).tolist() == [[2.0, 1.5, 0.0], [1.5, 2.0, 0.75],
                                               [0.0, 0.75, 2.0]]
    assert c2v.pair_similarity(d, weights=(3.0, 0.5)).tolist() == \
        [[3.5, 3.0, 1.5], [3.0, 3.5, 2.25], [1.5, 2.25, 3.5]]
    with pytest.raises(InputError, match="D must be symmetric"):
        c2v.pair_similarity(np.array([[0.0, 1.0], [2.0, 0.0]]))
    # the protected rows of random indices: s from D equals the cosines themselves
    rng = np.random.default_rng(3)
    indices = [(rng.normal(size=4), rng.normal(size=2)) for _ in range(5)]
    for w in ((1.0, 1.0), (2.0, 0.5)):
        rows = np.stack([c2v.protected_vector(i, weights=w) for i in indices])
        cos = [[w[0] * float(i[0] @ j[0]) / math.hypot(*i[0]) / math.hypot(*j[0])
                + w[1] * float(i[1] @ j[1]) / math.hypot(*i[1]) / math.hypot(*j[1])
                for j in indices] for i in indices]
        np.testing.assert_allclose(c2v.pair_similarity(sq_distances(rows), weights=w), cos, atol=1e-12)
        np.testing.assert_allclose(c2v.direct_pair_similarity(indices, weights=w), cos,
                                   atol=1e-12)


def test_direct_pair_similarity_by_hand():
    indices = [([1.0, 0.0], [0.0, 2.0]), ([1.0, 1.0], [0.0, -1.0])]
    h = 1 / math.sqrt(2)
    out = c2v.direct_pair_similarity(indices)
    np.testing.assert_allclose(out, [[2.0, h - 1.0], [h - 1.0, 2.0]], atol=1e-15)
    out = c2v.direct_pair_similarity(indices, weights=(2.0, 3.0))
    np.testing.assert_allclose(out, [[5.0, 2 * h - 3.0], [2 * h - 3.0, 5.0]], atol=1e-15)
    ints = c2v.direct_pair_similarity([([2, 0], [0, 3]), ([0, 5], [4, 0])])   # int indices
    np.testing.assert_allclose(ints, [[2.0, 0.0], [0.0, 2.0]], atol=1e-15)


S = np.array([[2.0, 1.0, 0.0, -1.0],
              [1.0, 2.0, 0.5, 0.25],
              [0.0, 0.5, 2.0, 1.5],
              [-1.0, 0.25, 1.5, 2.0]])


def _set_sim(i, members):
    others = sorted({j for j in members if j != i})
    return sum(S[i, j] for j in others) / len(others) if others else 0.0


def test_set_similarity_by_hand():
    assert c2v.set_similarity(S, [1, 2]).tolist() == [0.5, 0.5, 0.5, 0.875]
    assert c2v.set_similarity(S, [2, 1, 2, 1]).tolist() == [0.5, 0.5, 0.5, 0.875]  # a set
    assert c2v.set_similarity(S, [3]).tolist() == [-1.0, 0.25, 1.5, 0.0]
    assert c2v.set_similarity(S, []).tolist() == [0.0, 0.0, 0.0, 0.0]
    assert c2v.set_similarity(S, np.arange(4)).tolist() == [_set_sim(i, range(4))
                                                            for i in range(4)]
    assert c2v.set_similarity(S.tolist(), (0, 3)).tolist() == [-1.0, 0.625, 0.75, -1.0]
    for bad in ([4], [-1], [0, 5]):
        with pytest.raises(ParameterError, match=re.escape(
                "set members must be client indices in [0, 4)")):
            c2v.set_similarity(S, bad)
    assert c2v.set_similarity(S, [0, 3]).tolist() == [_set_sim(i, [0, 3]) for i in range(4)]


def test_sampling_probabilities_by_hand():
    for tau in (1.0, 0.5, 3.0):
        e = [math.exp(_set_sim(i, [1, 2]) / tau) for i in range(4)]
        np.testing.assert_allclose(c2v.sampling_probabilities(S, [1, 2], tau=tau),
                                   [v / sum(e) for v in e], rtol=1e-13)
    e = [math.exp(_set_sim(i, [0])) for i in range(4)]                  # default tau = 1
    np.testing.assert_allclose(c2v.sampling_probabilities(S, [0]), [v / sum(e) for v in e],
                               rtol=1e-13)
    # the module's doctest: two identical clients and an opposite one
    d = np.array([[0.0, 0.0, 8.0], [0.0, 0.0, 8.0], [8.0, 8.0, 0.0]])
    e = [1.0, math.exp(2.0), math.exp(-2.0)]
    np.testing.assert_allclose(c2v.sampling_probabilities(c2v.pair_similarity(d), [0]),
                               [v / sum(e) for v in e], rtol=1e-13)
    for tau in (0.0, -1.0, float("nan")):
        with pytest.raises(ParameterError, match=re.escape(f"tau must be > 0, got {tau}")):
            c2v.sampling_probabilities(S, [0], tau=tau)


def _mwu(history, q=None, among=None, lambda_1=1.0, gamma=0.9):
    t = len(history)
    score = [sum(gamma ** (t - k) * _set_sim(i, c) for k, c in enumerate(history, start=1))
             for i in range(4)]
    q = [1.0] * 4 if q is None else q
    among = range(4) if among is None else among
    w = [q[i] * math.exp(score[i] / lambda_1) if i in among else 0.0 for i in range(4)]
    return [v / sum(w) for v in w]


def test_mwu_weights_by_hand():
    history = [[0, 1], [2], [1, 2, 3]]
    np.testing.assert_allclose(c2v.mwu_weights(S, history), _mwu(history), rtol=1e-13)
    np.testing.assert_allclose(c2v.mwu_weights(S, history, lambda_1=0.5, gamma=0.3),
                               _mwu(history, lambda_1=0.5, gamma=0.3), rtol=1e-13)
    np.testing.assert_allclose(c2v.mwu_weights(S, history[:1], gamma=0.0),
                               _mwu(history[:1], gamma=0.0), rtol=1e-13)   # 0^0 = 1
    q = [1.0, 3.0, 0.5, 2.0]
    np.testing.assert_allclose(c2v.mwu_weights(S, history, data_weights=q),
                               _mwu(history, q=q), rtol=1e-13)
    out = c2v.mwu_weights(S, history, data_weights=[0.0, 3.0, 0.5, 2.0], among=[0, 1, 3])
    np.testing.assert_allclose(out, _mwu(history, q=[0.0, 3.0, 0.5, 2.0], among=[0, 1, 3]),
                               rtol=1e-13)
    assert out[0] == 0.0 and out[2] == 0.0
    assert c2v.mwu_weights(S, []).tolist() == [0.25] * 4            # no history: q alone
    np.testing.assert_allclose(c2v.mwu_weights(S, [], data_weights=[1, 1, 2, 4]),
                               [0.125, 0.125, 0.25, 0.5], rtol=1e-15)
    # large scores: normalized without overflow
    big = c2v.mwu_weights(S * 400.0, [[1]], lambda_1=1.0)
    assert np.isfinite(big).all() and big.sum() == pytest.approx(1.0)
    np.testing.assert_allclose(big[[0, 2, 3]] / big[2], [math.exp(400 * (1.0 - 0.5)), 1.0,
                                                         math.exp(400 * (0.25 - 0.5))],
                               rtol=1e-9)
    for lam in (0.0, -2.0):
        with pytest.raises(ParameterError, match=re.escape(f"lambda_1 must be > 0, got {lam}")):
            c2v.mwu_weights(S, history, lambda_1=lam)
    for q in ([1.0, 1.0, 1.0], [1.0, 1.0, -0.5, 1.0], [[1.0] * 4]):
        with pytest.raises(ParameterError, match=re.escape(
                "data_weights must be 4 non-negative numbers")):
            c2v.mwu_weights(S, history, data_weights=q)


def test_sample_clients_draws_distinct_clients_with_the_given_probabilities():
    p = [0.0, 0.5, 0.0, 0.25, 0.25, 0.0]
    for seed in range(5):
        out = c2v.sample_clients(p, 3, np.random.default_rng(seed))
        assert out.tolist() == [1, 3, 4]                          # the only 3 with mass
    out = c2v.sample_clients(np.full(6, 1 / 6), 4.0, np.random.default_rng(1))
    assert out.tolist() == sorted(set(out.tolist())) and len(out) == 4
    counts = np.zeros(3)
    rng = np.random.default_rng(7)
    for _ in range(400):
        counts[c2v.sample_clients([0.8, 0.1, 0.1], 1, rng)[0]] += 1
    assert counts[0] > 250                                        # 0.8 of 400 = 320


def test_cluster_indices_is_kmeans_on_the_vectors():
    x = np.random.default_rng(11).uniform(0, 1, (30, 2))
    for state in (0, 3):
        ref = KMeans(n_clusters=4, random_state=state, n_init="auto").fit(x).labels_
        ours = c2v.cluster_indices(sq_distances(x), 4, random_state=state)
        assert np.array_equal(_relabel(ours), _relabel(ref))
    ref = KMeans(n_clusters=4, random_state=0, n_init="auto").fit(x).labels_
    assert np.array_equal(_relabel(c2v.cluster_indices(sq_distances(x), 4)), _relabel(ref))
    ref3 = KMeans(n_clusters=4, random_state=3, n_init="auto").fit(x).labels_
    assert not np.array_equal(_relabel(ref), _relabel(ref3))     # the seed matters here


def _relabel(labels):
    first = {}
    return np.array([first.setdefault(int(c), len(first)) for c in labels])


# ----------------------------------------------------------------------------- synthetic data

def test_synthetic_domains_follows_its_construction():
    kwargs = dict(n_domains=2, clients_per_domain=2, n_classes=3, feature_dim=4, label_dim=2,
                  samples=6, alpha=0.7, seed=5)
    clients, domains = c2v.synthetic_domains(**kwargs)
    assert domains.tolist() == [0, 0, 1, 1]
    rng = np.random.Generator(np.random.PCG64(5))
    dv = rng.standard_normal((2, 4))
    cv = rng.standard_normal((3, 2))
    for k, (f, lab) in zip([0, 0, 1, 1], clients):
        labels = rng.choice(3, size=6, p=rng.dirichlet(0.7 * np.ones(3)))
        np.testing.assert_array_equal(f, dv[k] + 0.5 * rng.standard_normal((6, 4)))
        np.testing.assert_array_equal(lab, cv[labels] + 0.05 * rng.standard_normal((6, 2)))
    clients, domains = c2v.synthetic_domains()
    assert domains.tolist() == sorted(list(range(4)) * 5)
    assert clients[0][0].shape == (200, 64) and clients[0][1].shape == (200, 32)
    rng = np.random.Generator(np.random.PCG64(0))
    dv = rng.standard_normal((4, 64))
    cv = rng.standard_normal((10, 32))
    labels = rng.choice(10, size=200, p=rng.dirichlet(0.3 * np.ones(10)))
    np.testing.assert_array_equal(clients[0][0], dv[0] + 0.5 * rng.standard_normal((200, 64)))
    np.testing.assert_array_equal(clients[0][1],
                                  cv[labels] + 0.05 * rng.standard_normal((200, 32)))


def test_label_embeddings_are_seeded_unit_vectors():
    v = np.random.Generator(np.random.PCG64(0)).standard_normal((3, 16))
    np.testing.assert_allclose(c2v.label_embeddings(3), v / np.sqrt((v ** 2).sum(1))[:, None],
                               rtol=1e-14)
    v = np.random.Generator(np.random.PCG64(4)).standard_normal((2, 5))
    np.testing.assert_allclose(c2v.label_embeddings(2.0, 5.0, seed=4),
                               v / np.sqrt((v ** 2).sum(1))[:, None], rtol=1e-14)


# ----------------------------------------------------------------------------- index network

def test_index_network_encode_direction_and_network_index():
    a = np.array([[1.0, 0.0], [0.0, 2.0]])
    b = np.array([[0.0, 1.0], [1.0, 0.0]])
    w = np.array([[3.0, 4.0], [0.0, 0.0], [1.0, 1.0], [1.0, 1.0]])
    net = c2v.IndexNetwork(a=a, b=b, w=w, losses=[], center=np.array([1.0, 1.0]))
    u, z = net.encode([[2.0, 3.0]])
    assert u.tolist() == [[1.0, 4.0]] and z.tolist() == [[2.0, 1.0]]
    u, z = net.encode([[2.0, 3.0]], center=[0.0, 1.0])
    assert u.tolist() == [[2.0, 4.0]] and z.tolist() == [[2.0, 2.0]]
    assert net.feature_direction([1.0, 5.0]).tolist() == [0.6, 0.8]    # u W[:k] = (3, 4)
    assert net.feature_direction([0.0, 1.0]).tolist() == [0.0, 0.0]    # zero: kept as is
    lv = np.array([[1.0, 0.0], [0.0, 1.0]])
    f, lab = c2v.network_index(net, [[2.0, 3.0], [1.0, 1.0]], [1, 0], lv)
    assert f.tolist() == [0.5, 2.0] and lab.tolist() == [0.5, 0.5]
    f, _ = c2v.network_index(net, [[2.0, 3.0], [1.0, 1.0]], [1.0, 0.0], lv.tolist(),
                             center=[0.0, 0.0])
    assert f.tolist() == [1.5, 4.0]


def _losses_by_hand(a, b, w, e, y, lv, noise, temperature):
    n, k = e.shape[0], a.shape[1]
    u, z = e @ a, e @ b
    l_sim = sum(float(((z[i] - lv[y[i]]) ** 2).sum()) for i in range(n)) / n
    l_orth = sum(float(u[i] @ z[i]) ** 2 for i in range(n)) / n
    h = np.concatenate([u, z], axis=1)
    l_recon = sum(float(((h[i] @ w - e[i]) ** 2).sum()) for i in range(n)) / n
    v0, v1 = (e + noise[0]) @ a, (e + noise[1]) @ a
    l_div = 0.0
    for i in range(n):
        sims = [float(v0[i] @ v1[j]) / np.linalg.norm(v0[i]) / np.linalg.norm(v1[j])
                / temperature for j in range(n)]
        l_div -= sims[i] - math.log(sum(math.exp(s) for s in sims))
    l_div /= n
    assert k == z.shape[1]
    return (l_div + l_sim + l_orth + l_recon, l_div, l_sim, l_orth, l_recon)


def test_index_losses_by_hand():
    rng = np.random.default_rng(2)
    e = rng.normal(size=(5, 3))
    y = np.array([0, 1, 1, 0, 1])
    lv = c2v.label_embeddings(2, 2, seed=1)
    a, b, w = rng.normal(size=(3, 2)), rng.normal(size=(3, 2)), rng.normal(size=(4, 3))
    noise = 0.3 * rng.normal(size=(2, 5, 3))
    for temperature in (0.5, 2.0):
        values, _ = c2v._simulation._index_losses([a, b, w], e, y, lv, noise, temperature)
        np.testing.assert_allclose(values, _losses_by_hand(a, b, w, e, y, lv, noise,
                                                           temperature), rtol=1e-10)


def _fit_by_hand(e, y, lv, *, steps, batch_size, learning_rate, noise, temperature, seed):
    """The documented training: centred by the proxy mean, Adam (0.9, 0.999, 1e-8) on the
    four losses (their gradients are checked against finite differences elsewhere)."""
    center = e.mean(axis=0)
    e = e - center
    rng = np.random.Generator(np.random.PCG64(seed))
    d, k = e.shape[1], lv.shape[1]
    params = [rng.standard_normal((d, k)) / math.sqrt(d), rng.standard_normal((d, k)) / math.sqrt(d),
              rng.standard_normal((2 * k, d)) / math.sqrt(2 * k)]
    m = [np.zeros_like(p) for p in params]
    v = [np.zeros_like(p) for p in params]
    history = []
    for step in range(1, steps + 1):
        idx = rng.choice(e.shape[0], size=min(batch_size, e.shape[0]), replace=False)
        views = noise * rng.standard_normal((2, idx.size, d))
        values, grads = c2v._simulation._index_losses(params, e[idx], y[idx], lv, views, temperature)
        history.append(values)
        for j, g in enumerate(grads):
            m[j] = 0.9 * m[j] + 0.1 * g
            v[j] = 0.999 * v[j] + 0.001 * g * g
            params[j] = params[j] - learning_rate * (m[j] / (1 - 0.9 ** step)) / (
                np.sqrt(v[j] / (1 - 0.999 ** step)) + 1e-8)
    return params, history, center


def test_fit_index_network_is_adam_on_the_four_losses():
    rng = np.random.default_rng(6)
    e = rng.normal(2.0, 1.0, (140, 4))
    y = rng.integers(0, 3, 140)
    lv = c2v.label_embeddings(3, 2, seed=2)
    net = c2v.fit_index_network(e, y, lv)                         # the defaults
    params, history, center = _fit_by_hand(e, y, lv, steps=300, batch_size=128,
                                           learning_rate=0.01, noise=0.1, temperature=0.5,
                                           seed=0)
    assert len(net.losses) == 300
    np.testing.assert_allclose(net.center, center, rtol=1e-14)
    for ours, ref in zip((net.a, net.b, net.w), params):
        np.testing.assert_allclose(ours, ref, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(net.losses, history, rtol=1e-9)
    net = c2v.fit_index_network(e[:20], y[:20], lv, feature_dim=2, steps=4, batch_size=8,
                                learning_rate=0.05, noise=0.5, temperature=2.0, seed=3)
    params, history, _ = _fit_by_hand(e[:20], y[:20], lv, steps=4, batch_size=8,
                                      learning_rate=0.05, noise=0.5, temperature=2.0, seed=3)
    for ours, ref in zip((net.a, net.b, net.w), params):
        np.testing.assert_allclose(ours, ref, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(net.losses, history, rtol=1e-9)
    with pytest.raises(ParameterError, match=re.escape(
            "feature_dim must equal the label embedding width 2 (u^f and z are compared per "
            "sample), got 3")):
        c2v.fit_index_network(e, y, lv, feature_dim=3)


# ----------------------------------------------------------------------------- local training

def _regularized_by_hand(w0, v, x, y, rng, *, f, c, lambda_orth, lambda_kd, epochs,
                         batch_size, learning_rate):
    """SGD on CE + lambda_orth |v^T W|_1 + lambda_kd KL(p_start || p), per sample in loops."""
    def probs(params, rows):
        wm, bias = params[:f * c].reshape(f, c), params[f * c:]
        out = []
        for row in rows:
            logit = row @ wm + bias
            ex = np.exp(logit - logit.max())
            out.append(ex / ex.sum())
        return np.array(out)

    w = w0.copy()
    for _ in range(epochs):
        order = rng.permutation(y.size)
        for s in range(0, y.size, batch_size):
            idx = order[s:s + batch_size]
            p = probs(w, x[idx])
            teacher = probs(w0, x[idx])
            delta = np.zeros_like(p)
            for r, i in enumerate(idx):
                onehot = np.eye(c)[y[i]]
                delta[r] = (p[r] - onehot) / idx.size + lambda_kd * (p[r] - teacher[r]) / idx.size
            g_w = x[idx].T @ delta
            g_w = g_w + lambda_orth * np.outer(v, np.sign(v @ w[:f * c].reshape(f, c)))
            grad = np.concatenate([g_w.ravel(), delta.sum(axis=0)])
            w = w - learning_rate * grad
    return w


def test_regularized_trainer_is_sgd_on_the_documented_loss():
    from omnifc import fl

    rng = np.random.default_rng(9)
    f, c = 3, 4
    model = fl.SoftmaxRegression(f, c)
    client = fl.Client(x_train=rng.normal(size=(45, f)), y_train=rng.integers(0, c, 45),
                       x_test=np.zeros((1, f)), y_test=np.zeros(1, dtype=np.int64), group=0)
    v = np.array([0.6, 0.0, -0.8])
    w0 = rng.normal(0, 0.3, model.n_params)
    kept = w0.copy()
    train = c2v.regularized_trainer(model, {id(client): v})  # defaults
    ours = train(w0, client, np.random.default_rng(1))
    ref = _regularized_by_hand(w0, v, client.x_train, client.y_train, np.random.default_rng(1),
                               f=f, c=c, lambda_orth=0.05, lambda_kd=0.1, epochs=2,
                               batch_size=20, learning_rate=0.5)
    np.testing.assert_allclose(ours, ref, rtol=1e-10, atol=1e-12)
    options = dict(lambda_orth=0.3, lambda_kd=2.5, epochs=3, batch_size=7, learning_rate=0.1)
    ours = c2v.regularized_trainer(model, {id(client): v}, **options)(
        w0, client, np.random.default_rng(2))
    ref = _regularized_by_hand(w0, v, client.x_train, client.y_train, np.random.default_rng(2),
                               f=f, c=c, **options)
    np.testing.assert_allclose(ours, ref, rtol=1e-10, atol=1e-12)
    for orth, kd in ((0.0, 1.0), (0.05, 0.0)):                     # each term switched off
        ours = c2v.regularized_trainer(model, {id(client): v}, lambda_orth=orth, lambda_kd=kd)(
            w0, client, np.random.default_rng(3))
        ref = _regularized_by_hand(w0, v, client.x_train, client.y_train,
                                   np.random.default_rng(3), f=f, c=c, lambda_orth=orth,
                                   lambda_kd=kd, epochs=2, batch_size=20, learning_rate=0.5)
        np.testing.assert_allclose(ours, ref, rtol=1e-10, atol=1e-12)
    assert np.array_equal(w0, kept)                                # the input is not trained in place
    with pytest.raises(ParameterError, match=re.escape(
            "the Client2Vec regularizer is implemented for omnifc.fl.SoftmaxRegression")):
        c2v.regularized_trainer(object(), {})


def test_constants():
    assert (c2v.DEFAULT_TAU, c2v.DEFAULT_LAMBDA, c2v.DEFAULT_GAMMA) == (1.0, 1.0, 0.9)
    assert (c2v.DEFAULT_LAMBDA_ORTH, c2v.DEFAULT_LAMBDA_KD) == (0.05, 0.1)   # docs/adapters.md


def test_index_losses_at_a_tiny_temperature_stay_finite():
    """InfoNCE at temperature 5e-4: logits up to 2000 apart, per-row log-sum-exp needed."""
    rng = np.random.default_rng(4)
    e = rng.normal(size=(4, 3))
    y = np.array([0, 1, 0, 1])
    lv = c2v.label_embeddings(2, 2, seed=1)
    a, b, w = rng.normal(size=(3, 2)), rng.normal(size=(3, 2)), rng.normal(size=(4, 3))
    noise = 0.3 * rng.normal(size=(2, 4, 3))
    values, _ = c2v._simulation._index_losses([a, b, w], e, y, lv, noise, 5e-4)
    v0, v1 = (e + noise[0]) @ a, (e + noise[1]) @ a
    l_div = 0.0
    for i in range(4):
        sims = [float(v0[i] @ v1[j]) / np.linalg.norm(v0[i]) / np.linalg.norm(v1[j]) / 5e-4
                for j in range(4)]
        top = max(sims)
        l_div -= sims[i] - top - math.log(sum(math.exp(s - top) for s in sims))
    assert math.isfinite(values[1])
    assert values[1] == pytest.approx(l_div / 4, rel=1e-9, abs=1e-9)


def test_index_losses_rows_with_far_apart_maxima():
    """Row 1's best match has cosine 0.01, row 0's 1: at temperature 5e-4 the rows' maxima
    are 2000 apart, so only a per-row shift keeps row 1's softmax finite."""
    e = np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
    a = np.array([[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]])
    b = np.zeros((3, 2))
    w = np.zeros((4, 3))
    noise = np.array([np.zeros((2, 3)), [[0.0, 0.0, 0.0], [1.0, -0.99, 0.0]]])
    values, _ = c2v._simulation._index_losses([a, b, w], e, np.array([0, 1]), np.eye(2), noise, 5e-4)
    v0, v1 = e @ a, (e + noise[1]) @ a
    l_div = 0.0
    for i in range(2):
        sims = [float(v0[i] @ v1[j]) / np.linalg.norm(v0[i]) / np.linalg.norm(v1[j]) / 5e-4
                for j in range(2)]
        top = max(sims)
        p_ii = math.exp(sims[i] - top) / sum(math.exp(s - top) for s in sims)
        l_div -= math.log(p_ii + 1e-300)
    assert math.isfinite(values[1]) and values[1] == pytest.approx(l_div / 2, rel=1e-9)


def test_regularized_trainer_with_large_logits():
    from omnifc import fl

    rng = np.random.default_rng(10)
    model = fl.SoftmaxRegression(3, 4)
    client = fl.Client(x_train=rng.normal(size=(12, 3)), y_train=rng.integers(0, 4, 12),
                       x_test=np.zeros((1, 3)), y_test=np.zeros(1, dtype=np.int64), group=0)
    v = np.array([0.6, 0.0, -0.8])
    w0 = rng.normal(0, 300.0, model.n_params)               # logits in the thousands
    ours = c2v.regularized_trainer(model, {id(client): v}, epochs=1, batch_size=6,
                                   learning_rate=0.01)(w0, client, np.random.default_rng(4))
    ref = _regularized_by_hand(w0, v, client.x_train, client.y_train, np.random.default_rng(4),
                               f=3, c=4, lambda_orth=0.05, lambda_kd=1.0, epochs=1,
                               batch_size=6, learning_rate=0.01)
    assert np.isfinite(ours).all()
    np.testing.assert_allclose(ours, ref, rtol=1e-9, atol=1e-9)


def test_zero_part_refused_whatever_the_other_part_and_short_directions():
    with pytest.raises(InputError, match=r"^an index part is the zero vector; it has no "
                                         r"direction$"):
        c2v.protected_vector(([0.0, 0.0], [3.0, 4.0]))
    net = c2v.IndexNetwork(a=np.eye(2), b=np.eye(2), w=np.eye(4, 2), losses=[],
                           center=np.zeros(2))
    assert net.feature_direction([0.3, 0.4]).tolist() == pytest.approx([0.6, 0.8])  # |v| 0.5
