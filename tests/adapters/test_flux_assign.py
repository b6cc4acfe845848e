"""FLUX's unseen-client assignment (issue 24): the conformal rule against brute force on the
vectors, its validity on iid draws, the alpha boundary, the global-model fallback, and
run_flux end to end (secure = plaintext)."""

from __future__ import annotations

import logging
import re

import numpy as np
import pytest
from scipy.stats import binom

from finite_field import ParameterError
from omnifc import fl
from omnifc.adapters import flux
from omnifc.adapters._calibrated_k import CALIBRATED_ALPHA
from oracles import conformal_p_value, sq_distances

pytestmark = pytest.mark.timeout(120)


def _exact_sq_to_centroid(members, x):
    members = np.asarray(members, dtype=np.float64)
    return float(((np.asarray(x, dtype=np.float64) - members.mean(axis=0)) ** 2).sum())


@pytest.mark.parametrize("integer", [True, False])
def test_p_values_equal_brute_force_on_the_vectors(integer):
    """Clusters of 3, 7 and 20 points (integer coordinates: many exact score ties)."""
    rng = np.random.default_rng(240)
    sizes, centres = (3, 7, 20), np.array([[0, 0, 0], [6, 0, 3], [0, 9, -4]])
    if integer:
        train = np.concatenate([c + rng.integers(-2, 3, (n, 3)) for c, n in zip(centres, sizes)])
        new = rng.integers(-3, 10, (8, 3))
    else:
        train = np.concatenate([c + rng.normal(0, 1.5, (n, 3)) for c, n in zip(centres, sizes)])
        new = rng.normal(3, 4, (8, 3))
    labels = np.repeat([4, 1, 7], sizes)                      # unsorted, non-contiguous names
    clusters, p, sq = flux.conformal_p_values(sq_distances(np.concatenate([train, new])), labels)
    assert clusters.tolist() == [1, 4, 7]
    for i, x in enumerate(new):
        for k, c in enumerate(clusters):
            members = train[labels == c]
            assert p[i, k] == float(conformal_p_value(members.tolist(), x.tolist()))
            assert sq[i, k] == pytest.approx(_exact_sq_to_centroid(members, x), rel=1e-12,
                                             abs=1e-12)


def test_p_value_of_one_member_cluster_is_one():
    """n_c = 1: the two points' leave-one-out scores are the same distance: p = 1."""
    d = sq_distances([[0.0], [5.0], [100.0]])
    _, p, _ = flux.conformal_p_values(d, [0, 1])
    assert p.tolist() == [[float(conformal_p_value([[0.0]], [100.0])),
                           float(conformal_p_value([[5.0]], [100.0]))]] == [[1.0, 1.0]]


def test_validity_on_iid_gaussian_draws():
    """Exchangeable x and S (iid N(0, I_4)): P(p <= a) = floor(a (n+1)) / (n+1) exactly.

    2,000 independent draws (own S and x each), n = 19 (n + 1 = 20): the count of
    p <= alpha lies in the central 1 - 1e-6 binomial interval of Binomial(2000, 1/20), and
    so does the count of p <= 1/2 (Binomial(2000, 1/2)); 1e-6 is each check's false-alarm
    rate at this seed. With n = 9 (n + 1 = 10 < 1/alpha) p <= alpha never happens.
    """
    rng = np.random.default_rng(2024)
    draws, n = 2000, 19
    p_values = np.empty(draws)
    for b in range(draws):
        x = rng.standard_normal((n + 1, 4))
        p_values[b] = flux.conformal_p_values(sq_distances(x), np.zeros(n, np.int64))[1][0, 0]
    for level, prob in ((CALIBRATED_ALPHA, 1 / 20), (0.5, 10 / 20)):
        count = int(np.sum(p_values <= level))
        low, high = binom.ppf(0.5e-6, draws, prob), binom.isf(0.5e-6, draws, prob)
        assert low <= count <= high, (level, count, low, high)
    small = [flux.conformal_p_values(sq_distances(rng.standard_normal((10, 4))),
                                     np.zeros(9, np.int64))[1][0, 0] for _ in range(200)]
    assert min(small) >= 1 / 10 > CALIBRATED_ALPHA


def _two_clusters(n, rng, spread=1.0):
    a = rng.normal(0.0, spread, (n, 2))
    b = rng.normal(0.0, spread, (n, 2)) + [20.0, 0.0]
    return np.concatenate([a, b]), np.repeat([0, 1], n)


def test_alpha_exactly_at_the_boundary():
    """A client beyond every member: p = 1/(n+1). n = 19: p = 1/20 = alpha, rejected
    (p <= alpha); n = 18: p = 1/19 > alpha, kept (cluster listed as untestable);
    alpha just below 1/20: kept."""
    rng = np.random.default_rng(5)
    for n, expected in ((19, flux.GLOBAL), (18, 0)):
        train, labels = _two_clusters(n, rng)
        x = np.concatenate([train, [[-30.0, 0.0]]])     # far left: nearest is cluster 0
        out = flux.assign_with_evidence(sq_distances(x), labels, rule="calibrated")
        decision = out.decisions[0]
        assert decision.p_values == (1 / (n + 1), 1 / (n + 1))
        assert out.labels.tolist() == [expected] and decision.fallback == (n == 19)
        assert decision.untestable == (() if n == 19 else (0, 1))
    train, labels = _two_clusters(19, rng)
    x = np.concatenate([train, [[-30.0, 0.0]]])
    assert flux.assign_new_clients(sq_distances(x), labels, rule="calibrated",
                                   alpha=np.nextafter(0.05, 0)).tolist() == [0]


def test_far_client_falls_back_and_inside_client_gets_its_cluster():
    rng = np.random.default_rng(77)
    train, labels = _two_clusters(25, rng)
    new = np.array([[0.1, 0.2], [19.8, -0.3], [10.0, 60.0], [10.0, 0.0]])
    out = flux.assign_with_evidence(sq_distances(np.concatenate([train, new])), labels)
    # the middle point (10, 0) is farther from both centroids than every member: no cluster
    assert out.labels.tolist() == [0, 1, flux.GLOBAL, flux.GLOBAL]
    assert out.n_fallback == 2
    for i, x in enumerate(new):                          # the evidence is the brute force
        assert out.decisions[i].p_values == tuple(
            float(conformal_p_value(train[labels == c].tolist(), x.tolist())) for c in (0, 1))
    nearest = flux.assign_new_clients(sq_distances(np.concatenate([train, new])), labels)
    assert nearest.tolist()[:3] == [0, 1, int(np.argmin(
        [_exact_sq_to_centroid(train[labels == c], new[2]) for c in (0, 1)]))]


def test_equals_nearest_when_every_p_is_above_alpha_and_one_cluster_is_clearly_nearest():
    rng = np.random.default_rng(11)
    train = np.concatenate([rng.normal(c, 1.0, (30, 3)) for c in (0.0, 15.0, 30.0)])
    labels = np.repeat([0, 1, 2], 30)
    new = np.concatenate([rng.normal(c, 0.5, (4, 3)) for c in (0.0, 15.0, 30.0)])
    d = sq_distances(np.concatenate([train, new]))
    calibrated = flux.assign_with_evidence(d, labels)
    assert all(max(dec.p_values) > CALIBRATED_ALPHA for dec in calibrated.decisions)
    truth = [int(np.argmin([_exact_sq_to_centroid(train[labels == c], x) for c in range(3)]))
             for x in new]
    assert calibrated.labels.tolist() == flux.assign_new_clients(d, labels).tolist() == truth
    assert truth == [0] * 4 + [1] * 4 + [2] * 4


def test_largest_p_can_prefer_a_wide_cluster_over_a_nearer_tight_one():
    """Tight cluster at 0 (sd 0.1), wide cluster at 10 (sd 5), client at 3: the tight
    centroid is nearer (9 vs 49), but 3 is far beyond the tight cluster's own spread
    (p = 1/(n+1)) and typical for the wide one; both rules follow their definitions."""
    rng = np.random.default_rng(3)
    tight, wide = rng.normal(0, 0.1, (30, 1)), rng.normal(10, 5, (30, 1))
    train, labels = np.concatenate([tight, wide]), np.repeat([0, 1], 30)
    d = sq_distances(np.concatenate([train, [[3.0]]]))
    out = flux.assign_with_evidence(d, labels)
    p_wide = float(conformal_p_value(wide.tolist(), [3.0]))
    assert out.decisions[0].p_values == (1 / 31, p_wide) and p_wide > 0.1
    assert out.labels.tolist() == [1] and flux.assign_new_clients(d, labels).tolist() == [0]


def test_ties_in_p_go_to_the_nearest_centroid():
    """Two clusters of 2 far from x: p = 1/3 in both; the nearer centroid wins."""
    d = sq_distances([[0.0], [1.0], [10.0], [11.0], [30.0]])
    out = flux.assign_with_evidence(d, [0, 0, 1, 1])
    assert out.decisions[0].p_values == (1 / 3, 1 / 3) and out.labels.tolist() == [1]


def test_evidence_summary_and_log(caplog):
    rng = np.random.default_rng(1)
    train, labels = _two_clusters(4, rng)
    d = sq_distances(np.concatenate([train, [[0.0, 0.0]]]))
    with caplog.at_level(logging.INFO, logger="omnifc.adapters.flux._assign"):
        out = flux.assign_with_evidence(d, labels)
    decision = out.decisions[0]
    assert isinstance(decision, flux.AssignDecision) and decision.rule == "calibrated"
    assert decision.sizes == (4, 4) and decision.alpha == CALIBRATED_ALPHA
    with pytest.raises(AttributeError):
        decision.cluster = 1                                    # frozen
    text = decision.summary()
    assert text.startswith("new client 0 -> cluster 0 (calibrated, alpha=0.05: 0: p=")
    assert "too small to reject" in text and text in caplog.text
    assert "n + 1 < 1/alpha = 20" in caplog.text
    near = flux.assign_with_evidence(d, labels, rule="nearest").decisions[0]
    assert near.p_values == decision.p_values and near.untestable == decision.untestable
    assert near.sq_distances == decision.sq_distances and near.rule == "nearest"


def test_nearest_reports_the_calibrated_evidence_and_warns(caplog):
    """Under "nearest" each client keeps the nearest cluster's model, with the calibrated
    rule's p-values (the brute force on the vectors) beside it. At the boundary: with 19
    members a client beyond all of them has p = 1/20 = alpha in both clusters, so it
    resembles none (logged at WARNING with what "calibrated" would do); with 18 members
    p = 1/19 > alpha and it resembles cluster 0 and 1 (INFO only); a client inside cluster 1
    resembles it."""
    rng = np.random.default_rng(5)
    for n in (19, 18):
        train, labels = _two_clusters(n, rng)
        new = np.array([[-30.0, 0.0], [20.1, 0.2]])
        d = sq_distances(np.concatenate([train, new]))
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="omnifc.adapters.flux._assign"):
            out = flux.assign_with_evidence(d, labels, rule="nearest")
        far, inside = out.decisions
        assert out.labels.tolist() == [0, 1] and out.n_fallback == 0
        for decision, x in zip(out.decisions, new):
            assert decision.p_values == tuple(
                float(conformal_p_value(train[labels == c].tolist(), x.tolist()))
                for c in (0, 1))
        assert far.p_values == (1 / (n + 1), 1 / (n + 1))
        assert far.resembles_none == (n == 19) and not inside.resembles_none
        assert out.n_resembling_none == (1 if n == 19 else 0)
        warned = [r for r in caplog.records if r.levelno == logging.WARNING]
        if n == 19:
            assert [r.getMessage() for r in warned] == [far.summary()]
            assert far.summary().endswith("every p <= alpha: it resembles no cluster "
                                          "(rule='calibrated' would give it the global model))")
        else:
            assert warned == [] and "resembles no cluster" not in far.summary()
        calibrated = flux.assign_with_evidence(d, labels, rule="calibrated").decisions[0]
        assert calibrated.resembles_none == calibrated.fallback == (n == 19)
        assert "resembles no cluster" not in calibrated.summary()


def test_the_summary_and_the_log_lines_exactly(caplog):
    """Clusters of 3 and 20 (sizes in cluster order; the small one untestable), a client far
    from both under "calibrated" (cluster 0 untestable, so it keeps the larger p) and one
    inside cluster 1; two clusters of 20 and a far client (the global model). Every summary
    and log line is pinned, word for word."""
    rng = np.random.default_rng(9)
    train = np.concatenate([rng.normal(0.0, 1.0, (3, 2)), rng.normal(0.0, 1.0, (20, 2)) + [20, 0]])
    labels = np.repeat([0, 1], [3, 20])
    d = sq_distances(np.concatenate([train, [[20.0, 0.1]]]))
    with caplog.at_level(logging.INFO, logger="omnifc.adapters.flux._assign"):
        out = flux.assign_with_evidence(d, labels, rule="calibrated")
    decision = out.decisions[0]
    assert decision.sizes == (3, 20) and decision.untestable == (0,)
    p0, p1 = decision.p_values
    d0, d1 = decision.sq_distances
    assert decision.summary() == (
        f"new client 0 -> cluster 1 (calibrated, alpha=0.05: 0: p={p0:.3g} d2={d0:.4g} n=3, "
        f"1: p={p1:.3g} d2={d1:.4g} n=20; clusters [0] too small to reject at alpha "
        f"(n + 1 < 1/alpha))")
    assert [r.getMessage() for r in caplog.records] == [
        "clusters [0] have n + 1 < 1/alpha = 20 clients: their conformal p is at least "
        "1/(n + 1) > alpha, so no client can be rejected by them", decision.summary()]
    train, labels = _two_clusters(20, rng)
    far = flux.assign_with_evidence(sq_distances(np.concatenate([train, [[10.0, 80.0]]])),
                                    labels).decisions[0]
    q0, q1 = far.p_values
    e0, e1 = far.sq_distances
    assert far.fallback and far.summary() == (
        f"new client 0 -> global model (every p <= alpha) (calibrated, alpha=0.05: "
        f"0: p={q0:.3g} d2={e0:.4g} n=20, 1: p={q1:.3g} d2={e1:.4g} n=20)")
    with pytest.raises(ParameterError, match="alpha must lie in"):
        flux.assign_with_evidence(d, np.repeat([0, 1], [3, 20]), alpha=0.0)


def test_bad_input_raises_parameter_error():
    d = sq_distances([[0.0], [1.0], [5.0], [2.0]])
    with pytest.raises(ParameterError, match="rule must be one of"):
        flux.assign_new_clients(d, [0, 0, 1], rule="closest")
    with pytest.raises(ParameterError, match=re.escape("the prefix matrix holds no new clients")):
        flux.assign_with_evidence(d, [0, 0, 1, 1])
    with pytest.raises(ParameterError, match="non-empty 1-d array"):
        flux.assign_with_evidence(d, [[0, 0, 1]])
    with pytest.raises(ParameterError, match="non-empty 1-d array"):
        flux.assign_with_evidence(d, [])
    with pytest.raises(ParameterError, match="non-negative integers"):
        flux.assign_with_evidence(d, [0, -1, 1])
    with pytest.raises(ParameterError, match="non-negative integers"):
        flux.assign_with_evidence(d, [0.0, 0.5, 1.0])
    with pytest.raises(ParameterError, match="alpha must lie in"):
        flux.assign_with_evidence(d, [0, 0, 1], alpha=1.0)
    with pytest.raises(ParameterError, match=r"square .* got shape \(3, 4\)"):
        flux.assign_with_evidence(d[:3], [0, 0, 1])
    with pytest.raises(ParameterError, match=r"got shape \(16,\)"):
        flux.assign_new_clients(d.ravel(), [0, 0, 1])


def _new_shift_data(seed, per_group=19):
    """Rotated digits with 3 rotations; training clients from groups 0 and 1 only, unseen
    clients from all three (group 2's rotation is a shift no training client has)."""
    full = fl.make_federated("digits", shift="feature", n_groups=3,
                             clients_per_group=per_group, new_per_group=2, seed=seed)
    keep = full.groups < 2
    return fl.FederatedDataset(
        clients=[c for c, k in zip(full.clients, keep) if k], new_clients=full.new_clients,
        groups=full.groups[keep], new_groups=full.new_groups, n_features=full.n_features,
        n_classes=full.n_classes, shift=full.shift, n_groups=2, info=full.info)


def test_run_flux_rejects_an_unknown_assign_rule():
    data = fl.make_federated("digits", n_groups=2, clients_per_group=2, new_per_group=1)
    with pytest.raises(ParameterError, match="assign_rule must be one of"):
        flux.run_flux(data, fl.MLP(data.n_features, 8, data.n_classes), assign_rule="far")


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_run_flux_calibrated_end_to_end_secure_equals_plaintext():
    """19 training clients per group (n + 1 = 20 = 1/alpha: the test can reject), seed 31:
    the unseen group-2 clients fall back to the global model, the others get their group's
    cluster; secure and plaintext give the same prefix, labels, evidence and accuracy, and
    the accuracy is recomputed from the models by hand."""
    data = _new_shift_data(31)
    model = fl.MLP(data.n_features, 32, data.n_classes)
    secure = flux.run_flux(data, model, seed=31, assign_rule="calibrated",
                           parties=np.arange(len(data.clients)) % 3,
                           new_parties=np.arange(len(data.clients) + len(data.new_clients)) % 3)
    plain = flux.run_flux(data, model, seed=31, secure=False, assign_rule="calibrated")
    assert np.array_equal(secure.prefix, plain.prefix)
    assert np.array_equal(secure.new_labels, plain.new_labels)
    assert secure.assignment.decisions == plain.assignment.decisions
    assert secure.new_accuracy == plain.new_accuracy
    assert secure.n_clusters == 2
    cluster_group = {c: int(data.groups[secure.labels == c][0]) for c in range(2)}
    unseen_group = data.new_groups == 2
    assert np.all(secure.new_labels[unseen_group] == flux.GLOBAL)
    for i, dec in enumerate(secure.assignment.decisions):
        if dec.cluster != flux.GLOBAL:
            assert cluster_group[dec.cluster] == data.new_groups[i]
    # accuracy by hand: the chosen model per client, the global model for GLOBAL
    correct = total = 0
    for label, client in zip(secure.new_labels, data.new_clients):
        params = secure.global_model if label == flux.GLOBAL else secure.models[label]
        predicted = model.predict(params, client.x_test)
        correct += int(np.sum(predicted == client.y_test))
        total += client.y_test.size
    assert secure.new_accuracy == pytest.approx(correct / total, abs=1e-12)
    nearest = flux.assign_with_evidence(secure.prefix, secure.labels, rule="nearest")
    assert set(nearest.labels[unseen_group].tolist()) <= {0, 1}  # nearest forces a cluster
    assert [d.p_values for d in nearest.decisions] == [
        d.p_values for d in secure.assignment.decisions]         # with the same evidence
    assert [d.resembles_none for d in nearest.decisions] == (
        secure.new_labels == flux.GLOBAL).tolist()


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_benchmark_script_quick_reports_both_rules():
    """benchmarks/_flux_assign.py --quick (feature shift, K = 2, seed 5101): its summary
    row holds run_flux's own unseen accuracy for "nearest" (the default rule)."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, str(root / "benchmarks" / "_flux_assign.py"),
                           "--quick"], cwd=root, capture_output=True, text=True, timeout=280)
    assert done.returncode == 0, done.stderr[-2000:]
    row = [line.split() for line in done.stdout.splitlines()
           if line.startswith("feature-2 ") and " seed " not in line]      # the summary row
    data = fl.make_federated("digits", shift="feature", n_groups=2, clients_per_group=4,
                             new_per_group=4, seed=5101)
    run = flux.run_flux(data, fl.MLP(data.n_features, 32, data.n_classes), seed=5101,
                        secure=False)
    assert len(row) == 1 and row[0][2] == f"{run.new_accuracy:.3f}"
