"""CLoVE on a classifier (softmax regression on shifted digits) in the omnifc.fl loop:
planted clusters recovered through secure D + secure sums, partial participation, newcomers
after the freeze, silhouette auto-K, and secure == plaintext down to the models."""

from __future__ import annotations

import itertools
import warnings

import numpy as np
import pytest
from scipy.cluster.hierarchy import linkage
from scipy.spatial.distance import pdist
from sklearn.metrics import adjusted_rand_score

from finite_field import ParameterError
from omnifc import fl
from omnifc.adapters import clove

from benchmark_scripts import load_benchmark
from oracles import sq_distances

from .test_clove import MODELS, TARGETS, _fl_clients, _keep, _Scalar

pytestmark = pytest.mark.timeout(300)


def _setup(shift, k, seed, new_per_group=0, khat=None):
    data = fl.make_federated("digits", shift=shift, n_groups=k, clients_per_group=5,
                             new_per_group=new_per_group, seed=seed)
    model = fl.SoftmaxRegression(data.n_features, data.n_classes)
    start = [model.init(seed=100 * seed + j) for j in range(khat or k)]
    return data, model, start


@pytest.fixture(scope="module")
def concept_runs():
    """Concept shift (labels permuted per group), K = 3 known, seed 21."""
    data, model, start = _setup("concept", 3, 21)
    secure = clove.run_clove_fl(data.clients, model, start, n_clusters=3, rounds=6, seed=21)
    plain = clove.run_clove_fl(data.clients, model, start, n_clusters=3, rounds=6, seed=21,
                               secure=False)
    return data, model, start, secure, plain


@pytest.mark.slow
def test_clove_on_a_classifier_recovers_the_planted_clusters(concept_runs):
    data, model, start, run, _ = concept_runs
    assert adjusted_rand_score(data.groups, run.assignments[0]) < 0.5    # random round 0
    assert all(adjusted_rand_score(data.groups, a) == 1.0 for a in run.assignments[1:])
    assert run.frozen_from is not None and run.frozen_from <= 5
    train = clove.classifier_trainer(model)
    plain = fl.run_federated(data.clients, [start[0]], rounds=6, local_train=train, seed=21)
    fedavg = fl.mean_accuracy(model, plain.models, plain.assignment, data.clients)
    assert run.accuracy > 0.85 and run.accuracy > fedavg + 0.3


def test_secure_and_plaintext_runs_are_identical(concept_runs):
    *_, secure, plain = concept_runs
    assert [a.tolist() for a in secure.assignments] == [a.tolist() for a in plain.assignments]
    for d_sec, d_plain in zip(secure.distances, plain.distances):
        assert (d_sec is None and d_plain is None) or np.array_equal(d_sec, d_plain)
    for c_sec, c_plain in zip(secure.costs, plain.costs):
        assert (c_sec is None and c_plain is None) or np.array_equal(c_sec, c_plain)
    assert all(np.array_equal(a, b) for a, b in zip(secure.models, plain.models))


@pytest.mark.parametrize("shift, k, seed", [("feature", 3, 22), ("concept", 5, 25)])
def test_auto_k_finds_the_planted_k(shift, k, seed):
    """K unknown: 15 models (the paper's upper bound), omnifc's ward-gap rule (default)."""
    data, model, start = _setup(shift, k, seed, khat=15)
    run = clove.run_clove_fl(data.clients, model, start, k_upper=15, rounds=4, seed=seed,
                             secure=False, stability_rounds=None)
    assert run.n_clusters[1:] == [k, k, k]
    assert adjusted_rand_score(data.groups, run.assignments[-1]) == 1.0


def test_ward_gap_rule_against_sklearn_merge_distances():
    """choose_k_gap from D equals the widest ratio of sklearn's ward merge distances on the
    vectors (an independent implementation), and it differs from the silhouette rule on
    a far group."""
    from sklearn.cluster import AgglomerativeClustering

    rng = np.random.default_rng(3)
    for _ in range(15):
        k = int(rng.integers(2, 6))
        x = np.concatenate([rng.normal(0, 20, 4) + rng.normal(0, 1, (int(rng.integers(3, 6)), 4))
                            for _ in range(k)])
        d = ((x[:, None] - x[None]) ** 2).sum(-1)
        heights = np.sort(AgglomerativeClustering(linkage="ward", compute_distances=True)
                          .fit(x).distances_)
        n = x.shape[0]
        ratios = {c: heights[n - c] / heights[n - c - 1] for c in range(2, n // 2 + 1)}
        assert clove.choose_k_gap(d) == max(ratios, key=ratios.get)
    far = np.array([[0.0], [0.1], [5.0], [5.1], [100.0], [100.1]])
    assert clove.choose_k_gap((far - far.T) ** 2) == 3 and clove.choose_k((far - far.T) ** 2) == 2


@pytest.mark.slow
def test_newcomers_after_the_freeze_get_their_groups_model():
    """Seed 24: the clusters are right before the freeze (with K_hat = K = 3 the random
    round 0 sometimes merges two groups for good, e.g. seed 23: see docs/adapters.md), so
    each newcomer's nearest centroid must be its own group's."""
    data, model, start = _setup("concept", 3, 24, new_per_group=2)
    clients = data.clients + data.new_clients
    old = len(data.clients)
    join = np.r_[np.zeros(old, int), np.full(len(data.new_clients), 6)]
    run = clove.run_clove_fl(clients, model, start, n_clusters=3, rounds=8, seed=24,
                             join_round=join)
    assert run.frozen_from is not None and run.frozen_from < 6
    assert sorted(run.newcomers) == list(range(old, len(clients)))
    final = run.assignments[-1]
    group_model = {int(data.groups[i]): int(final[i]) for i in range(old)}
    assert len(set(group_model.values())) == 3
    for j, i in enumerate(range(old, len(clients))):
        assert run.newcomers[i] == (6, group_model[int(data.new_groups[j])])
    assert all(d is None for d in run.distances[run.frozen_from:6])   # frozen: no vectors
    assert run.distances[6] is not None                                # newcomers' round


def test_partial_participation():
    """60 % of the clients each round: non-participants keep their model, every client is
    clustered the first time it takes part, and the planted clusters are recovered."""
    data, model, start = _setup("feature", 3, 24)
    run = clove.run_clove_fl(data.clients, model, start, n_clusters=3, rounds=8, seed=24,
                             participation=0.6)
    sizes = [r.participants.size for r in run.run.history]
    assert sizes == [9] * 8
    final = run.assignments[-1]
    assert (final >= 0).all()
    assert adjusted_rand_score(data.groups, final) == 1.0
    for r in range(1, 8):
        idle = np.setdiff1d(np.arange(15), run.run.history[r].participants)
        before, now = run.assignments[r - 1], run.assignments[r]
        assert np.array_equal(before[idle], now[idle])


# -- folded in from test_clove_bites2.py --------------------------------------------------
# omnifc.adapters.clove: the documented defaults and rules of the round loops (issue 14).
#
# Spies (monkeypatch) check that the documented default arguments reach the building blocks
# (``choose_k`` / ``choose_k_gap`` / ``cluster_clients`` / ``protect`` / ``is_stable``);
# the K rules are recomputed with scipy on plaintext; the random first round and the freeze
# are checked against the rules written in ``run_clove_fl``'s docstring.


def _spy(monkeypatch, name):
    """Record the keyword arguments of ``clove._simulation.<name>`` and call the real function."""
    real = getattr(clove._simulation, name)
    calls = []

    def spy(*args, **kwargs):
        calls.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(clove._simulation, name, spy)
    return calls


def _gap_reference(points, method="ward", k_upper=15):
    """The widest relative gap of scipy's merge heights on the points themselves."""
    x = np.asarray(points, dtype=np.float64)
    n = len(x)
    heights = np.sort(linkage(pdist(x), method)[:, 2])
    best_k, best = 2, -1.0
    for k in range(2, min(k_upper, n // 2) + 1):
        low, high = heights[n - k - 1], heights[n - k]
        ratio = high / low if low > 0 else (np.inf if high > 0 else 1.0)
        if ratio > best:
            best_k, best = k, ratio
    return best_k


# ----------------------------------------------------------------------------- run_clove_fl

def _spy_calibrated(monkeypatch):
    """Record (D, keyword arguments) of every calibrated_k call and call the real one."""
    from omnifc.adapters import _calibrated_k

    real, calls = _calibrated_k.calibrated_k, []

    def spy(d, **kwargs):
        calls.append((np.array(d, copy=True), kwargs))
        return real(d, **kwargs)

    monkeypatch.setattr(_calibrated_k, "calibrated_k", spy)
    return calls


def test_run_clove_fl_default_k_rule_is_calibrated_and_gap_gets_k_upper(monkeypatch):
    cal = _spy_calibrated(monkeypatch)
    gap = _spy(monkeypatch, "choose_k_gap")
    km = _spy(monkeypatch, "cluster_clients")
    assert clove._simulation.DEFAULT_K_RULE == "calibrated"
    clove.run_clove_fl(_fl_clients(TARGETS), _Scalar(), MODELS, rounds=1, local_train=_keep,
                       first_round="evaluation_based", secure=False)
    # the paper's K_ub = 15, capped at n // 2; seed = 0 by default
    assert [kw for _, kw in cal] == [dict(max_clusters=min(15, len(TARGETS) // 2),
                                          random_state=0)]
    assert gap == [] and [c["random_state"] for c in km] == [0]
    km.clear()
    clove.run_clove_fl(_fl_clients(TARGETS), _Scalar(), MODELS, rounds=1, local_train=_keep,
                       first_round="evaluation_based", secure=False, seed=7, k_upper=4,
                       k_rule="gap")
    assert gap == [dict(k_upper=4)]
    assert [c["random_state"] for c in km] == [7]


def test_run_clove_fl_silhouette_rule_gets_tolerance_and_k_upper(monkeypatch):
    sil = _spy(monkeypatch, "choose_k")
    models = [np.array([c]) for c in TARGETS]      # K_hat = 6: any K the rule picks fits
    common = dict(rounds=1, local_train=_keep, first_round="evaluation_based", secure=False,
                  k_rule="silhouette")
    clove.run_clove_fl(_fl_clients(TARGETS), _Scalar(), models, **common)
    assert sil == [dict(k_upper=15, tolerance=0.10)]
    clove.run_clove_fl(_fl_clients(TARGETS), _Scalar(), models, **common, k_upper=3,
                       k_tolerance=0.5)
    assert sil[-1] == dict(k_upper=3, tolerance=0.5)


def test_run_clove_fl_secure_without_parties_passes_none(monkeypatch):
    prot = _spy(monkeypatch, "protect")
    sums = _spy(monkeypatch, "secure_group_sums")
    clove.run_clove_fl(_fl_clients(TARGETS), _Scalar(), MODELS, n_clusters=3, rounds=1,
                       local_train=_keep, first_round="evaluation_based", secure=True)
    assert [c["parties"] for c in prot] == [None]    # the protocol's own party names
    assert [c["parties"] for c in sums] == [None]


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4, 5])
def test_random_round_gives_every_model_a_client_when_exactly_enough(seed):
    # 3 clients, 3 models: "repaired so every model gets a client when there are enough"
    run = clove.run_clove_fl(_fl_clients([0.0, 1.5, 3.0]), _Scalar(), MODELS, n_clusters=3,
                             rounds=1, local_train=_keep, seed=seed, secure=False)
    assert sorted(run.assignments[0].tolist()) == [0, 1, 2]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_participation_one_means_everyone_and_draws_nothing(seed):
    # a fraction >= 1 is full participation: the same run as participation=None
    common = dict(rounds=3, local_train=_keep, seed=seed, secure=False, n_clusters=3)
    full = clove.run_clove_fl(_fl_clients(TARGETS), _Scalar(), MODELS, **common)
    one = clove.run_clove_fl(_fl_clients(TARGETS), _Scalar(), MODELS, participation=1.0,
                             **common)
    assert [a.tolist() for a in one.assignments] == [a.tolist() for a in full.assignments]


def test_freeze_counts_only_the_last_held_random_round():
    # random_rounds=2: round 0 is held (not counted), round 1 counts; with stability
    # window 1 every client is stable at the check of round 2 -> frozen from round 2
    common = dict(n_clusters=3, local_train=_keep, secure=False, stability_rounds=1)
    held = clove.run_clove_fl(_fl_clients(TARGETS), _Scalar(), MODELS, rounds=4,
                              random_rounds=2, **common)
    assert held.frozen_from == 2
    # the paper's single random round counts: stable (window 1) at round 1
    paper = clove.run_clove_fl(_fl_clients(TARGETS), _Scalar(), MODELS, rounds=3, **common)
    assert paper.frozen_from == 1


def test_freeze_history_lengths_with_held_rounds(monkeypatch):
    # is_stable sees each client's history: 0 entries in round 1 (round 0 held), then one
    seen = []
    real = clove.is_stable

    def spy(history, *args, **kwargs):
        seen.append(len(history))
        return real(history, *args, **kwargs)

    monkeypatch.setattr(clove._simulation, "is_stable", spy)
    clove.run_clove_fl(_fl_clients(TARGETS), _Scalar(), MODELS, rounds=3, random_rounds=2,
                       n_clusters=3, local_train=_keep, secure=False, stability_rounds=3,
                       paper=True)
    # round 0: no check; round 1: first client has 0 entries -> all() stops there;
    # round 2: 1 entry each (first client unstable -> stops)
    assert seen == [0, 1]


# ----------------------------------------------------------------------------- run_clove

def _linear_clients():
    rng = np.random.default_rng(5)
    clients = []
    for theta in ([1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [0.0, 1.0], [-1.0, 0.0], [-1.0, 0.0]):
        x = rng.standard_normal((20, 2))
        clients.append((x, x @ np.array(theta)))
    return clients


def test_run_clove_defaults_reach_calibrated_k_kmeans_and_the_gap_rule(monkeypatch):
    cal = _spy_calibrated(monkeypatch)               # DEFAULT_K_RULE = "calibrated"
    ck = _spy(monkeypatch, "choose_k_gap")
    km = _spy(monkeypatch, "cluster_clients")
    start = np.array([[1.0, 0.1], [0.1, 1.0], [-1.0, 0.1], [0.5, 0.5], [-0.5, 0.5],
                      [0.0, -1.0]])                 # K_hat = 6 >= any K chosen from 6
    clove.run_clove(_linear_clients(), start, rounds=1, secure=False)
    assert [kw for _, kw in cal] == [dict(max_clusters=3, random_state=0)]    # 6 // 2
    assert ck == [] and km == [dict(random_state=0)]
    km.clear()
    clove.run_clove(_linear_clients(), start, rounds=1, secure=False, seed=9, k_upper=3,
                    k_rule="gap")
    assert ck == [dict(k_upper=3)] and km == [dict(random_state=9)]
    paper = _spy(monkeypatch, "choose_k")
    clove.run_clove(_linear_clients(), start, rounds=1, secure=False, k_rule="silhouette")
    assert paper == [dict(k_upper=15)]
    seen = []
    clove.run_clove(_linear_clients(), start, rounds=1, secure=False, k_upper=4,
                    k_rule=lambda d, k_upper: seen.append((d.shape, k_upper)) or 2)
    assert seen == [((6, 6), 4)]
    with pytest.raises(ParameterError, match="k_rule must be one of .*calibrated"):
        clove.run_clove(_linear_clients(), start, rounds=1, secure=False, k_rule="elbow")


def _one_population_clients(n=8, seed=5):
    """n linear-regression clients of ONE population (same theta, noisy targets)."""
    rng = np.random.default_rng(seed)
    clients = []
    for _ in range(n):
        x = rng.standard_normal((30, 3))
        clients.append((x, x @ np.array([1.0, 0.5, -0.5]) + 0.1 * rng.standard_normal(30)))
    return clients


def test_calibrated_k_rule_gets_d_the_upper_end_and_the_seed(monkeypatch):
    """k_rule="calibrated": calibrated_k on the round's D with max_clusters = min(k_upper,
    n // 2) (the gap rule's upper end) and the run's seed as its public random_state; the K
    used is the K it returned."""
    from omnifc.adapters._calibrated_k import calibrated_k as real

    calls = _spy_calibrated(monkeypatch)
    start = np.array([[1.0, 0.1], [0.1, 1.0], [-1.0, 0.1], [0.5, 0.5], [-0.5, 0.5],
                      [0.0, -1.0]])
    run = clove.run_clove(_linear_clients(), start, rounds=1, secure=False, seed=9,
                          k_rule="calibrated")
    assert [kw for _, kw in calls] == [dict(max_clusters=3, random_state=9)]   # 6 // 2
    assert np.array_equal(calls[0][0], run.distances[0])
    assert run.n_clusters == [real(run.distances[0], max_clusters=3, random_state=9).k]
    calls.clear()
    clove.run_clove(_linear_clients(), start, rounds=1, secure=False, k_upper=2,
                    k_rule="calibrated")
    assert [kw for _, kw in calls] == [dict(max_clusters=2, random_state=0)]
    calls.clear()
    clove.run_clove(_linear_clients()[:3], start, rounds=1, secure=False,
                    k_rule="calibrated")          # below 4 clients: as the gap rule, all n
    assert [kw for _, kw in calls] == [dict(max_clusters=3, random_state=0)]
    calls.clear()
    fl_run = clove.run_clove_fl(_fl_clients(TARGETS), _Scalar(), MODELS, rounds=1,
                                local_train=_keep, first_round="evaluation_based",
                                secure=False, seed=4, k_rule="calibrated")
    assert [kw for _, kw in calls] == [dict(max_clusters=min(15, len(TARGETS) // 2),
                                            random_state=4)]
    assert fl_run.n_clusters == [real(calls[0][0], **calls[0][1]).k]


def test_calibrated_k_rule_keeps_one_population_on_one_model_where_gap_splits_it():
    """One population (every client the same theta): the calibrated rule answers K = 1 and
    every client ends on one model, secure and plaintext alike; the gap rule (K >= 2 by
    construction) splits the population."""
    clients = _one_population_clients()
    start = clove.random_unit_models(4, 3, seed=1)
    plain = clove.run_clove(clients, start, rounds=2, secure=False, k_rule="calibrated")
    secure = clove.run_clove(clients, start, rounds=2, k_rule="calibrated")
    assert plain.n_clusters == [1, 1]
    assert len(set(plain.assignments[-1].tolist())) == 1
    assert [a.tolist() for a in secure.assignments] == [a.tolist() for a in plain.assignments]
    assert np.array_equal(secure.models, plain.models)
    gap = clove.run_clove(clients, start, rounds=2, secure=False, k_rule="gap")
    assert all(k >= 2 for k in gap.n_clusters)


def test_run_clove_passes_the_stability_rule(monkeypatch):
    rules = []
    real = clove.is_stable

    def spy(history, rounds=3, rule="intended"):
        rules.append((rounds, rule))
        return real(history, rounds, rule)

    monkeypatch.setattr(clove._simulation, "is_stable", spy)
    start = np.array([[1.0, 0.1], [0.1, 1.0], [-1.0, 0.1]])
    clove.run_clove(_linear_clients(), start, n_clusters=3, rounds=3, secure=False,
                    stability_rounds=2, stability_rule="literal")
    assert rules and set(rules) == {(2, "literal")}
    rules.clear()
    clove.run_clove(_linear_clients(), start, n_clusters=3, rounds=3, secure=False)
    assert rules and set(rules) == {(3, "intended")}


# ----------------------------------------------------------------------------- K rules

def test_choose_k_gap_identical_clients_keep_the_smallest_k():
    # every merge height is 0: every ratio is 1 and the first (K = 2) is kept, silently
    x = np.zeros((8, 2))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert clove.choose_k_gap(sq_distances(x)) == 2


def test_choose_k_gap_duplicates_do_not_divide_by_zero():
    # three pairs of identical clients: heights 0, 0, 0, h1, h2; K = 3 has an infinite gap
    x = np.array([[0.0], [0.0], [4.0], [4.0], [10.0], [10.0]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert clove.choose_k_gap(sq_distances(x)) == _gap_reference(x) == 3


def test_choose_k_gap_uses_ward_not_single_linkage():
    # on these 8 clients ward's widest gap is at K = 3, single linkage's at K = 2
    x = np.array([[18.0], [12.0], [13.0], [17.0], [11.0], [15.0], [16.0], [4.0]])
    assert _gap_reference(x, "ward") != _gap_reference(x, "single")
    assert clove.choose_k_gap(sq_distances(x)) == _gap_reference(x, "ward")


# ----------------------------------------------------------------------------- synthetic data

@pytest.mark.parametrize("seed", [0, 1, 2])
def test_true_models_pairwise_gaps_within_delta_and_spread_delta(seed):
    # "pairwise distances in [delta, spread*delta]": a tight spread (1.2 x 0.5 = 0.6) binds
    delta, spread = 0.5, 1.2
    thetas = clove.true_models(4, 6, delta, np.random.default_rng(seed), spread=spread)
    gaps = pdist(thetas)
    assert thetas.shape == (4, 6)
    np.testing.assert_allclose(np.linalg.norm(thetas, axis=1), 1.0)
    assert gaps.min() >= delta and gaps.max() <= spread * delta


# ----------------------------------------------------------------------------- run_clove_fl, more

def test_run_clove_fl_default_trainer_is_sgd_1_epoch_batch_20_rate_0_3(monkeypatch):
    from omnifc import fl

    made = []

    def spy(model, **kwargs):                       # record the arguments; _Scalar has no
        made.append((model, kwargs))                # gradient, so train nothing
        return _keep

    monkeypatch.setattr(fl, "sgd_trainer", spy)
    model = _Scalar()
    clove.run_clove_fl(_fl_clients(TARGETS), model, MODELS, n_clusters=3, rounds=1,
                       secure=False)
    assert len(made) == 1 and made[0][0] is model
    assert made[0][1] == dict(epochs=1, batch_size=20, learning_rate=0.3)


def test_run_clove_fl_participation_callable_gets_the_round_and_a_generator():
    calls = []

    def pick(r, rng):
        calls.append((r, isinstance(rng, np.random.Generator)))
        return np.array([0, 1, 2, 3, 4, 5])

    clove.run_clove_fl(_fl_clients(TARGETS), _Scalar(), MODELS, n_clusters=3, rounds=3,
                       local_train=_keep, participation=pick, secure=False)
    assert calls == [(0, True), (1, True), (2, True)]


def test_run_clove_fl_parties_reach_every_protocol_call(monkeypatch):
    # the secure calls get the party labels of exactly the clients they cover, in order
    prot = _spy(monkeypatch, "protect")
    sums = _spy(monkeypatch, "secure_group_sums")
    names = ["p0", "p1", "p2", "p3", "p4", "p5", "p6"]
    join = [0, 0, 0, 0, 0, 0, 4]
    run = clove.run_clove_fl(_fl_clients(TARGETS + [0.75]), _Scalar(), MODELS, n_clusters=3,
                             rounds=5, local_train=_keep, join_round=join,
                             first_round="evaluation_based", secure=True, parties=names,
                             stability_rounds=1)
    assert run.frozen_from == 1 and run.newcomers.keys() == {6}
    assert [c["parties"] for c in prot] == [names[:6], names]   # round 0, newcomer round 4
    assert [c["parties"] for c in sums] == [names[:6]]


def test_only_round_zero_is_repaired():
    # "round 0 gives each participant a random model, repaired so every model gets a
    # client": 3 newcomers in the held random round 1 draw uniformly with no repair, so
    # they miss a model with probability 7/9 per seed; over 10 seeds some seed must miss
    # one (all 10 covering is (2/9)^10 ~ 3e-7), while round 0 (3 clients) always covers
    join = [0, 0, 0, 1, 1, 1]
    missing = 0
    for seed in range(10):
        run = clove.run_clove_fl(_fl_clients(TARGETS), _Scalar(), MODELS, n_clusters=3,
                                 rounds=2, random_rounds=2, join_round=join,
                                 local_train=_keep, seed=seed, secure=False)
        assert sorted(run.assignments[0][:3].tolist()) == [0, 1, 2]
        newcomers = run.assignments[1][3:].tolist()
        assert set(newcomers) <= {0, 1, 2}
        missing += len(set(newcomers)) < 3
    assert missing > 0


def _exact_silhouette(x, labels):
    """The silhouette of D = squared differences in exact fractions (singletons score 0)."""
    from fractions import Fraction

    pts = [Fraction(int(v)) for v in x]
    total = Fraction(0)
    for i, li in enumerate(labels):
        own = [j for j, lj in enumerate(labels) if lj == li and j != i]
        if not own:
            continue
        a = sum((pts[i] - pts[j]) ** 2 for j in own) / len(own)
        b = min(sum((pts[i] - pts[j]) ** 2 for j, lj in enumerate(labels) if lj == c)
                / sum(1 for lj in labels if lj == c) for c in set(labels) if c != li)
        total += (b - a) / max(a, b)
    return total / len(labels)


def test_choose_k_keeps_the_first_k_on_an_exact_silhouette_tie():
    # K replaces the best only if its silhouette EXCEEDS (1 + tolerance) x the best: with
    # tolerance 0 and K = 4, 5 tied exactly (fractions), K = 4 stays
    from sklearn.cluster import AgglomerativeClustering

    x = np.array([2.0, 3.0, 0.0, 5.0, 2.0, 5.0, 4.0])
    exact = {k: _exact_silhouette(x, AgglomerativeClustering(n_clusters=k).fit(
        x[:, None]).labels_.tolist()) for k in range(2, 7)}
    assert exact[4] == exact[5] == max(exact.values())
    assert clove.choose_k(sq_distances(x[:, None]), k_upper=6, tolerance=0.0) == 4


@pytest.mark.parametrize("seed", range(8))
def test_true_models_default_spread_is_five(seed):
    # 14 unit models in 3-d at delta 0.3 crowd enough for the default bound 5 x 0.3 to bind
    delta = 0.3
    gaps = pdist(clove.true_models(14, 3, delta, np.random.default_rng(seed)))
    assert gaps.min() >= delta and gaps.max() <= 5.0 * delta


# -- round 0 restarts (issue 24): a random round 0 must not lock merged groups in ----------

def _unequal_mlp_case(name, k, seed, train_samples=150, shift="feature"):
    """5 clients in group 0, 2 in every other group (unequal groups), a small MLP: the CLoVE
    study's case (``benchmarks/clove_label_reference.py::case``), feature shift by default."""
    return load_benchmark("clove_label_reference").case(name, k, seed, shift=shift,
                                                        train_samples=train_samples)[:4]


def _silhouette(d, labels):
    """Mean silhouette on sqrt(D), from its definition (plain Python)."""
    r = np.sqrt(np.maximum(np.asarray(d, dtype=float), 0.0))
    n, out = len(labels), []
    for i in range(n):
        own = [r[i, j] for j in range(n) if j != i and labels[j] == labels[i]]
        if not own:
            out.append(0.0)
            continue
        a = sum(own) / len(own)
        b = min(np.mean([r[i, j] for j in range(n) if labels[j] == c])
                for c in set(labels) if c != labels[i])
        out.append((b - a) / max(a, b))
    return sum(out) / n


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_restarts_undo_a_round0_merge_and_keep_the_best_separated_run():
    clients, groups, model, start = _unequal_mlp_case("breast_cancer", 2, 12)
    # the paper's k-means (one k-means++ run per round): the previous pass's restarts=4
    one = clove.run_clove_fl(clients, model, start, n_clusters=2, rounds=8, secure=False,
                             seed=12, paper=True)
    assert adjusted_rand_score(groups, one.assignments[-1]) < 0.5     # round 0 merged them
    four = clove.run_clove_fl(clients, model, start, n_clusters=2, rounds=8, secure=False,
                              seed=12, restarts=4, kmeans_inits="auto", transform="identity")
    assert adjusted_rand_score(groups, four.assignments[-1]) == 1.0
    assert len(four.restart_scores) == 4 and one.restart_scores is None

    def last(run):
        return next((d, lab) for d, lab in zip(reversed(run.distances), reversed(run.labels))
                    if d is not None and lab is not None)

    # the kept run has the largest silhouette of its last clustering (recomputed here), and
    # restart 0 is the restarts=1 run
    assert _silhouette(*last(four)) == pytest.approx(max(four.restart_scores), rel=1e-9)
    assert _silhouette(*last(one)) == pytest.approx(four.restart_scores[0], rel=1e-9)
    # every restart's final assignment is reported: restart 0's is the restarts=1 run's,
    # the kept one's is the run's own, and here the draws disagree
    assert one.restart_assignments is None and len(four.restart_assignments) == 4
    assert np.array_equal(four.restart_assignments[0], one.assignments[-1])
    assert np.array_equal(four.restart_assignments[int(np.argmax(four.restart_scores))],
                          four.assignments[-1])
    assert len({tuple(a) for a in four.restart_assignments}) > 1


def test_restarts_must_be_positive():
    clients, _, model, start = _unequal_mlp_case("breast_cancer", 2, 0, train_samples=20)
    with pytest.raises(ParameterError, match="restarts must be >= 1"):
        clove.run_clove_fl(clients, model, start, n_clusters=2, rounds=1, secure=False,
                           restarts=0)


# -- k-means inits and the defaults (issue 24, second pass) -------------------------------

def _partitions(n, k):
    """Every partition of range(n) into k nonempty blocks, as canonical label tuples."""
    for labels in itertools.product(range(k), repeat=n):
        if labels[0] == 0 and len(set(labels)) == k and all(
                labels.index(c) < labels.index(c + 1) for c in range(k - 1)):
            yield labels


def _inertia(d, labels):
    """k-means objective from D alone: sum over blocks of (sum of its pairwise D) / size."""
    total = 0.0
    for c in set(labels):
        block = [i for i, lab in enumerate(labels) if lab == c]
        total += sum(d[i][j] for i in block for j in block if i < j) / len(block)
    return total


def _best_partition(d, k):
    """The least-inertia partition by brute force (asserted unique)."""
    scored = sorted((_inertia(d, p), p) for p in _partitions(len(d), k))
    assert scored[1][0] > scored[0][0] + 1e-12 * max(1.0, scored[0][0])
    return scored[0][1]


def _canonical(labels):
    first = {}
    return tuple(first.setdefault(int(x), len(first)) for x in labels)


def test_kmeans_inits_find_the_least_inertia_partition_one_run_misses():
    x = [18, 4, 6, 17, 8, 5, 16]                 # integers: D exact in floating point
    d = [[float((a - b) ** 2) for b in x] for a in x]
    best = _best_partition(d, 3)
    ten = clove.cluster_clients(np.array(d), 3, random_state=0, n_init=10)
    one = clove.cluster_clients(np.array(d), 3, random_state=0)       # the paper's "auto"
    assert _canonical(ten) == best
    assert _inertia(d, _canonical(one)) > _inertia(d, best)


def _clustered_rounds(run):
    return [(d, lab) for d, lab in zip(run.distances, run.labels)
            if d is not None and lab is not None]


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_kmeans_inits_in_the_loop_give_every_round_its_least_inertia_partition():
    # label shift, breast cancer, K = 2, 7 clients: 63 partitions per round, brute force
    clients, groups, model, start = _unequal_mlp_case("breast_cancer", 2, 54, shift="label")
    ten = clove.run_clove_fl(clients, model, start, n_clusters=2, rounds=8, secure=False,
                             seed=54, restarts=1, kmeans_inits=10)
    rounds = _clustered_rounds(ten)
    assert len(rounds) >= 3
    for d, lab in rounds:
        assert _canonical(lab) == _best_partition(d.tolist(), 2)
    paper = clove.run_clove_fl(clients, model, start, n_clusters=2, rounds=8, secure=False,
                               seed=54, paper=True)
    assert any(_inertia(d.tolist(), _canonical(lab)) > _inertia(d.tolist(),
               _best_partition(d.tolist(), 2)) for d, lab in _clustered_rounds(paper))
    assert adjusted_rand_score(groups, ten.assignments[-1]) == 1.0
    assert adjusted_rand_score(groups, paper.assignments[-1]) < 1.0


def _spy_runs(monkeypatch):
    """Record the keyword arguments of every single run and call the real one."""
    real, calls = clove._simulation._run_clove_fl_once, []

    def spy(*args, **kwargs):
        calls.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(clove._simulation, "_run_clove_fl_once", spy)
    return calls


def test_run_clove_fl_defaults_are_four_restarts_and_ten_kmeans_inits(monkeypatch):
    assert clove.DEFAULT_RESTARTS == 4 and clove.DEFAULT_KMEANS_INITS == 10
    runs = _spy_runs(monkeypatch)
    inits = _spy(monkeypatch, "cluster_clients")
    kw = dict(n_clusters=3, rounds=2, local_train=_keep, secure=False)
    out = clove.run_clove_fl(_fl_clients(TARGETS), _Scalar(), MODELS, **kw)
    assert [c["restart"] for c in runs] == [0, 1, 2, 3] and len(out.restart_scores) == 4
    assert {c["n_init"] for c in inits} == {10} and len(inits) == 4   # round 1 of each
    runs.clear(), inits.clear()
    out = clove.run_clove_fl(_fl_clients(TARGETS), _Scalar(), MODELS, paper=True, **kw)
    assert [c["restart"] for c in runs] == [0] and out.restart_scores is None
    assert [c["n_init"] for c in inits] == ["auto"]
    runs.clear(), inits.clear()
    # partial participation, newcomers or K unknown: one run (the score sees one round's
    # participants / compares partitions of one size only)
    clove.run_clove_fl(_fl_clients(TARGETS), _Scalar(), MODELS, participation=0.5, **kw)
    clove.run_clove_fl(_fl_clients(TARGETS), _Scalar(), MODELS, join_round=[0] * 6, **kw)
    clove.run_clove_fl(_fl_clients(TARGETS), _Scalar(), MODELS, k_rule="gap", k_upper=3,
                       **{**kw, "n_clusters": None})
    assert [c["restart"] for c in runs] == [0, 0, 0] and {c["n_init"] for c in inits} == {10}
    runs.clear(), inits.clear()
    # explicit values win over paper=True
    clove.run_clove_fl(_fl_clients(TARGETS), _Scalar(), MODELS, paper=True, restarts=2,
                       kmeans_inits=3, **kw)
    assert [c["restart"] for c in runs] == [0, 1] and {c["n_init"] for c in inits} == {3}


def test_restart_assignments_are_each_restarts_final_assignment(monkeypatch):
    real, finals = clove._simulation._run_clove_fl_once, []

    def spy(*args, **kwargs):
        run = real(*args, **kwargs)
        finals.append(run.assignments[-1].copy())
        return run

    monkeypatch.setattr(clove._simulation, "_run_clove_fl_once", spy)

    def toward_target(params, client, rng):     # each holder pulls its model half-way
        return params + 0.5 * (client.y_train[0] - params)

    out = clove.run_clove_fl(_fl_clients(TARGETS), _Scalar(), MODELS, n_clusters=3,
                             rounds=3, local_train=toward_target, secure=False)
    assert len(finals) == 4 and len(out.restart_assignments) == 4
    assert all(np.array_equal(a, b) for a, b in zip(out.restart_assignments, finals))
    assert np.array_equal(out.restart_assignments[int(np.argmax(out.restart_scores))],
                          out.assignments[-1])
    finals.clear()
    one = clove.run_clove_fl(_fl_clients(TARGETS), _Scalar(), MODELS, n_clusters=3,
                             rounds=3, local_train=toward_target, secure=False, restarts=1)
    assert one.restart_assignments is None and len(finals) == 1


@pytest.mark.parametrize("bad", [0, -1, True, 2.5, "many"])
def test_kmeans_inits_must_be_auto_or_a_positive_integer(bad):
    with pytest.raises(ParameterError, match="kmeans_inits must be"):
        clove.run_clove_fl(_fl_clients(TARGETS), _Scalar(), MODELS, n_clusters=3, rounds=1,
                           local_train=_keep, secure=False, kmeans_inits=bad)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_default_restarts_and_inits_secure_equals_plaintext_and_repeat_from_the_seed():
    clients, _, model, start = _unequal_mlp_case("wine", 3, 51, train_samples=40,
                                                 shift="label")
    kw = dict(n_clusters=3, rounds=4, seed=51)
    plain = clove.run_clove_fl(clients, model, start, secure=False, **kw)
    again = clove.run_clove_fl(clients, model, start, secure=False, **kw)
    secure = clove.run_clove_fl(clients, model, start, secure=True, **kw)
    assert len(plain.restart_scores) == 4
    for other in (again, secure):
        assert other.restart_scores == plain.restart_scores
        assert all(np.array_equal(a, b) for a, b in zip(other.assignments, plain.assignments))
        assert all((a is None and b is None) or np.array_equal(a, b)
                   for a, b in zip(other.distances, plain.distances))
        assert all((a is None and b is None) or np.array_equal(a, b)
                   for a, b in zip(other.costs, plain.costs))
        assert all(np.array_equal(a, b) for a, b in zip(other.models, plain.models))


# -- probe models (issue 24, nineteenth pass) ---------------------------------------------

class _ScalarWithInit(_Scalar):
    """The one-parameter model, with fresh models drawn from a seed."""

    def init(self, seed=0):
        return np.array([float(np.random.default_rng(seed).uniform(-1.0, 4.0))])


def test_probe_models_are_fresh_inits_of_public_seeds_drawn_from_the_run_seed():
    model = _ScalarWithInit()
    seeds = np.random.default_rng([11, 2**29]).integers(0, 2**62, size=3)
    expected = [model.init(int(s)) for s in seeds]
    got = clove.probe_models(model, 3, seed=11)
    assert all(np.array_equal(a, b) for a, b in zip(got, expected))
    assert not np.array_equal(clove.probe_models(model, 1, seed=12)[0], got[0])
    assert clove.probe_models(model, 0, seed=11) == []


def test_probes_widen_every_loss_vector_and_unpicked_probes_keep_their_parameters():
    model, extra = _ScalarWithInit(), 2
    kw = dict(n_clusters=3, rounds=3, local_train=_keep, secure=False, seed=5)
    out = clove.run_clove_fl(_fl_clients(TARGETS), model, MODELS, probes=extra, **kw)
    probes = clove.probe_models(model, extra, seed=5)
    assert len(out.models) == len(MODELS) + extra
    costs = [c for c in out.costs if c is not None]
    assert costs and all(c.shape == (3, len(MODELS) + extra) for c in costs)
    # local training changes nothing here, so every model, probes included, is as it began
    for got, start in zip(out.models, list(MODELS) + probes):
        assert np.array_equal(got, start)
    # the cost of a cluster on a probe is the sum of its clients' sent values on it (the
    # square roots of the losses (w - c)^2, the default transform)
    held = np.flatnonzero([c is not None for c in out.costs])[0]
    labels = out.labels[held]
    for k in range(3):
        members = [TARGETS[i] for i in np.flatnonzero(labels == k)]
        for j, probe in enumerate(probes):
            want = sum(abs(probe[0] - t) for t in members)
            assert costs[0][k, len(MODELS) + j] == pytest.approx(want, abs=1e-5)


def test_no_probes_is_the_run_without_them():
    kw = dict(n_clusters=3, rounds=3, local_train=_keep, secure=False, seed=5)
    base = clove.run_clove_fl(_fl_clients(TARGETS), _ScalarWithInit(), MODELS, **kw)
    for probes in (None, 0):
        other = clove.run_clove_fl(_fl_clients(TARGETS), _ScalarWithInit(), MODELS,
                                   probes=probes, **kw)
        assert len(other.models) == len(MODELS)
        assert all(np.array_equal(a, b) for a, b in zip(other.assignments, base.assignments))
        assert all((a is None and b is None) or np.array_equal(a, b)
                   for a, b in zip(other.costs, base.costs))


@pytest.mark.parametrize("bad", [-1, True, 1.5, "two"])
def test_probes_must_be_a_nonnegative_integer(bad):
    with pytest.raises(ParameterError, match="probes must be an integer >= 0"):
        clove.run_clove_fl(_fl_clients(TARGETS), _ScalarWithInit(), MODELS, n_clusters=3,
                           rounds=1, local_train=_keep, secure=False, probes=bad)


def test_probes_need_a_model_that_can_draw_one():
    with pytest.raises(ParameterError, match="init"):
        clove.run_clove_fl(_fl_clients(TARGETS), _Scalar(), MODELS, n_clusters=3, rounds=1,
                           local_train=_keep, secure=False, probes=1)
