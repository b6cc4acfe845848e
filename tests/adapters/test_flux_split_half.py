"""FLUX's noise read from D alone (issue 24, thirteenth pass): the halves and the
coordinator's computation (omnifc.adapters.flux._split_half, through
benchmarks/_flux_split_half.py, which uses them), the look's table and its frozen verdict."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.covariance import oas

from benchmark_scripts import load_benchmark


@pytest.fixture(scope="module")
def look():
    return load_benchmark("_flux_split_half")


def test_split_halves_partitions_each_clients_rows(look, monkeypatch):
    """Each client's rows go to exactly one half, sizes floor and ceil of m / 2, labels
    kept with their rows; the split follows the seed."""
    seen = []

    def fake_descriptor(z, y, projection, n_classes, form):
        seen.append((z[:, 0].tolist(), list(y)))
        return np.array([z.sum()])

    from omnifc.adapters.flux import _split_half

    monkeypatch.setattr(_split_half, "descriptor", fake_descriptor)
    latents = [np.arange(7.0)[:, None] + 100 * i for i in range(3)]
    labels = [(np.arange(7) + 100 * i) % 3 for i in range(3)]
    a, b = look.split_halves(latents, labels, None, 3, "weighted_all", seed=4)
    for i in range(3):
        (rows_a, y_a), (rows_b, y_b) = seen[2 * i], seen[2 * i + 1]
        assert sorted(rows_a + rows_b) == latents[i][:, 0].tolist()
        assert (len(rows_a), len(rows_b)) == (3, 4)
        assert y_a == [int(r) % 3 for r in rows_a] and y_b == [int(r) % 3 for r in rows_b]
        assert a[i, 0] == sum(rows_a) and b[i, 0] == sum(rows_b)
    first = [s[0] for s in seen]
    seen.clear()
    look.split_halves(latents, labels, None, 3, "weighted_all", seed=4)
    assert [s[0] for s in seen] == first


@pytest.mark.parametrize("full", [False, True])
def test_whitening_from_d_alone_equals_whitening_the_vectors(look, full):
    """From D only (MDS of the 2n or 3n vectors) the coordinator gets the distances of the
    vectors whitened by the OAS-shrunk covariance of A - B, computed here on the vectors
    themselves (rotated and moved: D cannot tell); the embedding has the vectors' own
    dimension, so OAS shrinks toward the same target."""
    rng = np.random.default_rng(8)
    n, p = 9, 5
    scale = np.array([4.0, 1.0, 0.5, 2.0, 0.2])
    f = rng.normal(size=(n, p)) * 3
    a = f + rng.normal(size=(n, p)) * scale
    b = f + rng.normal(size=(n, p)) * scale
    rotation = np.linalg.qr(rng.normal(size=(p, p)))[0]
    vectors = np.vstack([a, b, f] if full else [a, b]) @ rotation + 7.0
    got = look.split_whitened_distances(look.squared_distances(vectors), n)
    noise, _ = oas(a - b, assume_centered=True)
    root = np.linalg.cholesky(np.linalg.inv(noise))       # any W with W W^T = noise^-1
    points = f if full else (a + b) / 2
    want = ((points[:, None] - points[None]) @ root) ** 2
    assert got == pytest.approx(want.sum(-1), rel=1e-7, abs=1e-9)
    with pytest.raises(ValueError, match=r"kn x kn or \(k \+ 1\)n"):
        look.split_whitened_distances(look.squared_distances(vectors[:-1]), n)


@pytest.mark.timeout(300)
def test_quick_look_counts_what_each_rule_returned(look, capsys):
    """--quick: two cells, one seed; the table's counts are each rule's K against the
    planted K, recomputed here from run()."""
    assert look.main(["--quick"]) == 0
    lines = capsys.readouterr().out.splitlines()
    rows = [look.run(cell, 960) for cell in look.cells(quick=True)]
    table = {l.split(" | ")[0].strip("| "): l.split(" | ")[1:] for l in lines[2:] if "|" in l}
    iid, planted = rows
    assert table["iid, 6 clients"][:3] == [f"{int(iid['k'][r] == 1)}/1" for r in look.RULES[:3]]
    assert table["planted, all"][-1] == f"{int(planted['k']['split_full'] == 2)}/1 |"
    assert (iid["planted"], planted["planted"]) == (1, 2)


def test_the_frozen_verdict_is_computed_from_paired_runs(look):
    """split_full against the default: better on the planted runs (+6 / -0 of 6 is past two
    standard errors), no iid row worse -> holds; one iid size where split_full loses 4 of 4
    -> fails. Noise against statistics.stdev of the paired differences."""
    import statistics

    def result(cell, planted, default, split_full):
        return {"cell": cell, "planted": planted, "seed": 0,
                "k": {"default": default, "recipe": planted, "split": 1,
                      "split_full": split_full}}

    planted = [result(["label", 6, 20, 1, 2], 2, 1, 2) for _ in range(6)]
    iid = [result(["none", 20, 20, 1, 2], 1, 1, 1) for _ in range(4)]
    lines = look.verdict_lines(planted + iid)
    assert lines[-1].startswith("SPLIT_HALF_VERDICT holds")
    row = next(l for l in lines if l.startswith("| default | planted, all |"))
    assert row.split(" | ")[2:7] == ["0", "6", "+6 / −0", "0.0", "better |"]
    bad = [result(["none", 500, 20, 1, 2], 1, 1, 2) for _ in range(4)]
    lines = look.verdict_lines(planted + iid + bad)
    assert lines[-1].startswith("SPLIT_HALF_VERDICT fails")
    mixed = planted[:3] + [result(["label", 6, 20, 1, 2], 2, 2, 1) for _ in range(3)]
    ra, rb, plus, minus, noise, word = look.paired(mixed, "default", "split_full",
                                                   lambda r: r["planted"] == 2)
    diffs = [1, 1, 1, -1, -1, -1]
    assert look.verdict_lines(mixed + iid)[-1].startswith("SPLIT_HALF_VERDICT fails")  # a tie
    assert (ra, rb, plus, minus) == (3, 3, 3, 3)
    assert noise == pytest.approx(2 * statistics.stdev(diffs) / 6 ** 0.5 * 6)
    assert word == "tie within noise"


def test_split_whitened_distances_refuses_a_d_of_the_wrong_size(look):
    from finite_field import ParameterError

    d = look.squared_distances(np.random.default_rng(0).normal(size=(12, 3)))
    for n in (3, 5, 1):
        with pytest.raises(ParameterError, match=r"kn x kn or \(k \+ 1\)n"):
            look.split_whitened_distances(d, n)
    assert look.split_whitened_distances(d, 4).shape == (4, 4)        # 3n = 12
    assert look.split_whitened_distances(d, 6).shape == (6, 6)        # 2n = 12
    assert look.split_whitened_distances(d[:6, :6], 2).shape == (2, 2)  # the fewest clients
    assert look.split_whitened_distances(d[:4, :4], 2).shape == (2, 2)


@pytest.mark.timeout(600)
def test_block_distances_split_is_the_coordinators_computation_on_the_secure_d():
    """normalization='split': the secure D of [A; B; F] (a client's three rows in its
    party) equals the plaintext one bit for bit, and the result is split_whitened_distances
    of the plaintext D of the quantized rows; halves are required, refused elsewhere, and
    must have the descriptors' shape."""
    from finite_field import ParameterError
    from omnifc.adapters import flux
    from omnifc.adapters._common import plaintext_distances, quantize_rows

    rng = np.random.default_rng(2)
    proj = flux.shared_projection(8, 3, max_value=2.0)
    latents = [rng.random((int(rng.integers(6, 12)), 8)) * 2 for _ in range(7)]
    labels = [rng.integers(0, 3, len(z)) for z in latents]
    desc = np.stack([flux.descriptor(z, y, proj, 3) for z, y in zip(latents, labels)])
    a, b = flux.split_descriptors(latents, labels, proj, 3, form=flux.DEFAULT_DESCRIPTOR_FORM,
                                  rng=np.random.default_rng(5), groups=2)
    common = dict(n_components=3, n_classes=3, bound=flux.descriptor_bound(proj, 2.0))
    secure, _, _ = flux.block_distances(desc, normalization="split", splits=(a, b),
                                        parties=np.arange(7) % 3, **common)
    plain, _, _ = flux.block_distances(desc, normalization="split", splits=(a, b),
                                       secure=False, **common)
    assert np.array_equal(secure, plain)
    rows = quantize_rows(np.vstack([a, b, desc]), bound=common["bound"], scale_bits=16)
    assert np.array_equal(plain, flux.split_whitened_distances(plaintext_distances(rows), 7,
                                                               groups=2))
    import omnifc.adapters.flux._secure as secure_module

    seen = []
    real = secure_module.protect
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(secure_module, "protect",
                      lambda rows, **kw: seen.append(kw["parties"]) or real(rows, **kw))
        flux.block_distances(desc, normalization="split", splits=(a, b), **common)
    assert seen[0].tolist() == list(range(7)) * 3      # a client's three rows: one party
    with pytest.raises(ParameterError, match="needs splits"):
        flux.block_distances(desc, normalization="split", secure=False, **common)
    with pytest.raises(ParameterError, match="needs splits"):
        flux.block_distances(desc, splits=(a, b), secure=False, **common)
    with pytest.raises(ParameterError, match="k >= 2 split"):
        flux.block_distances(desc, normalization="split", splits=(a[:-1], b), secure=False,
                             **common)


@pytest.mark.timeout(600)
def test_run_flux_split_secure_equals_plaintext_and_is_the_recipes_test():
    from omnifc import fl
    from omnifc.adapters import flux
    from omnifc.adapters._calibrated_k import calibrated_k

    data = fl.make_federated("digits", shift="feature", n_groups=2, clients_per_group=4,
                             new_per_group=1, seed=3)
    from oracles import secure_and_plain_flux_runs

    model = fl.MLP(data.n_features, 16, data.n_classes)
    secure, plain = secure_and_plain_flux_runs(data, model, 3, **flux.SPLIT_HALF_RECIPE)
    assert flux.SPLIT_HALF_RECIPE == {"normalization": "split", "k_rule": "calibrated_axis",
                                      "k_alpha": 0.01, "k_references": 199,
                                      "split_groups": 2, "second_test": "none"}
    assert np.array_equal(secure.distances, plain.distances)
    assert np.array_equal(secure.labels, plain.labels)
    assert np.array_equal(secure.prefix, plain.prefix)
    again = calibrated_k(plain.distances, statistic="axis_ci", alpha=0.01, references=199,
                         random_state=3)
    assert plain.decision.p_value == again.p_value and plain.n_clusters == again.k
    assert plain.whitening is None


@pytest.mark.timeout(600)
def test_run_flux_defaults_to_the_split_groups_recipe_and_tests_at_the_goal_level():
    """Issue 24, twenty-second pass (SPLIT_GROUPS_VERDICT held): run_flux's defaults are
    SPLIT_GROUPS_RECIPE (SPLIT_MIN_P_RECIPE with 10 groups) beyond six clients, bit for bit
    (DEFAULT_RECIPE = SPLIT_UNION_RECIPE since the twenty-seventh pass),
    and differ from SPLIT_MIN_P_RECIPE's two halves; every calibrated rule in run_flux tests
    at RUN_K_ALPHA
    with RUN_K_REFERENCES draws unless told otherwise; PREVIOUS_DEFAULT is the descriptors'
    D with calibrated_k's own level; Ward and DBSCAN take no level and run."""
    from omnifc import fl
    from omnifc.adapters import flux
    from omnifc.adapters._calibrated_k import calibrated_k

    data = fl.make_federated("digits", shift="label", n_groups=2, clients_per_group=4,
                             new_per_group=0, seed=8)
    model = fl.MLP(data.n_features, 8, data.n_classes)
    fast = dict(seed=8, secure=False, warmup_rounds=1, cluster_rounds=0)

    def same(a, b):
        return ((a.k, a.p_value, a.alpha, a.references, a.rule)
                == (b.k, b.p_value, b.alpha, b.references, b.rule)
                and np.array_equal(a.labels, b.labels))

    default = flux.run_flux(data, model, **fast)
    recipe = flux.run_flux(data, model, **fast, **flux.SPLIT_GROUPS_RECIPE)
    # since the twenty-seventh pass the default adds the second test, asked at 4 to 6
    # clients only: with 8 the default is SPLIT_GROUPS_RECIPE's run
    assert flux.DEFAULT_RECIPE is flux.SPLIT_UNION_RECIPE and flux.DEFAULT_SPLIT_GROUPS == 10
    assert flux.SPLIT_UNION_RECIPE == {**flux.SPLIT_GROUPS_RECIPE, "second_test": "spiked"}
    assert default.second_test is None and recipe.second_test is None
    assert np.array_equal(default.distances, recipe.distances)
    halves = flux.run_flux(data, model, **fast, **flux.SPLIT_MIN_P_RECIPE)
    assert not np.allclose(halves.distances, default.distances)
    assert np.array_equal(halves.distances,
                          flux.run_flux(data, model, **fast, split_groups=2).distances)
    assert same(default.decision, recipe.decision) and default.distances.shape == (8, 8)
    assert (flux.RUN_K_ALPHA, flux.RUN_K_REFERENCES) == (0.01, 199)
    assert (default.decision.alpha, default.decision.references) == (0.01, 199)
    assert default.decision.rule == "calibrated/axis_or_gap"
    assert flux.SPLIT_MIN_P_RECIPE == {"normalization": "split",
                                       "k_rule": "calibrated_axis_or_gap",
                                       "k_alpha": 0.01, "k_references": 199,
                                       "split_groups": 2, "second_test": "none"}
    none = flux.run_flux(data, model, **fast, normalization="none", k_rule="calibrated")
    want = calibrated_k(none.distances, alpha=0.01, references=199, random_state=8)
    assert same(none.decision, want)
    previous = flux.run_flux(data, model, **fast, **flux.PREVIOUS_DEFAULT)
    assert np.array_equal(previous.distances, none.distances)
    assert same(previous.decision, calibrated_k(none.distances, random_state=8))
    assert (previous.decision.alpha, previous.decision.references) == (0.05, 39)
    assert not np.allclose(previous.distances, default.distances)
    for rule in ("ward", "dbscan"):
        run = flux.run_flux(data, model, **fast, normalization="none", k_rule=rule)
        assert run.decision is None
        assert np.array_equal(run.labels, flux.cluster_clients(none.distances,
                                                               k_rule=rule).labels)


@pytest.mark.timeout(300)
def test_run_flux_refuses_a_client_of_too_few_rows_and_takes_it_with_fewer_groups():
    """Fail closed: the default leaves out each of 10 groups of every client's rows, so a
    client with 9 training rows is refused before any secure session starts (InputError,
    an OmniFCError, naming the count); split_groups=2 (two halves) takes it, and refuses a
    client of one row; normalization="none" clusters both federations."""
    import dataclasses

    from finite_field import InputError, OmniFCError
    from omnifc import fl
    from omnifc.adapters import flux

    data = fl.make_federated("digits", shift="feature", n_groups=2, clients_per_group=3,
                             new_per_group=0, seed=2)
    first = data.clients[0]
    model = fl.MLP(data.n_features, 8, data.n_classes)
    fast = dict(seed=2, warmup_rounds=1, cluster_rounds=0)
    for rows, groups in ((9, 10), (1, 2)):
        data.clients[0] = dataclasses.replace(first, x_train=first.x_train[:rows],
                                              y_train=first.y_train[:rows])
        options = {} if groups == 10 else {"split_groups": groups}
        with pytest.raises(InputError, match=f"at least {rows + 1} rows to leave out "
                                             f"{groups} groups.*has {rows}") as caught:
            flux.run_flux(data, model, **fast, **options)
        assert isinstance(caught.value, OmniFCError)
        run = flux.run_flux(data, model, secure=False, normalization="none", **fast)
        assert run.distances.shape == (6, 6)
    data.clients[0] = dataclasses.replace(first, x_train=first.x_train[:9],
                                          y_train=first.y_train[:9])
    run = flux.run_flux(data, model, secure=False, split_groups=2, **fast)
    assert run.distances.shape == (6, 6)


# -- the client's rows and the server's order, for a session over nodes (Flower) ------------

def _clients(seed=3, n=5, classes=3, dim=8):
    from omnifc.adapters import flux

    rng = np.random.default_rng(seed)
    proj = flux.shared_projection(dim, classes, max_value=2.0)
    latents = [rng.random((int(rng.integers(5, 11)), dim)) * 2 for _ in range(n)]
    labels = [rng.integers(0, classes, len(z)) for z in latents]
    return proj, latents, labels


def test_split_rows_are_one_clients_halves_and_descriptor():
    """A node's [A; B; F]: split_descriptors of its rows under the same generator, then its
    descriptor; every form; a fresh split when no generator is given."""
    from omnifc.adapters import flux

    proj, latents, labels = _clients()
    for form in flux.DESCRIPTOR_FORMS:
        for z, y in zip(latents, labels):
            rows = flux.split_rows(z, y, proj, 3, form=form, rng=np.random.default_rng(9),
                                   groups=2)
            (a,), (b,) = flux.split_descriptors([z], [y], proj, 3, form=form,
                                                rng=np.random.default_rng(9), groups=2)
            assert np.array_equal(rows, np.stack([a, b, flux.descriptor(z, y, proj, 3,
                                                                        form=form)]))
    z, y = latents[0], labels[0]
    draws = {flux.split_rows(z, y, proj, 3, groups=2)[0].tobytes() for _ in range(12)}
    assert len(draws) > 1                      # OS entropy: not one fixed split


def test_split_whitened_distances_in_client_order_is_the_stacked_order_permuted():
    """Rows client by client (G_0 of client 0, ..., F of client 0, G_0 of client 1, ...: a
    session over the nodes' split_rows) give what the stacked [G_0; ...; F] gives, for
    (k + 1)n and kn rows and k = 2 and 4; an unknown order is refused. The client-order D is
    the stacked D permuted (a D computed from the rows in another order differs in the last
    bits, and so may the result)."""
    from finite_field import ParameterError
    from omnifc.adapters import flux
    from omnifc.adapters.flux._split_half import squared_distances

    proj, latents, labels = _clients(n=6)
    for k in (2, 4):
        per_client = [flux.split_rows(z, y, proj, 3, rng=np.random.default_rng(i), groups=k)
                      for i, (z, y) in enumerate(zip(latents, labels))]
        client = np.concatenate(per_client)
        for rows in (k + 1, k):                   # with F, and the G alone
            stacked = np.concatenate([np.stack([r[j] for r in per_client])
                                      for j in range(rows)])
            assert np.array_equal(client.reshape(6, k + 1, -1)[:, :rows].transpose(1, 0, 2)
                                  .reshape(stacked.shape), stacked)
            d = squared_distances(stacked)
            to_client = (np.arange(rows)[None, :] * 6 + np.arange(6)[:, None]).ravel()
            got = flux.split_whitened_distances(d[np.ix_(to_client, to_client)], 6, groups=k,
                                                order="client")
            assert np.array_equal(got, flux.split_whitened_distances(d, 6, groups=k))
    with pytest.raises(ParameterError, match="order"):
        flux.split_whitened_distances(squared_distances(client), 6, order="clients")


def test_prefix_row_is_the_descriptors_label_free_prefix():
    from finite_field import InputError, ParameterError
    from omnifc.adapters import flux

    proj, latents, labels = _clients()
    for form in flux.DESCRIPTOR_FORMS:
        for z, y in zip(latents, labels):
            assert np.array_equal(flux.prefix_row(z, proj, form=form),
                                  flux.descriptor(z, y, proj, 3, form=form)[:6])  # 2 l
    with pytest.raises(ParameterError, match="form"):
        flux.prefix_row(latents[0], proj, form="weighted_typo")
    with pytest.raises(InputError, match="at least one"):
        flux.prefix_row(np.zeros((0, 8)), proj)


def test_run_k_level_is_run_fluxs_level_for_the_calibrated_rules_only():
    from omnifc.adapters import flux
    from omnifc.adapters.flux._paper import _CALIBRATED_STATISTICS

    for rule in flux.K_RULES:
        calibrated = rule in _CALIBRATED_STATISTICS
        assert flux.run_k_level(rule) == ((flux.RUN_K_ALPHA, flux.RUN_K_REFERENCES)
                                          if calibrated else (None, None))
        if calibrated:
            assert flux.run_k_level(rule, 0.05) == (0.05, flux.RUN_K_REFERENCES)
            assert flux.run_k_level(rule, None, 39) == (flux.RUN_K_ALPHA, 39)
