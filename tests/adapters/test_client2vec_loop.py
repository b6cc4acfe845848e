"""Fast tests of :func:`omnifc.adapters.client2vec.run_federated_client2vec` (issue 14).

A tiny federation (6 clients of unequal sizes, 2-3 rounds, small encoder and index) is run
and compared with the loop rebuilt by hand from its documented steps: the frozen encoder,
the proxy set drawn with ``PCG64(seed + 1)``, the index network, the centre from the
quantized sum of the clients' mean embeddings, protected vectors, plaintext D of the
quantized rows, ``s(i, j)``, per-round sampling (similarity-driven or uniform) with the
server generator ``default_rng([seed, r, 2**31])``, local training (regularized or plain
SGD) with ``default_rng([seed, r, i])``, aggregation (MWU or data-size weights, the weighted
mean written out here) and the pooled test accuracy written out here.
"""

from __future__ import annotations

import numpy as np
import pytest

from finite_field import ParameterError

from omnifc import fl
from omnifc.adapters import _common
from omnifc.adapters import client2vec as c2v
from omnifc.adapters.fmcl import fixed_encoder

pytestmark = pytest.mark.timeout(120)

SMALL = dict(encoder_dim=12, index_dim=6, proxy_rows=90)


@pytest.fixture(scope="module")
def clients():
    data = fl.make_federated("digits", shift="feature", n_groups=2, clients_per_group=3,
                             train_samples=30, test_samples=12, seed=3)
    out = []
    for i, c in enumerate(data.clients):    # unequal sizes: data-size weights matter
        keep = 12 + 3 * i
        out.append(fl.Client(x_train=c.x_train[:keep], y_train=c.y_train[:keep],
                             x_test=c.x_test[:6 + i], y_test=c.y_test[:6 + i], group=c.group))
    return out


def _reference(clients, *, n_features, n_classes, rounds, per_round, sampling, mwu,
               regularizer, tau, lambda_1, gamma, encoder_dim, index_dim, proxy_rows,
               learning_rate, lambda_orth, lambda_kd, seed):
    encode = fixed_encoder(n_features, encoder_dim, seed=seed)
    px, py = fl.load_pool("digits")
    pick = np.random.Generator(np.random.PCG64(seed + 1)).choice(py.size, proxy_rows,
                                                                 replace=False)
    label_vectors = c2v.label_embeddings(n_classes, index_dim, seed=seed)
    network = c2v.fit_index_network(encode(px[pick]), py[pick], label_vectors, seed=seed)
    emb = [fl.Client(x_train=encode(c.x_train), y_train=c.y_train, x_test=encode(c.x_test),
                     y_test=c.y_test, group=c.group) for c in clients]
    n = len(clients)
    means = np.stack([e.x_train.mean(axis=0) for e in emb])
    bound = max(1.0, float(np.ceil(np.abs(means).max())))
    center = _common.quantize_rows(means, bound=bound, nonnegative=True).sum(axis=0) / n
    indices = [c2v.network_index(network, e.x_train, e.y_train, label_vectors, center)
               for e in emb]
    rows = np.stack([c2v.protected_vector(i) for i in indices])
    distances = _common.plaintext_distances(
        _common.quantize_rows(rows, bound=c2v.protection_bound()))
    similarity = c2v.pair_similarity(distances)
    sizes = np.array([c.y_train.size for c in clients], dtype=np.float64)
    model = fl.SoftmaxRegression(encoder_dim, n_classes)
    directions = {id(e): network.feature_direction(i[0]) for e, i in zip(emb, indices)}
    reg = c2v.regularized_trainer(model, directions, learning_rate=learning_rate,
                                  lambda_orth=lambda_orth, lambda_kd=lambda_kd)
    g = model.init(seed)
    sampled, curve = [], []
    for r in range(rounds):
        server = np.random.default_rng([seed, r, 2**31])
        if sampling and sampled:
            p = c2v.sampling_probabilities(similarity, sampled[-1], tau=tau)
        else:
            p = np.full(n, 1.0 / n)
        chosen = np.sort(server.choice(n, size=per_round, replace=False, p=p))
        sampled.append(chosen)
        updates = []
        for i in chosen:
            rng = np.random.default_rng([seed, r, int(i)])
            if regularizer:
                updates.append(reg(g, emb[i], rng))
            else:
                updates.append(fl.sgd(model, g, emb[i].x_train, emb[i].y_train, epochs=2,
                                      batch_size=20, learning_rate=learning_rate, rng=rng))
        if mwu:
            w = c2v.mwu_weights(similarity, sampled, data_weights=sizes, among=chosen,
                                lambda_1=lambda_1, gamma=gamma)[chosen]
        else:
            w = sizes[chosen]
        g = sum(wi * u for wi, u in zip(w, updates)) / w.sum()
        x_all = np.concatenate([e.x_test for e in emb])
        y_all = np.concatenate([e.y_test for e in emb])
        curve.append(float(np.mean(np.argmax(model.logits(g, x_all), axis=1) == y_all)))
    return dict(model=g, sampled=sampled, curve=curve, distances=distances,
                similarity=similarity, network=network)


DOCUMENTED_DEFAULTS = dict(rounds=20, per_round=4, sampling=False, mwu=False, regularizer=False,
                           tau=1.0, lambda_1=1.0, gamma=0.9, encoder_dim=32, index_dim=16,
                           proxy_rows=500, learning_rate=0.5, lambda_orth=0.05, lambda_kd=0.1,
                           seed=0)


def _assert_same(result, ref):
    assert np.array_equal(result["distances"], ref["distances"])
    assert np.array_equal(result["similarity"], ref["similarity"])
    assert [s.tolist() for s in result["sampled"]] == [s.tolist() for s in ref["sampled"]]
    np.testing.assert_allclose(result["run"].models[0], ref["model"], rtol=1e-12, atol=1e-12)
    assert result["curve"] == pytest.approx(ref["curve"], abs=1e-12)
    assert result["accuracy"] == pytest.approx(ref["curve"][-1], abs=1e-12)
    assert len(result["run"].history) == len(ref["curve"])
    for name in ("a", "b", "w", "center"):
        assert np.array_equal(getattr(result["network"], name), getattr(ref["network"], name))


@pytest.mark.parametrize("sampling", [True, False])
@pytest.mark.parametrize("mwu", [True, False])
@pytest.mark.parametrize("regularizer", [True, False])
def test_every_option_matches_the_loop_rebuilt_by_hand(clients, sampling, mwu, regularizer):
    opts = dict(rounds=3, per_round=3, tau=0.7, lambda_1=1.3, gamma=0.6, learning_rate=0.3,
                lambda_orth=0.2, lambda_kd=0.4, seed=2, **SMALL)
    result = c2v.run_federated_client2vec(clients, n_features=64, n_classes=10,
                                          sampling=sampling, mwu=mwu, regularizer=regularizer,
                                          secure=False, **opts)
    ref = _reference(clients, n_features=64, n_classes=10, sampling=sampling, mwu=mwu,
                     regularizer=regularizer, **opts)
    _assert_same(result, ref)


def test_the_options_change_the_run(clients):
    """Each use on its own moves the run (so the parametrized comparison is not vacuous)."""
    opts = dict(rounds=3, per_round=3, tau=0.7, lambda_1=1.3, gamma=0.6, learning_rate=0.3,
                lambda_orth=0.2, lambda_kd=0.4, seed=2, **SMALL)
    base = _reference(clients, n_features=64, n_classes=10, sampling=False, mwu=False,
                      regularizer=False, **opts)
    for use in ("mwu", "regularizer"):
        flags = {**dict(sampling=False, mwu=False, regularizer=False), use: True}
        other = _reference(clients, n_features=64, n_classes=10, **flags, **opts)
        assert not np.allclose(other["model"], base["model"], rtol=0, atol=1e-9)
    sampled = _reference(clients, n_features=64, n_classes=10, sampling=True, mwu=False,
                         regularizer=False, **opts)
    assert [s.tolist() for s in sampled["sampled"]] != [s.tolist() for s in base["sampled"]]


def test_the_documented_defaults(clients, monkeypatch):
    """Only the required arguments: every default is the documented one, secure by default."""
    calls = []
    real_protect, real_sums = _common.protect, _common.secure_group_sums
    monkeypatch.setattr(_common, "protect",
                        lambda *a, **k: calls.append("protect") or real_protect(*a, **k))
    monkeypatch.setattr(_common, "secure_group_sums",
                        lambda *a, **k: calls.append("sums") or real_sums(*a, **k))
    result = c2v.run_federated_client2vec(clients, n_features=64, n_classes=10)
    assert calls == ["sums", "protect"]
    ref = _reference(clients, n_features=64, n_classes=10, **DOCUMENTED_DEFAULTS)
    _assert_same(result, ref)


def test_uses_paper_is_all_three_and_flags_override_it(clients):
    """``uses="paper"`` = sampling + MWU + regularizer (the published method); an explicit
    flag overrides its use; ``uses="fedavg"`` = the defaults (no use)."""
    opts = dict(rounds=3, per_round=3, tau=0.7, lambda_1=1.3, gamma=0.6, learning_rate=0.3,
                lambda_orth=0.2, lambda_kd=0.4, seed=2, **SMALL)
    paper = c2v.run_federated_client2vec(clients, n_features=64, n_classes=10, uses="paper",
                                         secure=False, **opts)
    _assert_same(paper, _reference(clients, n_features=64, n_classes=10, sampling=True,
                                   mwu=True, regularizer=True, **opts))
    no_reg = c2v.run_federated_client2vec(clients, n_features=64, n_classes=10, uses="paper",
                                          regularizer=False, secure=False, **opts)
    _assert_same(no_reg, _reference(clients, n_features=64, n_classes=10, sampling=True,
                                    mwu=True, regularizer=False, **opts))
    fedavg = c2v.run_federated_client2vec(clients, n_features=64, n_classes=10, uses="fedavg",
                                          mwu=True, secure=False, **opts)
    _assert_same(fedavg, _reference(clients, n_features=64, n_classes=10, sampling=False,
                                    mwu=True, regularizer=False, **opts))


def test_resolve_uses_and_the_default_flags():
    assert (c2v.DEFAULT_SAMPLING, c2v.DEFAULT_MWU, c2v.DEFAULT_REGULARIZER) == \
        (False, False, False)
    assert c2v.resolve_uses() == (False, False, False) == c2v.resolve_uses("fedavg")
    assert c2v.resolve_uses("paper") == (True, True, True)
    assert c2v.resolve_uses(sampling=True) == (True, False, False)
    assert c2v.resolve_uses("paper", mwu=False) == (True, False, True)
    with pytest.raises(ParameterError, match="uses must be one of"):
        c2v.resolve_uses("all")


def _spy(monkeypatch, seen):
    real_protect, real_sums = _common.protect, _common.secure_group_sums

    def protect(rows, **kw):
        seen["protect"] = (np.array(rows), kw)
        return real_protect(rows, **kw)

    def sums(rows, groups, **kw):
        seen["sums"] = (np.array(rows), np.array(groups), kw)
        return real_sums(rows, groups, **kw)
    monkeypatch.setattr(_common, "protect", protect)
    monkeypatch.setattr(_common, "secure_group_sums", sums)


@pytest.mark.parametrize("parties", [None, [1, 0, 1, 0, 2, 2]])
def test_secure_run_equals_plaintext_and_passes_the_owners(clients, monkeypatch, parties):
    opts = dict(rounds=2, per_round=3, seed=1, sampling=True, mwu=True, regularizer=True,
                **SMALL)                                       # every use on
    seen = {}
    _spy(monkeypatch, seen)
    secure = c2v.run_federated_client2vec(clients, n_features=64, n_classes=10, secure=True,
                                          parties=parties, **opts)
    owners = [0, 1, 2, 0, 1, 2] if parties is None else parties
    rows, kw = seen["protect"]
    assert set(kw) == {"bound", "parties"}
    assert kw["bound"] == c2v.protection_bound() and list(kw["parties"]) == owners
    assert rows.shape == (6, 2 * 6)     # [a u^f, b u^l] per client, index_dim 6
    rows, groups, kw = seen["sums"]
    assert set(kw) == {"bound", "nonnegative", "parties"}
    assert kw["nonnegative"] is True and list(kw["parties"]) == owners
    assert groups.tolist() == [0] * 6 and groups.dtype == np.int64
    assert kw["bound"] == max(1.0, float(np.ceil(np.abs(rows).max())))
    seen.clear()
    plain = c2v.run_federated_client2vec(clients, n_features=64, n_classes=10, secure=False,
                                         parties=parties, **opts)
    assert seen == {}                   # the plaintext path runs no protocol
    ref = _reference(clients, n_features=64, n_classes=10,
                     tau=1.0, lambda_1=1.0, gamma=0.9, learning_rate=0.5,
                     lambda_orth=0.05, lambda_kd=0.1, **opts)
    _assert_same(secure, ref)
    _assert_same(plain, ref)


def test_the_regularizer_gets_each_clients_decoded_direction(clients, monkeypatch):
    """``directions`` maps id(embedded client) to network.feature_direction(beta_i^f)."""
    seen = {}
    real = c2v.regularized_trainer

    def trainer(model, directions, **kw):
        seen["directions"], seen["kw"] = directions, kw
        return real(model, directions, **kw)
    monkeypatch.setattr(c2v._simulation, "regularized_trainer", trainer)
    result = c2v.run_federated_client2vec(clients, n_features=64, n_classes=10, rounds=1,
                                          per_round=2, secure=False, learning_rate=0.25,
                                          lambda_orth=0.3, lambda_kd=0.6, seed=4,
                                          regularizer=True, **SMALL)
    assert seen["kw"] == dict(learning_rate=0.25, lambda_orth=0.3, lambda_kd=0.6)
    network = result["network"]
    encode = fixed_encoder(64, SMALL["encoder_dim"], seed=4)
    label_vectors = c2v.label_embeddings(10, SMALL["index_dim"], seed=4)
    means = np.stack([encode(c.x_train).mean(axis=0) for c in clients])
    center = _common.quantize_rows(means, bound=max(1.0, float(np.ceil(means.max()))),
                                   nonnegative=True).sum(axis=0) / len(clients)
    expected = [network.feature_direction(
        c2v.network_index(network, encode(c.x_train), c.y_train, label_vectors, center)[0])
        for c in clients]
    got = list(seen["directions"].values())
    assert len(got) == len(clients)
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("sampling", [True, False])
def test_sampling_uses_the_previous_set_and_tau(clients, monkeypatch, sampling):
    """Round r > 0 samples with p = sampling_probabilities(S, C_{r-1}, tau=tau); round 0 and
    sampling=False sample uniformly (no call)."""
    calls = []
    real = c2v.sampling_probabilities

    def spy(similarity, previous, **kw):
        calls.append((np.array(similarity), np.array(previous), kw))
        return real(similarity, previous, **kw)
    monkeypatch.setattr(c2v._simulation, "sampling_probabilities", spy)
    result = c2v.run_federated_client2vec(clients, n_features=64, n_classes=10, rounds=3,
                                          per_round=2, sampling=sampling, secure=False,
                                          tau=0.35, seed=5, **SMALL)
    if not sampling:
        assert calls == []
        return
    assert len(calls) == 2
    for r, (similarity, previous, kw) in enumerate(calls, start=1):
        assert np.array_equal(similarity, result["similarity"])
        assert previous.tolist() == result["sampled"][r - 1].tolist()
        assert kw == {"tau": 0.35}
