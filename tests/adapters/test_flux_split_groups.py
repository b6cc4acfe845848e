"""FLUX's noise read from D alone with k delete-a-group descriptors per client (issue 24,
twenty-second pass): omnifc.adapters.flux._split_half with ``groups=k``, checked against an
independent computation (the rows each descriptor holds; the delete-a-group jackknife and
Chen et al.'s OAS formula written out on the vectors themselves), its secure form, run_flux's
and the grid's options."""

from __future__ import annotations

import numpy as np
import pytest

from finite_field import InputError, ParameterError
from omnifc.adapters import flux
from omnifc.adapters.flux._split_half import _contrasts, squared_distances


def _fake_descriptor(seen):
    """A descriptor that records the rows it was given and returns their sum and count."""
    def descriptor(z, y, projection, n_classes, form):
        pairs = sorted(zip(z[:, 0].tolist(), [int(v) for v in y]))
        seen.append(([r for r, _ in pairs], [v for _, v in pairs]))
        return np.array([z.sum(), len(z)], dtype=float)
    return descriptor


@pytest.mark.parametrize("m, k", [(7, 2), (8, 2), (20, 10), (23, 10), (10, 10), (9, 4)])
def test_each_descriptor_leaves_out_one_piece_of_the_seeded_permutation(monkeypatch, m, k):
    """G_j holds the client's rows without piece k - 1 - j of the permutation its generator
    draws, the pieces cut consecutively with the larger ones (m // k + 1 rows) last; labels
    travel with their rows; at k = 2, A is the permutation's first floor(m / 2) rows."""
    from omnifc.adapters.flux import _split_half

    seen = []
    monkeypatch.setattr(_split_half, "descriptor", _fake_descriptor(seen))
    latents = [np.arange(m, dtype=float)[:, None] + 1000 * i for i in range(3)]
    labels = [(np.arange(m) + 1000 * i) % 3 for i in range(3)]
    got = flux.split_descriptors(latents, labels, None, 3, form="weighted_all",
                                 rng=np.random.default_rng(11), groups=k)
    assert len(got) == k and all(g.shape == (3, 2) for g in got)
    rng = np.random.default_rng(11)
    for i in range(3):
        order = rng.permutation(m)
        sizes = [m // k] * (k - m % k) + [m // k + 1] * (m % k)
        pieces = [order[sum(sizes[:j]):sum(sizes[:j + 1])] for j in range(k)]
        for j in range(k):
            rows, y = seen[i * k + j]
            kept = sorted(set(range(m)) - set(pieces[k - 1 - j].tolist()))
            assert rows == [r + 1000 * i for r in kept]
            assert y == [int(r) % 3 for r in rows]
            assert got[j][i].tolist() == [float(sum(rows)), float(len(rows))]
        if k == 2:
            assert seen[i * k][0] == sorted((order[:m // 2] + 1000 * i).tolist())


def test_too_few_rows_and_a_bad_group_count_are_refused():
    proj = flux.shared_projection(4, 2, max_value=1.0)
    z = [np.random.default_rng(0).random((9, 4))]
    y = [np.arange(9) % 2]
    with pytest.raises(InputError, match="at least 10 rows to leave out 10 groups.*has 9"):
        flux.split_descriptors(z, y, proj, 2, form="weighted_all",
                               rng=np.random.default_rng(0), groups=10)
    for bad in (1, 0, 2.0, True, "3"):
        with pytest.raises(ParameterError, match="integer >= 2"):
            flux.split_descriptors(z, y, proj, 2, form="weighted_all",
                                   rng=np.random.default_rng(0), groups=bad)
        with pytest.raises(ParameterError, match="integer >= 2"):
            flux.split_whitened_distances(np.zeros((9, 9)), 3, groups=bad)
    assert len(flux.split_descriptors(z, y, proj, 2, form="weighted_all",
                                      rng=np.random.default_rng(0), groups=9)) == 9


@pytest.mark.parametrize("k", [2, 3, 5, 10])
def test_the_contrasts_sum_to_four_times_the_jackknife(k):
    """Each row sums to 0; C^T C = 4 (k - 1) / k (I - 11^T / k), so the outer products of a
    client's k - 1 contrasts sum to 4 times its delete-a-group jackknife covariance; exactly
    [[1, -1]] at k = 2 (the halves' A - B)."""
    c = _contrasts(k)
    assert c.shape == (k - 1, k)
    assert np.allclose(c.sum(axis=1), 0.0, atol=1e-12)
    want = 4 * (k - 1) / k * (np.eye(k) - np.ones((k, k)) / k)
    assert np.allclose(c.T @ c, want, rtol=1e-12, atol=1e-12)
    if k == 2:
        assert c.tolist() == [[1.0, -1.0]]


def _oas_by_hand(s, n_samples):
    """Chen, Wiesel, Eldar & Hero (2010), eq. 23 as scikit-learn states it: shrink S toward
    tr(S) / p I by min(1, (tr(S^2) + tr(S)^2) / ((n + 1)(tr(S^2) - tr(S)^2 / p)))."""
    p = s.shape[0]
    t2, t = np.trace(s @ s), np.trace(s)
    rho = min(1.0, (t2 + t ** 2) / ((n_samples + 1) * (t2 - t ** 2 / p)))
    return (1 - rho) * s + rho * t / p * np.eye(p)


@pytest.mark.parametrize("k", [2, 3, 5])
@pytest.mark.parametrize("full", [True, False])
def test_from_d_alone_the_coordinator_whitens_by_the_jackknife(k, full):
    """From the D of [G_0; ...; G_{k-1}; F] (or of the G alone, whose per-client means are
    then the points), rotated and moved (D cannot tell), the coordinator gets the distances
    of the points whitened by OAS of 4 / (k - 1) x the clients' mean delete-a-group
    jackknife covariance with n (k - 1) samples (the mean over the n (k - 1) contrasts),
    written out here on the vectors themselves."""
    rng = np.random.default_rng(20 + k)
    n, p = 9, 5
    scale = np.array([4.0, 1.0, 0.5, 2.0, 0.2])
    f = rng.normal(size=(n, p)) * 3
    left = [f + rng.normal(size=(n, p)) * scale for _ in range(k)]
    rotation = np.linalg.qr(rng.normal(size=(p, p)))[0]
    vectors = np.vstack(left + ([f] if full else [])) @ rotation - 3.0
    got = flux.split_whitened_distances(squared_distances(vectors), n, groups=k)
    g = np.stack(left, axis=1)                                   # n x k x p
    centred = g - g.mean(axis=1, keepdims=True)
    jackknife = [(k - 1) / k * c.T @ c for c in centred]
    noise = _oas_by_hand(4 / (k - 1) * np.mean(jackknife, axis=0), n * (k - 1))
    points = f if full else g.mean(axis=1)
    diff = points[:, None] - points[None]
    want = np.einsum("ijp,pq,ijq->ij", diff, np.linalg.inv(noise), diff)
    assert got == pytest.approx(want, rel=1e-7, abs=1e-9)


@pytest.mark.timeout(600)
def test_block_distances_with_k_splits_is_the_coordinators_computation_on_the_secure_d():
    """normalization='split' with k = 3 split descriptors: the secure D of the 4n rows (a
    client's four rows in its party) equals the plaintext one bit for bit, and the result is
    split_whitened_distances(groups=3) of the plaintext D of the quantized rows."""
    from omnifc.adapters._common import plaintext_distances, quantize_rows

    rng = np.random.default_rng(5)
    proj = flux.shared_projection(8, 3, max_value=2.0)
    latents = [rng.random((12, 8)) * 2 for _ in range(5)]
    labels = [rng.integers(0, 3, 12) for _ in range(5)]
    desc = np.stack([flux.descriptor(z, y, proj, 3) for z, y in zip(latents, labels)])
    splits = flux.split_descriptors(latents, labels, proj, 3, form=flux.DEFAULT_DESCRIPTOR_FORM,
                                    rng=np.random.default_rng(1), groups=3)
    bound = flux.descriptor_bound(proj, 2.0)
    common = dict(n_components=3, n_classes=3, bound=bound, normalization="split",
                  splits=splits)
    secure, _, _ = flux.block_distances(desc, **common)
    plain, _, _ = flux.block_distances(desc, secure=False, **common)
    assert np.array_equal(secure, plain)
    rows = quantize_rows(np.vstack(list(splits) + [desc]), bound=bound, scale_bits=16)
    assert np.array_equal(plain, flux.split_whitened_distances(plaintext_distances(rows), 5,
                                                               groups=3))
    with pytest.raises(ParameterError, match="k >= 2 split"):
        flux.block_distances(desc, secure=False, **dict(common, splits=splits[:1]))
    with pytest.raises(ParameterError, match="k >= 2 split"):
        flux.block_distances(desc, secure=False,
                             **dict(common, splits=(splits[0], splits[1][:-1], splits[2])))


def test_split_rows_send_the_k_descriptors_then_the_descriptor():
    rng = np.random.default_rng(2)
    proj = flux.shared_projection(8, 3, max_value=2.0)
    z, y = rng.random((11, 8)) * 2, rng.integers(0, 3, 11)
    rows = flux.split_rows(z, y, proj, 3, rng=np.random.default_rng(4), groups=4)
    left = flux.split_descriptors([z], [y], proj, 3, form=flux.DEFAULT_DESCRIPTOR_FORM,
                                  rng=np.random.default_rng(4), groups=4)
    assert np.array_equal(rows, np.stack([g[0] for g in left]
                                         + [flux.descriptor(z, y, proj, 3)]))


@pytest.mark.timeout(300)
def test_run_flux_split_groups_runs_the_k_descriptors_and_refuses_what_it_cannot():
    """run_flux(split_groups=k) clusters on block_distances of split_descriptors(groups=k)
    drawn from default_rng(seed); a bad k, a k with another normalization and a client with
    fewer than k rows are refused before any session."""
    from omnifc import fl

    data = fl.make_federated("digits", shift="feature", n_groups=2, clients_per_group=3,
                             new_per_group=0, seed=4)
    model = fl.MLP(data.n_features, 8, data.n_classes)
    fast = dict(seed=4, warmup_rounds=1, cluster_rounds=0, secure=False)
    run = flux.run_flux(data, model, split_groups=5, **fast)
    latents = [model.latents(run.global_model, c.x_train) for c in data.clients]
    largest = max(float(z.max(initial=0.0)) for z in latents)
    m = flux.ACTIVATION_MARGIN * max(largest, 1e-12)
    l = flux.flux_components(data.n_classes, latents[0].shape[1])
    proj = flux.shared_projection(latents[0].shape[1], l, max_value=m)
    labels = [c.y_train for c in data.clients]
    desc = np.stack([flux.descriptor(z, y, proj, data.n_classes)
                     for z, y in zip(latents, labels)])
    splits = flux.split_descriptors(latents, labels, proj, data.n_classes,
                                    form=flux.DEFAULT_DESCRIPTOR_FORM,
                                    rng=np.random.default_rng(4), groups=5)
    want, _, _ = flux.block_distances(desc, n_components=l, n_classes=data.n_classes,
                                      bound=flux.descriptor_bound(proj, m),
                                      normalization="split", secure=False, splits=splits)
    assert np.array_equal(run.distances, want)
    with pytest.raises(ParameterError, match="integer >= 2"):
        flux.run_flux(data, model, split_groups=1, **fast)
    with pytest.raises(ParameterError, match="split_groups needs normalization='split'"):
        flux.run_flux(data, model, normalization="none", split_groups=3, **fast)
    rows = min(len(c.x_train) for c in data.clients)
    with pytest.raises(InputError, match=f"at least {rows + 1} rows"):
        flux.run_flux(data, model, split_groups=rows + 1, **fast)


def test_the_recipe_is_the_default_rule_with_ten_groups():
    assert flux.SPLIT_GROUPS_RECIPE == {**flux.SPLIT_MIN_P_RECIPE, "split_groups": 10}


@pytest.mark.timeout(120)
def test_the_default_rule_reads_whitened_distances_of_any_scale_alike():
    """The contrasts' scale (4 / (k - 1) times the jackknife) multiplies every whitened
    distance by one constant; run_flux's rule (min-p of the top axis and the Ward gap at
    0.01, B = 199) gives the same K and p on D, 9 D and D / 4."""
    from omnifc.adapters._calibrated_k import calibrated_k

    rng = np.random.default_rng(1)
    rule = dict(statistic="axis_or_gap", alpha=0.01, references=199, random_state=3)
    ks = set()
    for n, shift in ((12, 0.0), (20, 4.0), (30, 8.0)):
        x = rng.normal(size=(n, 6))
        x[: n // 3, 0] += shift
        d = squared_distances(x)
        want = calibrated_k(d, **rule)
        ks.add(want.k)
        for c in (9.0, 0.25):
            got = calibrated_k(c * d, **rule)
            assert (got.k, got.p_value) == (want.k, want.p_value)
            assert np.array_equal(got.labels, want.labels)
    assert ks == {1, 2}                        # both answers occur
