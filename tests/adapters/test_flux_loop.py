"""FLUX end to end in the omnifc.fl loop: train -> descriptors -> secure D -> gap-rule DBSCAN
-> per-cluster FedAvg -> label-free test-time assignment, against FedAvg, IFCA and random."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.cluster.hierarchy import fcluster, linkage
from scipy.spatial.distance import pdist
from sklearn.metrics import adjusted_rand_score

from omnifc import fl
from omnifc.adapters import flux

pytestmark = pytest.mark.timeout(300)


def _data(shift, k, seed, per_group=4):
    return fl.make_federated("digits", shift=shift, n_groups=k, clients_per_group=per_group,
                             new_per_group=2, seed=seed)


@pytest.fixture(scope="module")
def feature_runs():
    """Rotated digits (P(X) shift, the setting FLUX's test-time matching is built for),
    K = 3, seed 11 (not a seed the gap rule's constants were measured on: 0-5)."""
    data = _data("feature", 3, 11)
    model = fl.MLP(data.n_features, 32, data.n_classes)
    org = np.arange(len(data.clients)) % 4                     # 4 organizations
    new_org = np.arange(len(data.clients) + len(data.new_clients)) % 4
    secure = flux.run_flux(data, model, seed=11, parties=org, new_parties=new_org)
    plain = flux.run_flux(data, model, seed=11, secure=False)
    return data, model, secure, plain


def test_flux_finds_the_planted_k_and_beats_fedavg(feature_runs):
    data, model, run, _ = feature_runs
    assert run.n_clusters == 3 and run.gap >= flux.MIN_GAP
    assert adjusted_rand_score(data.groups, run.labels) == 1.0
    # unseen clients, no labels used: each lands in its own group's cluster
    cluster_group = {c: data.groups[run.labels == c][0] for c in range(run.n_clusters)}
    assert [cluster_group[c] for c in run.new_labels] == data.new_groups.tolist()
    table = flux.flux_baselines(data, model, run, seed=11)
    flux_seen, flux_new = table["flux"]
    assert flux_seen > table["fedavg"][0] + 0.05
    assert flux_new > table["fedavg"][1] + 0.05
    assert flux_new > table["random"][1] + 0.2     # matching far above random assignment
    assert flux_seen >= table["ifca"][0] - 0.02    # IFCA is given K; FLUX finds it


def test_secure_and_plaintext_runs_are_identical(feature_runs):
    _, _, secure, plain = feature_runs
    assert np.array_equal(secure.distances, plain.distances)
    assert np.array_equal(secure.prefix, plain.prefix)
    assert np.array_equal(secure.labels, plain.labels)
    assert np.array_equal(secure.new_labels, plain.new_labels)
    assert len(secure.models) == len(plain.models)
    assert all(np.array_equal(a, b) for a, b in zip(secure.models, plain.models))
    assert secure.accuracy == plain.accuracy


@pytest.mark.parametrize("shift, k, seed", [("concept", 5, 12), ("conditional", 2, 13)])
def test_gap_rule_finds_k_where_the_papers_rule_over_splits(shift, k, seed):
    """Automatic K on shifts and K values the constants were not tuned on (seeds 12, 13);
    the paper's pipeline (its descriptor, MinMax 'ranges', knee at eps_scaling 1.0)
    over-splits."""
    data = _data(shift, k, seed, per_group=5)
    model = fl.MLP(data.n_features, 32, data.n_classes)
    run = flux.run_flux(data, model, seed=seed, secure=False, cluster_rounds=0)
    assert run.n_clusters == k
    assert adjusted_rand_score(data.groups, run.labels) == 1.0
    paper = flux.run_flux(data, model, seed=seed, secure=False, cluster_rounds=0,
                          descriptor_form="paper", normalization="ranges", eps_rule="knee")
    assert paper.n_clusters > k


def test_gap_eps_cuts_the_single_linkage_tree_at_its_widest_gap():
    """Independent check: DBSCAN(min_samples=2) at the gap eps equals scipy's single-linkage
    tree cut at the largest ratio of consecutive merge heights (upper half)."""
    rng = np.random.default_rng(5)
    for trial in range(20):
        k = int(rng.integers(2, 6))
        centres = rng.normal(0, 10, (k, 6))
        x = np.concatenate([c + rng.normal(0, 1, (int(rng.integers(3, 7)), 6)) for c in centres])
        d = ((x[:, None] - x[None]) ** 2).sum(-1)
        out = flux.adaptive_dbscan(d)
        z = linkage(pdist(x), "single")
        heights = np.sort(z[:, 2])
        half = (len(heights)) // 2
        ratios = heights[half + 1:] / heights[half:-1]
        j = half + int(np.argmax(ratios))
        assert out.eps == pytest.approx(np.sqrt(heights[j] * heights[j + 1]), rel=1e-9)
        expected = fcluster(z, t=out.eps, criterion="distance")
        assert adjusted_rand_score(expected, out.labels) == 1.0
        assert out.n_clusters == len(set(expected.tolist()))


def test_iid_clients_form_one_cluster():
    data = fl.make_federated("digits", shift="none", clients_per_group=12, new_per_group=0,
                             seed=14)
    model = fl.MLP(data.n_features, 32, data.n_classes)
    run = flux.run_flux(data, model, seed=14, secure=False, cluster_rounds=0)
    assert run.n_clusters == 1 and run.gap < flux.MIN_GAP


def test_defaults_find_k_under_label_shift():
    """Label shift (Dirichlet group priors): the default weighted descriptor (class blocks
    weighted by sqrt(class share), so the label mix enters every class block and a class a
    client happens to miss gives zeros instead of a -1 filler) finds the planted K where the
    paper's descriptor (fillers, previous default scaling) does not. Seeds 20-23 were first
    run after the rule was fixed (tuning: seeds 0-2; docs/adapters.md)."""
    found, found_paper = [], []
    for k in (2, 3):
        for seed in (20, 21, 22, 23):
            data = fl.make_federated("digits", shift="label", n_groups=k, clients_per_group=5,
                                     new_per_group=0, seed=seed)
            model = fl.MLP(data.n_features, 32, data.n_classes)
            run = flux.run_flux(data, model, seed=seed, secure=False, cluster_rounds=0)
            found.append(run.n_clusters == k
                         and adjusted_rand_score(data.groups, run.labels) == 1.0)
            paper = flux.run_flux(data, model, seed=seed, secure=False, cluster_rounds=0,
                                  descriptor_form="paper", normalization="block_diameter")
            found_paper.append(paper.n_clusters == k
                               and adjusted_rand_score(data.groups, paper.labels) == 1.0)
    assert all(found[:4])                       # K = 2: every seed
    assert sum(found) >= 6                      # measured 6/8 (K = 3: seeds 20 and 23)
    assert sum(found_paper) <= 3                # measured 3/8 with the paper's descriptor
