"""FLUX's second test on the split D (issue 24, twenty-seventh pass): the default rule's K
where it finds structure, else the spiked-null test at the same level, among 4 to 6
clients; in ``cluster_split_clients``, ``run_flux`` and the Flower FLUX embedding alike.
Each decision is checked against its parts computed separately (the rule on the whitened D,
the test on the split D, Ward's cut)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from finite_field import ParameterError
from omnifc._clustering._hierarchical import ward_from_distances
from omnifc.adapters import flux
from omnifc.adapters.flux import _spiked_null
from oracles import split_federation, sq_distances

#: a quick level for the synthetic federations: p can reach 1 / 40
FAST = {"k_alpha": 0.05, "k_references": 39}


def _split_d(seed, n=6, shift=1.0, groups=10):
    rng = np.random.default_rng(seed)
    return sq_distances(split_federation(rng, n, 20, groups, shift=shift, small=n // 2, p=4))


def _parts(d, n, groups=10, seed=0, **level):
    """The rule on the whitened D and the test on the split D, each computed alone."""
    level = {**FAST, **level}
    whitened = flux.split_whitened_distances(d, n, groups=groups)
    rule = flux.cluster_clients(whitened, k_rule="calibrated_axis_or_gap",
                                k_alpha=level["k_alpha"], k_references=level["k_references"],
                                random_state=seed)
    test = flux.spiked_null_test(d, n, groups=groups, references=level["k_references"],
                                 seed=seed)
    return whitened, rule, test


@pytest.mark.timeout(120)
def test_the_test_adds_two_groups_only_where_the_rule_finds_one():
    """Seed 5: the rule answers one cluster, the test's p = 0.05 (at alpha, rejected): K = 2
    with Ward's two-cut of the whitened D, the rule's evidence kept. Seed 0: p = 0.175, one
    cluster, the test's evidence attached. A shift the rule sees itself: its K, no test."""
    d = _split_d(5)
    whitened, rule, test = _parts(d, 6)
    assert rule.n_clusters == 1 and test.p_value == pytest.approx(0.05)   # at the bound
    got_d, got = flux.cluster_split_clients(d, 6, **FAST)
    assert np.array_equal(got_d, whitened)
    assert got.n_clusters == 2 and got.knee_found
    assert np.array_equal(got.labels, ward_from_distances(whitened, 2))
    assert got.labels.tolist() == [0, 0, 0, 1, 1, 1]                      # the planted groups
    assert got.second_test == test and got.decision.p_value == rule.decision.p_value
    # one step stricter than p: the test no longer rejects, one cluster
    strict = flux.cluster_split_clients(d, 6, k_alpha=0.049, k_references=39)[1]
    assert strict.n_clusters == 1 and strict.second_test.p_value == test.p_value
    d0 = _split_d(0)
    _, rule0, test0 = _parts(d0, 6)
    got0 = flux.cluster_split_clients(d0, 6, **FAST)[1]
    assert rule0.n_clusters == 1 and test0.p_value > 0.05
    assert got0.n_clusters == 1 and got0.second_test == test0
    assert np.array_equal(got0.labels, np.zeros(6))
    far = _split_d(1, shift=6.0)
    _, rule_far, _ = _parts(far, 6)
    got_far = flux.cluster_split_clients(far, 6, **FAST)[1]
    assert rule_far.n_clusters == 2 and got_far.second_test is None
    assert np.array_equal(got_far.labels, rule_far.labels)


@pytest.mark.timeout(300)
def test_the_union_splits_exactly_where_either_test_does():
    """The union's level is at most the sum of its tests' levels because it splits a
    federation exactly when the rule or the test rejects one cluster: checked on every
    federation of a set, with and without groups, and at two levels."""
    outcomes = set()
    for seed in range(8):
        for shift in (0.0, 1.0):
            d = _split_d(100 + seed, shift=shift)
            for alpha in (0.05, 0.1):
                _, rule, test = _parts(d, 6, seed=seed, k_alpha=alpha)
                got = flux.cluster_split_clients(d, 6, k_alpha=alpha, k_references=39,
                                                 random_state=seed)[1]
                either = rule.n_clusters > 1 or test.p_value <= alpha
                assert (got.n_clusters > 1) == either
                outcomes.add((rule.n_clusters > 1, test.p_value <= alpha))
    assert {(False, False), (False, True)} <= outcomes          # both branches exercised


@pytest.mark.timeout(120)
def test_asked_only_among_four_to_six_clients_and_only_when_told():
    """Seven clients and three: the rule alone (the test was judged at six and sums over
    every split of the clients); second_test="none": the rule alone at six too."""
    assert _spiked_null.SPIKED_MAX_CLIENTS == 6
    for n in (7, 3):
        d = _split_d(5, n=n)
        whitened, rule, _ = (flux.split_whitened_distances(d, n, groups=10), None, None)
        rule = flux.cluster_clients(whitened, k_rule="calibrated_axis_or_gap", **FAST)
        got = flux.cluster_split_clients(d, n, **FAST)[1]
        assert got.second_test is None and np.array_equal(got.labels, rule.labels)
    d = _split_d(5)
    off = flux.cluster_split_clients(d, 6, second_test="none", **FAST)[1]
    assert off.second_test is None and off.n_clusters == 1
    four = _split_d(0, n=4)                            # the smallest: two groups of two
    got4 = flux.cluster_split_clients(four, 4, **FAST)[1]
    assert got4.decision.k == 1 and got4.second_test.p_value <= 0.05 and got4.n_clusters == 2


def test_the_second_test_is_refused_where_it_cannot_run():
    """It reads the split D and tests at the rule's level: "spiked" with another
    normalization or a rule without a level is refused, an unknown test too; None picks it
    only where it can run."""
    assert flux.second_test_for(None, "split", "calibrated_axis_or_gap") == "spiked"
    assert flux.second_test_for(None, "split", "ward") == "none"
    assert flux.second_test_for(None, "none", "calibrated") == "none"
    assert flux.second_test_for("none", "none", "ward") == "none"
    for normalization, rule in (("none", "calibrated_axis_or_gap"), ("whitened", "calibrated"),
                                ("split", "ward"), ("split", "dbscan")):
        with pytest.raises(ParameterError, match="second_test='spiked' reads the split D"):
            flux.second_test_for("spiked", normalization, rule)
    with pytest.raises(ParameterError, match="second_test must be one of"):
        flux.second_test_for("bonferroni", "split", "calibrated")
    with pytest.raises(ParameterError, match="reads the split D"):
        flux.cluster_split_clients(_split_d(5), 6, k_rule="ward", second_test="spiked")
    with pytest.raises(ParameterError, match="references and pilot"):
        flux.spiked_null_test(_split_d(5), 6, references=0)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_run_flux_runs_the_second_test_securely_as_in_the_clear():
    """Six clients of one population (digits, seed 4): the rule answers one cluster, so
    run_flux's default asks the test; the secure run equals the plaintext run (D, labels,
    the test's evidence, drawn with the pipeline's B = 199 and seed). second_test="none"
    gives the rule alone; "spiked" with normalization "none" is refused before any
    session."""
    from omnifc import fl
    from oracles import secure_and_plain_flux_runs

    data = fl.make_federated("digits", shift="none", n_groups=1, clients_per_group=6,
                             new_per_group=0, seed=4)
    model = fl.MLP(data.n_features, 8, data.n_classes)
    secure, plain = secure_and_plain_flux_runs(data, model, 4)
    assert np.array_equal(secure.distances, plain.distances)
    assert np.array_equal(secure.labels, plain.labels)
    assert plain.second_test is not None and secure.second_test == plain.second_test
    assert plain.decision.k == 1                      # the rule alone: one cluster
    assert (plain.second_test.references, plain.second_test.seed) == (199, 4)
    assert plain.n_clusters == (2 if plain.second_test.p_value <= 0.01 else 1)
    off = flux.run_flux(data, model, seed=4, secure=False, warmup_rounds=1, cluster_rounds=1,
                        second_test="none")
    assert off.second_test is None and off.n_clusters == plain.decision.k
    assert np.array_equal(off.distances, plain.distances)
    with pytest.raises(ParameterError, match="reads the split D"):
        flux.run_flux(data, model, secure=False, normalization="none", second_test="spiked")


def _outcome(d, n, names=None):
    """A session outcome whose rows come client by client (as the nodes' split_rows)."""
    per = d.shape[0] // n
    order = (np.arange(per)[None, :] * n + np.arange(n)[:, None]).ravel()   # client-major
    return SimpleNamespace(rows=[per] * n, values=d[np.ix_(order, order)],
                           party_names=names or [f"p{i}" for i in range(n)], integer=None)


@pytest.mark.timeout(120)
def test_the_flower_flux_embedding_clusters_the_split_d_with_the_second_test():
    """The Flower FLUX embedding's labels come from the session's split D through
    cluster_split_clients (client order), so the second test runs there as in run_flux;
    its D, from the same embedding of the split D, is the whitened one bit for bit;
    second_test="none" is the rule on that D."""
    from omnifc.flower import embedding

    d = _split_d(5)
    outcome = {None: _outcome(d, 6)}
    e = embedding("flux", **FAST)
    whitened = e.distances(outcome)
    assert np.allclose(whitened, flux.split_whitened_distances(d, 6, groups=10))
    got_d, got = e.cluster_session(outcome)
    assert np.array_equal(got_d, whitened)
    want = flux.cluster_split_clients(outcome[None].values, 6, order="client", **FAST)[1]
    assert want.second_test is not None and want.n_clusters == 2
    assert got.tolist() == want.labels.tolist()
    off = embedding("flux", second_test="none", **FAST)
    off_d, off_labels = off.cluster_session(outcome)
    assert np.array_equal(off_d, whitened)
    assert off_labels.tolist() == off.cluster(whitened).tolist() == [0] * 6
    with pytest.raises(ParameterError, match="combines the parts"):
        e.cluster_session({"z": outcome[None]})


@pytest.mark.timeout(120)
def test_a_flower_flux_clustering_session_embeds_its_split_d_once(monkeypatch):
    """The strategy's clustering session (Embedding.cluster_session) reads the whitened D
    and the labels from one MDS embedding of the split D, not one for each."""
    from omnifc.adapters.flux import _split_half
    from omnifc.flower import embedding

    calls = []
    real = _split_half.split_embedding
    monkeypatch.setattr(_split_half, "split_embedding",
                        lambda *a, **kw: calls.append(1) or real(*a, **kw))
    outcome = {None: _outcome(_split_d(5), 6)}
    embedding("flux", **FAST).cluster_session(outcome)
    assert len(calls) == 1
    with pytest.raises(ParameterError, match="reads the split D"):
        embedding("flux", normalization="none", second_test="spiked")


@pytest.mark.timeout(180)
def test_every_option_reaches_the_rule_and_the_test(caplog):
    """The split's groups and row order, the rule's level, draws, seed, group floor and
    DBSCAN options reach both parts (each compared with the part computed alone), and an
    option the rule refuses is refused; the second test's finding is logged with its
    evidence."""
    import logging

    d4 = _split_d(5, groups=4)
    whitened4 = flux.split_whitened_distances(d4, 6, groups=4)
    got_d, got = flux.cluster_split_clients(d4, 6, groups=4, random_state=3)
    assert np.array_equal(got_d, whitened4)
    want = flux.cluster_clients(whitened4, k_rule="calibrated_axis_or_gap", k_alpha=0.01,
                                k_references=199, random_state=3)
    assert (got.decision.alpha, got.decision.references, got.decision.seed) == (0.01, 199, 3)
    assert got.decision.p_value == want.decision.p_value
    if got.second_test is not None:
        assert got.second_test == flux.spiked_null_test(d4, 6, groups=4, seed=3)
    d = _split_d(5)
    n, per = 6, 11
    client = (np.arange(per)[None, :] * n + np.arange(n)[:, None]).ravel()   # client-major
    by_client = d[np.ix_(client, client)]
    stacked_d, stacked = flux.cluster_split_clients(d, 6, **FAST)
    client_d, by_client_found = flux.cluster_split_clients(by_client, 6, order="client", **FAST)
    assert np.allclose(client_d, stacked_d)
    assert by_client_found.labels.tolist() == stacked.labels.tolist()
    assert by_client_found.second_test == stacked.second_test
    whitened = flux.split_whitened_distances(d, 6, groups=10)
    floor = flux.cluster_split_clients(d, 6, k_rule="calibrated_axis", k_min_group=2, **FAST)[1]
    assert floor.decision.min_group == 2
    assert floor.decision.p_value == flux.cluster_clients(
        whitened, k_rule="calibrated_axis", k_min_group=2, **FAST).decision.p_value
    knee = flux.cluster_split_clients(d, 6, k_rule="dbscan", eps_rule="knee",
                                      eps_scaling=0.5)[1]
    want_knee = flux.cluster_clients(whitened, k_rule="dbscan", eps_rule="knee",
                                     eps_scaling=0.5)
    assert knee.eps == want_knee.eps and knee.labels.tolist() == want_knee.labels.tolist()
    assert knee.eps != flux.cluster_clients(whitened, k_rule="dbscan").eps
    with pytest.raises(ParameterError, match="k_min_group applies"):
        flux.cluster_split_clients(d, 6, k_min_group=2)
    with pytest.raises(ParameterError, match="eps_rule and eps_scaling apply"):
        flux.cluster_split_clients(d, 6, eps_rule="knee")
    with caplog.at_level(logging.INFO, logger="omnifc.adapters.flux._split_half"):
        flux.cluster_split_clients(d, 6, **FAST)
    assert ("second test: the spiked-null test finds two groups among 6 clients (p = 0.05 "
            "<= 0.05) where the K rule found one") in caplog.messages


@pytest.mark.timeout(300)
def test_the_level_script_counts_what_the_library_decides(capsys):
    """benchmarks/_flux_second_test_level.py: its counts are the library's decisions on the
    same federations (the rule's K, the test's p at 0.01, the union's K), for each size."""
    from benchmark_scripts import load_benchmark

    level = load_benchmark("_flux_second_test_level")
    got = level.counts(6, 3, np.random.default_rng(7), client_sd=0.3)
    rng = np.random.default_rng(7)
    want = [0, 0, 0]
    for i in range(3):
        d = sq_distances(split_federation(rng, 6, 20, 10, p=4, client_sd=0.3))
        whitened = flux.split_whitened_distances(d, 6, groups=10)
        rule = flux.cluster_clients(whitened, k_rule="calibrated_axis_or_gap", k_alpha=0.01,
                                    k_references=199, random_state=i).n_clusters > 1
        test = (not rule) and flux.spiked_null_test(d, 6, seed=i).p_value <= 0.01
        want = [want[0] + rule, want[1] + test, want[2] + (rule or test)]
    assert list(got) == want
    assert level.main(["--runs", "1", "--seed", "3"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(",")[0] for line in lines] == ["4 clients", "4 clients", "5 clients",
                                                      "5 clients", "6 clients", "6 clients"]
