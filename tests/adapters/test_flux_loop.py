"""FLUX end to end in the omnifc.fl loop: train -> descriptors -> secure D -> automatic K
(flux.SPLIT_MIN_P_RECIPE by default; Ward, FLUX's adaptive DBSCAN as options) -> per-cluster FedAvg ->
label-free test-time assignment, against FedAvg, IFCA and random."""

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
    K = 3, seed 11 (not a seed the K rules' constants were measured on: 0-5)."""
    data = _data("feature", 3, 11)
    model = fl.MLP(data.n_features, 32, data.n_classes)
    org = np.arange(len(data.clients)) % 4                     # 4 organizations
    new_org = np.arange(len(data.clients) + len(data.new_clients)) % 4
    secure = flux.run_flux(data, model, seed=11, parties=org, new_parties=new_org)
    plain = flux.run_flux(data, model, seed=11, secure=False)
    return data, model, secure, plain


def test_flux_finds_the_planted_k_and_beats_fedavg(feature_runs):
    data, model, run, _ = feature_runs
    assert run.n_clusters == 3 and run.decision.p_value <= run.decision.alpha
    assert run.gap == run.decision.p_value and run.decision.k == 3    # the calibrated rule
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
    """Automatic K on shifts and K values the constants were not tuned on (seeds 12, 13):
    the default and DBSCAN with the gap eps on its D find K; the paper's
    pipeline (its descriptor, MinMax 'ranges', knee at eps_scaling 1.0) over-splits."""
    data = _data(shift, k, seed, per_group=5)
    model = fl.MLP(data.n_features, 32, data.n_classes)
    run = flux.run_flux(data, model, seed=seed, secure=False, cluster_rounds=0)
    assert run.n_clusters == k
    assert adjusted_rand_score(data.groups, run.labels) == 1.0
    dbscan = flux.cluster_clients(run.distances, k_rule="dbscan")
    assert adjusted_rand_score(data.groups, dbscan.labels) == 1.0
    paper = flux.run_flux(data, model, seed=seed, secure=False, cluster_rounds=0,
                          descriptor_form="paper", normalization="ranges", k_rule="dbscan",
                          eps_rule="knee")
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
    assert run.n_clusters == 1 and run.decision.p_value > run.decision.alpha   # calibrated
    assert flux.cluster_clients(run.distances, k_rule="ward").gap < flux.WARD_MIN_GAP
    dbscan = flux.cluster_clients(run.distances, k_rule="dbscan")
    assert dbscan.n_clusters == 1 and dbscan.gap < flux.MIN_GAP


def _found(data, labels):
    return (len(set(labels.tolist())) == data.n_groups
            and adjusted_rand_score(data.groups, labels) == 1.0)


@pytest.mark.slow
def test_defaults_find_k_under_label_shift_where_dbscan_chains():
    """Label shift (Dirichlet group priors), seeds 20-23 (never used to design the Ward rule
    or its threshold: design seeds 0-2, docs/adapters.md), K = 2, 3, 5. The default (Ward
    gap on the weighted descriptor's D) finds the planted groups on 11 of the 12 runs
    (measured; the miss, K = 5 at seed 23, puts one client in a neighbouring group) and on
    every K = 2 and K = 3 run; FLUX's adaptive DBSCAN with the gap eps on the same D
    (single linkage) chains close groups: measured 6/12. The calibrated rule (the default
    since issue 24) on the same D: 10/12 measured standalone (K = 5 at seeds 22 and 23
    missed), with K = 2 seed 23 and K = 3 seed 20 at p = alpha exactly (B = 39: p moves in
    steps of 0.025), and one of them was lost in a pytest run: at least 9 is asserted. The
    Ward rule is pinned by name. All on the descriptors' D with the calibrated rule at 0.05:
    the default before issue 24's fourteenth pass (``flux.PREVIOUS_DEFAULT``)."""
    found, found_dbscan, found_calibrated = {}, {}, {}
    for k in (2, 3, 5):
        for seed in (20, 21, 22, 23):
            data = fl.make_federated("digits", shift="label", n_groups=k, clients_per_group=5,
                                     new_per_group=0, seed=seed)
            model = fl.MLP(data.n_features, 32, data.n_classes)
            run = flux.run_flux(data, model, seed=seed, secure=False, cluster_rounds=0,
                                **flux.PREVIOUS_DEFAULT)
            found_calibrated[k, seed] = _found(data, run.labels)
            found[k, seed] = _found(
                data, flux.cluster_clients(run.distances, k_rule="ward").labels)
            found_dbscan[k, seed] = _found(
                data, flux.cluster_clients(run.distances, k_rule="dbscan").labels)
    assert all(found[k, seed] for k in (2, 3) for seed in (20, 21, 22, 23))
    assert sum(found.values()) >= 11
    assert sum(found.values()) >= sum(found_dbscan.values()) + 4
    assert sum(found_calibrated[k, seed] for k in (2, 3) for seed in (20, 21, 22, 23)) >= 7
    assert sum(found_calibrated.values()) >= 9


@pytest.mark.parametrize("per_group", [3, 8])
def test_defaults_find_k_under_label_shift_at_other_federation_sizes(per_group):
    """K = 5 label groups at seed 6 with 3 and 8 clients per group (held out; over seeds 3-8
    the default finds K on 15/18 and 17/18 label runs, DBSCAN's gap rule on 12/18 and
    11/18): Ward finds the 5 groups, single linkage chains them into 3. Pinned to the Ward
    rule by name (the calibrated default answers one cluster at 3 per group here, p = 0.075:
    a miss, docs/adapters.md). On the descriptors' D (``flux.PREVIOUS_DEFAULT``'s)."""
    data = fl.make_federated("digits", shift="label", n_groups=5, clients_per_group=per_group,
                             new_per_group=0, seed=6)
    model = fl.MLP(data.n_features, 32, data.n_classes)
    run = flux.run_flux(data, model, seed=6, secure=False, cluster_rounds=0,
                        **flux.PREVIOUS_DEFAULT)
    assert _found(data, flux.cluster_clients(run.distances, k_rule="ward").labels)
    assert flux.cluster_clients(run.distances, k_rule="dbscan").n_clusters < 5


@pytest.mark.parametrize("shift, seed", [("feature", 21), ("concept", 22),
                                         ("conditional", 23)])
def test_defaults_still_find_k_on_the_other_shifts(shift, seed):
    """The Ward default does not lose the other shifts: K = 5 (the hardest K of the grid),
    held-out seeds; over seeds 3-8 and 20-23 it finds K on every feature, concept and
    P(X|Y) run (90/90, docs/adapters.md). On the descriptors' D with the calibrated rule
    at 0.05 (``flux.PREVIOUS_DEFAULT``)."""
    data = fl.make_federated("digits", shift=shift, n_groups=5, clients_per_group=5,
                             new_per_group=0, seed=seed)
    model = fl.MLP(data.n_features, 32, data.n_classes)
    run = flux.run_flux(data, model, seed=seed, secure=False, cluster_rounds=0,
                        **flux.PREVIOUS_DEFAULT)
    assert _found(data, run.labels) and run.decision.p_value <= run.decision.alpha
    assert flux.cluster_clients(run.distances, k_rule="ward").gap >= flux.WARD_MIN_GAP


def test_weighted_mad_option_runs_end_to_end_through_the_secure_path():
    """descriptor_form="weighted_mad" (the option of issue 24's ninth pass): the secure run
    equals the plaintext one bit for bit, its D is the D of the library's weighted_mad
    descriptors of the same encoder (not the default form's)."""
    data = _data("feature", 2, 15, per_group=3)
    model = fl.MLP(data.n_features, 32, data.n_classes)
    options = dict(seed=15, cluster_rounds=0, descriptor_form="weighted_mad",
                   normalization="none")
    secure = flux.run_flux(data, model, **options)
    plain = flux.run_flux(data, model, secure=False, **options)
    assert np.array_equal(secure.distances, plain.distances)
    assert np.array_equal(secure.prefix, plain.prefix)
    assert np.array_equal(secure.labels, plain.labels)
    m = flux.ACTIVATION_MARGIN * plain.max_activation
    l = flux.flux_components(data.n_classes, 32)
    proj = flux.shared_projection(32, l, max_value=m)
    desc = np.stack([flux.descriptor(model.latents(plain.global_model, c.x_train), c.y_train,
                                     proj, data.n_classes, form="weighted_mad")
                     for c in data.clients])
    expected = flux.block_distances(desc, n_components=l, n_classes=data.n_classes,
                                    bound=flux.descriptor_bound(proj, m), secure=False)[0]
    assert np.array_equal(plain.distances, expected)
    default = flux.run_flux(data, model, seed=15, cluster_rounds=0, secure=False,
                            normalization="none")
    assert not np.array_equal(plain.distances, default.distances)
