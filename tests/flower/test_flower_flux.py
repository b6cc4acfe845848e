"""FLUX as a built-in embedding of ClusteredFedAvg, with run_flux's default pipeline.

Each node sends ``flux.split_rows`` (its descriptors without each of 10 random groups of its
rows and its descriptor: 11 rows, run_flux's default; or k + 1 rows with ``groups=k``); the
server reads the descriptors' noise from the session's D alone
and clusters the whitened distances with run_flux's K rule and level. The oracle is the
adapter's own plaintext path (``flux.block_distances(..., normalization="split",
secure=False)``: the same quantized rows in the clear), so the Flower embedding is
run_flux's pipeline bit for bit. Newcomers send their label-free prefix
(``flux.prefix_row``) in a second session and join the nearest centroid. Transport: the
in-process LoopbackGrid (real ClientApps and Contexts)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

flwr = pytest.importorskip(
    "flwr", reason="flwr is not installed (pip install 'omnifc[flower]'); "
    ".ci/protobuf_matrix.sh runs these tests in its low venv, which has flwr 1.42")

from finite_field import ParameterError, ProtocolError  # noqa: E402
from omnifc.adapters import flux  # noqa: E402
from omnifc.flower import ClusteredFedAvg, embedding  # noqa: E402
from protocols import SessionParameters  # noqa: E402

from flower_helpers import Federation  # noqa: E402
from test_flower_strategy import partition  # noqa: E402

pytestmark = pytest.mark.protobuf_matrix

CLASSES, LATENT, M, SCALE_BITS = 4, 8, 8.0, 16
PROJECTION = flux.shared_projection(LATENT, CLASSES, max_value=M)
BOUND = flux.descriptor_bound(PROJECTION, M)
WIDTH = 2 * (CLASSES + 1) * CLASSES          # the descriptor's length (l = CLASSES)


def clients(seed: int = 5, n: int = 12, new: int = 2):
    """Two groups under a covariate shift (P(X)), 60 rows per client, ``new`` unseen clients
    of both groups. A clear case (the pipeline finds K = 2 at seeds 5-9; with 8 clients of
    30 rows it finds one cluster at half of them: the test's power, not the wiring's)."""
    (train, groups), (unseen, new_groups) = flux.shift_scenario(
        "P(X)", n_clients=n, n_new=new, n_classes=CLASSES, dim=LATENT, samples=60, seed=seed)
    return train, groups, unseen, new_groups


def split_rows_of(train, seed: int = 0, groups: int = flux.DEFAULT_SPLIT_GROUPS):
    """Every node's split rows, each node's own split generator (seeded to replay)."""
    return {f"org-{i}": flux.split_rows(x, y, PROJECTION, CLASSES,
                                        rng=np.random.default_rng([seed, i]), groups=groups)
            for i, (x, y) in enumerate(train)}


def expected_d(rows: dict, groups: int = flux.DEFAULT_SPLIT_GROUPS) -> np.ndarray:
    """The adapter's plaintext split path on the same rows (run_flux's D)."""
    stacked = [np.stack([r[k] for r in rows.values()]) for k in range(groups + 1)]
    d, _, _ = flux.block_distances(stacked[-1], splits=tuple(stacked[:-1]),
                                   normalization="split", secure=False, bound=BOUND,
                                   scale_bits=SCALE_BITS, n_components=CLASSES,
                                   n_classes=CLASSES)
    return d


@pytest.mark.timeout(180)
@pytest.mark.parametrize("split_groups", [None, 2])
def test_the_flux_embedding_is_run_fluxs_split_pipeline_bit_for_bit(split_groups):
    """Nodes send split_rows (with groups=k: k + 1 rows each; None: run_flux's default,
    10 groups)."""
    train, groups, _, _ = clients()
    k = flux.DEFAULT_SPLIT_GROUPS if split_groups is None else split_groups
    rows = split_rows_of(train, groups=k)
    parameters = SessionParameters(dim=WIDTH, bound=BOUND, scale_bits=SCALE_BITS)
    fed = Federation(rows, parameters)
    options = {} if split_groups is None else {"split_groups": split_groups}
    strategy = ClusteredFedAvg(fed.workflow(), embedding("flux", **options),
                               fraction_train=0.0, fraction_evaluate=0.0)
    _, result = strategy.cluster(fed.grid)
    outcome = result.outcomes[0]
    assert outcome.party_names == list(rows) and outcome.rows == [k + 1] * len(rows)
    # the server's distances are run_flux's split D of the same rows, bit for bit
    d = expected_d(rows, k)
    assert np.array_equal(result.distances, d)
    # clustered with run_flux's rule at run_flux's level (flux.DEFAULT_RECIPE)
    recipe = flux.DEFAULT_RECIPE
    found = flux.cluster_clients(d, k_rule=recipe["k_rule"], k_alpha=recipe["k_alpha"],
                                 k_references=recipe["k_references"], random_state=0)
    got = [result.party_labels[name] for name in outcome.party_names]
    assert got == found.labels.tolist()
    assert partition(result.party_labels) == partition(
        {name: int(g) for name, g in zip(rows, groups)})        # the two groups, K = 2


@pytest.mark.timeout(180)
def test_six_nodes_the_second_test_finds_the_groups_the_rule_misses():
    """Six nodes of 20 rows (P(X) shift, seed 17): run_flux's rule alone answers one
    cluster on the session's split D; the default's second test (the spiked-null test on
    that D, p = 0.005) finds the two planted groups. The strategy's labels are
    flux.cluster_split_clients' on the session's D (client order) in both settings, and
    second_test="none" keeps one cluster."""
    (train, groups), _ = flux.shift_scenario("P(X)", n_clients=6, n_new=2, n_classes=CLASSES,
                                             dim=LATENT, samples=20, seed=17)
    rows = split_rows_of(train)
    parameters = SessionParameters(dim=WIDTH, bound=BOUND, scale_bits=SCALE_BITS)
    labels = {}
    for second in (None, "none"):
        fed = Federation(rows, parameters)
        strategy = ClusteredFedAvg(fed.workflow(), embedding("flux", second_test=second),
                                   fraction_train=0.0, fraction_evaluate=0.0)
        _, result = strategy.cluster(fed.grid)
        outcome = result.outcomes[0]
        _, found = flux.cluster_split_clients(outcome.values, 6, order="client",
                                              second_test=second)
        assert found.decision.k == 1                     # the rule alone: one cluster
        got = [result.party_labels[name] for name in outcome.party_names]
        assert got == found.labels.tolist()
        labels[second] = result.party_labels
    assert partition(labels[None]) == partition(
        {name: int(g) for name, g in zip(rows, groups)})        # the two groups, K = 2
    assert len(set(labels["none"].values())) == 1


@pytest.mark.timeout(180)
def test_flux_newcomers_send_their_prefix_and_join_the_nearest_centroid():
    train, groups, unseen, new_groups = clients(seed=7)
    trained = [f"org-{i}" for i in range(len(train))]
    newcomers = [f"new-{j}" for j in range(len(unseen))]
    split = split_rows_of(train, seed=1)
    prefix = {name: flux.prefix_row(x, PROJECTION)[None]
              for name, (x, _) in zip(trained + newcomers, train + unseen)}

    def rows_of(name):
        def rows(context, session):
            return split[name] if session == "cluster" else prefix[name]
        return rows

    parameters = {"cluster": SessionParameters(dim=WIDTH, bound=BOUND, scale_bits=SCALE_BITS),
                  "assign": SessionParameters(dim=2 * CLASSES, bound=BOUND,
                                              scale_bits=SCALE_BITS)}
    fed = Federation({name: rows_of(name) for name in trained + newcomers}, parameters,
                     sessions={"cluster": trained, "assign": trained + newcomers},
                     session_id="cluster", newcomers=newcomers)
    strategy = ClusteredFedAvg(fed.workflow("cluster"), embedding("flux"),
                               newcomer_workflow=fed.workflow("assign"), fraction_train=0.0,
                               fraction_evaluate=0.0)
    _, result = strategy.cluster(fed.grid)
    for name in newcomers:
        fed.join(name)
    assigned = strategy.assign_newcomers(fed.grid, result)
    # the newcomer session's D is run_flux's prefix D (unwhitened, unscaled) bit for bit
    outcome = result.outcomes[-1]
    assert outcome.rows == [1] * (len(trained) + len(newcomers))
    train_desc = np.stack([flux.descriptor(x, y, PROJECTION, CLASSES) for x, y in train])
    new_desc = np.stack([flux.descriptor(x, y, PROJECTION, CLASSES) for x, y in unseen])
    expected = flux.prefix_distances(train_desc, new_desc, n_components=CLASSES,
                                     n_classes=CLASSES, bound=BOUND, normalization="split",
                                     secure=False, scale_bits=SCALE_BITS)
    assert np.array_equal(strategy.embedding.distances(result.sessions[-1], newcomers=True),
                          expected)
    labels = np.array([result.party_labels[name] for name in trained])
    want = flux.assign_new_clients(expected, labels)
    assert [assigned[fed.node_of[name]] for name in newcomers] == want.tolist()
    # two clusters, the groups; each newcomer joins the cluster of its own group
    assert partition(result.party_labels) == partition(
        {name: int(g) for name, g in zip(trained, groups)})
    cluster_of_group = {int(g): result.party_labels[name] for name, g in zip(trained, groups)}
    assert [cluster_of_group[int(g)] for g in new_groups] == want.tolist()


def _outcome(rows_per_client, n=4, width=5, seed=0):
    """A stand-in Outcome: ``rows_per_client`` rows per party, their squared distances."""
    x = np.random.default_rng(seed).normal(size=(rows_per_client * n, width))
    d = ((x[:, None] - x[None]) ** 2).sum(-1)
    return SimpleNamespace(rows=[rows_per_client] * n, party_names=[f"p{i}" for i in range(n)],
                           values=d, integer=None), x


def test_the_split_embedding_refuses_sessions_of_the_wrong_shape():
    e = embedding("flux")                                   # 10 groups: 11 rows a node
    eleven, _ = _outcome(11)
    assert np.array_equal(e.distances({None: eleven}), flux.split_whitened_distances(
        eleven.values, 4, groups=10, order="client"))
    three, x = _outcome(3)
    with pytest.raises(ProtocolError, match=r"11 row\(s\) per client, got \[3, 3, 3, 3\]"):
        e.distances({None: three})      # the halves' rows, to a default server
    e = embedding("flux", split_groups=2)
    got = e.distances({None: three})
    assert np.array_equal(got, flux.split_whitened_distances(three.values, 4, groups=2,
                                                             order="client"))
    one, _ = _outcome(1)
    with pytest.raises(ProtocolError, match=r"3 row\(s\) per client, got \[1, 1, 1, 1\]"):
        e.distances({None: one})        # a descriptor alone: nothing to read the noise from
    mixed = SimpleNamespace(rows=[3, 3, 2, 4], party_names=three.party_names,
                            values=three.values, integer=None)
    with pytest.raises(ProtocolError, match="3 row"):
        e.distances({None: mixed})
    # the newcomer session takes one prefix row per client, and nothing else
    assert np.array_equal(e.distances({None: one}, newcomers=True), one.values)
    with pytest.raises(ProtocolError, match=r"1 row\(s\) per client"):
        e.distances({None: three}, newcomers=True)
    # split_groups=4: five rows per client, and three are refused
    five, _ = _outcome(5)
    e4 = embedding("flux", split_groups=4)
    assert np.array_equal(e4.distances({None: five}),
                          flux.split_whitened_distances(five.values, 4, groups=4,
                                                        order="client"))
    with pytest.raises(ProtocolError, match=r"groups=4\) needs 5 row\(s\) per client"):
        e4.distances({None: three})


def test_the_flux_embedding_takes_run_fluxs_options_and_refuses_the_rest():
    d = flux.split_whitened_distances(_outcome(3, n=9)[0].values, 9, groups=2, order="client")
    default = embedding("flux")
    recipe = flux.DEFAULT_RECIPE
    assert default.cluster(d).tolist() == flux.cluster_clients(
        d, k_rule=recipe["k_rule"], k_alpha=recipe["k_alpha"],
        k_references=recipe["k_references"]).labels.tolist()
    # the previous pipeline: one descriptor per node, the calibrated rule at 0.05
    previous = embedding("flux", **flux.PREVIOUS_DEFAULT)
    one, _ = _outcome(1, n=9)
    assert np.array_equal(previous.distances({None: one}), one.values)
    assert previous.combine is None and previous.combine_newcomers is None
    assert previous.cluster(one.values).tolist() == flux.cluster_clients(
        one.values, k_rule="calibrated", k_alpha=0.05, k_references=39).labels.tolist()
    assert embedding("flux", k_rule="ward").cluster(one.values).tolist() == \
        flux.cluster_clients(one.values, k_rule="ward").labels.tolist()
    with pytest.raises(ParameterError, match="normalization"):
        embedding("flux", normalization="whitened")   # needs a secure sum, not one session
    with pytest.raises(ParameterError, match="k_alpha and k_references"):
        embedding("flux", k_rule="ward", k_alpha=0.05)
    with pytest.raises(ParameterError, match="k_rule must be one of"):
        embedding("flux", k_rule="silhouette")
    with pytest.raises(ParameterError, match="FLUX chooses K"):
        embedding("flux", n_clusters=2)
    with pytest.raises(ParameterError, match="integer >= 2"):
        embedding("flux", split_groups=1)
    with pytest.raises(ParameterError, match="split_groups needs normalization='split'"):
        embedding("flux", normalization="none", split_groups=4)


def test_the_flux_embedding_tests_at_run_fluxs_level(monkeypatch):
    """What the server's rule is called with: run_flux's rule, level and draws by default
    (flux.run_k_level), the caller's when given; the rules without a level get none."""
    seen = []
    real = flux.cluster_clients

    def spy(d, **kwargs):
        seen.append(kwargs)
        return real(d, **kwargs)

    monkeypatch.setattr(flux, "cluster_clients", spy)
    d = _outcome(1, n=6)[0].values
    embedding("flux").cluster(d)
    embedding("flux", k_rule="calibrated", k_alpha=0.05, random_state=3).cluster(d)
    embedding("flux", k_rule="ward").cluster(d)
    assert seen == [
        dict(k_rule="calibrated_axis_or_gap", k_alpha=flux.RUN_K_ALPHA,
             k_references=flux.RUN_K_REFERENCES, random_state=0),
        dict(k_rule="calibrated", k_alpha=0.05, k_references=flux.RUN_K_REFERENCES,
             random_state=3),
        dict(k_rule="ward", k_alpha=None, k_references=None, random_state=0)]
    assert (flux.RUN_K_ALPHA, flux.RUN_K_REFERENCES) == (0.01, 199)
