"""FLUX's noise-whitened metric (omnifc.adapters.flux._whitening): the leave-one-out
descriptors against the descriptor recomputed without each row, the jackknife noise against
its definition, the pooled noise secure against plaintext and against the plain mean, OAS
against scikit-learn, the whitening against Mahalanobis distances, the public bound at its
worst case, run_flux secure against plaintext, and what a coordinator that lies about the
pooled shape gains (the option's documented limit)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from sklearn.covariance import empirical_covariance, oas, shrunk_covariance

import omnifc
from finite_field import InputError, ParameterError
from omnifc import fl
from omnifc.adapters import flux
from omnifc.adapters._calibrated_k import calibrated_k, mds_embedding

from oracles import secure_and_plain_flux_runs

pytestmark = pytest.mark.timeout(300)


def _client(rng, rows, n_classes, dim=4, classes=None):
    x = rng.uniform(0.0, 1.0, (rows, dim))
    y = rng.integers(0, n_classes, rows) if classes is None else np.asarray(classes)
    return x, y


@pytest.mark.parametrize("form", ["weighted_all", "weighted"])
def test_leave_one_out_equals_the_descriptor_without_each_row(form):
    """Every class count from 0 to 3 rows (a class leaving, a 1-row and a 2-row class),
    30 random clients per form: row i equals descriptor() of the client without row i."""
    rng = np.random.default_rng(7)
    proj = flux.shared_projection(4, 3, max_value=1.0)
    patterns = [[0, 0, 1, 2, 2, 2], [0, 1], [0, 0, 0, 0, 3, 3], [1, 1, 2, 3, 3, 3, 3, 0]]
    clients = [_client(rng, len(p), 4, classes=p) for p in patterns]
    clients += [_client(rng, int(rng.integers(2, 12)), 4) for _ in range(30)]
    for x, y in clients:
        loo = flux.leave_one_out_descriptors(x, y, proj, 4, form=form)
        expected = np.stack([flux.descriptor(np.delete(x, i, 0), np.delete(y, i), proj, 4,
                                             form=form) for i in range(len(y))])
        np.testing.assert_allclose(loo, expected, rtol=0, atol=1e-12)


def test_leave_one_out_refuses_forms_without_a_closed_form_and_one_row():
    proj = flux.shared_projection(4, 2, max_value=1.0)
    x, y = _client(np.random.default_rng(0), 5, 2)
    for form in ("paper", "weighted_mad"):
        with pytest.raises(ParameterError, match="closed-form leave-one-out"):
            flux.leave_one_out_descriptors(x, y, proj, 2, form=form)
    with pytest.raises(InputError, match="at least 2 rows"):
        flux.leave_one_out_descriptors(x[:1], y[:1], proj, 2)
    with pytest.raises(InputError, match="one label per latent row"):
        flux.leave_one_out_descriptors(x, y[:4], proj, 2)


def test_noise_contribution_is_the_jackknife_covariance_per_row():
    rng = np.random.default_rng(3)
    proj = flux.shared_projection(4, 2, max_value=1.0)
    bound = flux.descriptor_bound(proj, 1.0)
    for rows in (2, 3, 9, 25):
        x, y = _client(rng, rows, 3)
        noise, df = flux.noise_contribution(x, y, proj, 3, bound=bound)
        loo = [flux.descriptor(np.delete(x, i, 0), np.delete(y, i), proj, 3)
               for i in range(rows)]
        mean = sum(loo) / rows
        jack = sum(np.outer(t - mean, t - mean) for t in loo) * (rows - 1) / rows
        np.testing.assert_allclose(noise, jack * (rows - 1) / bound ** 2, rtol=1e-9,
                                   atol=1e-14)
        assert df == rows - 1 and np.abs(noise).max() <= flux.NOISE_BOUND
        assert np.allclose(noise, noise.T) and np.linalg.eigvalsh(noise).min() > -1e-12
        # the mean block: the rows' variance (ddof 0) over B^2, at most 1
        z = proj.transform(x)
        np.testing.assert_allclose(np.diag(noise)[:2], z.var(axis=0) / bound ** 2, rtol=1e-9)
    with pytest.raises(ParameterError, match="bound must be positive"):
        flux.noise_contribution(x, y, proj, 3, bound=0.0)
    # the form reaches the leave-one-out: "weighted" zeroes a 1-row class, "weighted_all" not
    x, y = _client(rng, 7, 3, classes=[0, 0, 0, 1, 1, 1, 2])
    for form in ("weighted", "weighted_all"):
        noise, _ = flux.noise_contribution(x, y, proj, 3, bound=bound, form=form)
        loo = flux.leave_one_out_descriptors(x, y, proj, 3, form=form)
        centred = loo - loo.mean(axis=0)
        np.testing.assert_allclose(noise, centred.T @ centred * 6 / 7 * 6 / bound ** 2,
                                   rtol=1e-9, atol=1e-15)
    assert not np.allclose(flux.noise_contribution(x, y, proj, 3, bound=bound,
                                                   form="weighted")[0],
                           flux.noise_contribution(x, y, proj, 3, bound=bound)[0])


def test_one_row_clients_count_in_neither_sum_and_identical_rows_count_as_no_noise():
    proj = flux.shared_projection(4, 2, max_value=1.0)
    one_row = flux.noise_contribution(np.full((1, 4), 0.3), [1], proj, 2, bound=1.0)
    same_rows = flux.noise_contribution(np.full((5, 4), 0.3), [1] * 5, proj, 2, bound=1.0)
    assert one_row[1] == 0 and same_rows[1] == 4
    assert not one_row[0].any() and not same_rows[0].any() and one_row[0].shape == (12, 12)
    x, y = _client(np.random.default_rng(1), 10, 2)
    real = flux.noise_contribution(x, y, proj, 2, bound=1.0)
    pooled, df = flux.pool_noise([one_row, real, same_rows])
    assert df == 13
    np.testing.assert_allclose(pooled, real[0] / 2, atol=2.0 ** -30)
    two_rows = flux.noise_contribution(x[:2], [0, 1], proj, 2, bound=1.0)
    assert two_rows[1] == 1 and two_rows[0].any()                 # 1 degree of freedom counts
    pooled, df = flux.pool_noise([two_rows, real])
    assert df == 10
    np.testing.assert_allclose(pooled, (two_rows[0] + real[0]) / 2, atol=2.0 ** -30)
    assert flux.noise_whitening(pooled, 1).df == 1
    with pytest.raises(InputError, match="cannot be estimated"):
        flux.pool_noise([one_row, one_row])


def test_honest_contributions_stay_within_the_public_bound_at_extreme_data():
    """Latents on the box's corners (the widest projected spread), every pair of corners as
    the bulk and the outliers, 1, 2 or half the rows as outliers, an outlier class of those
    rows, alternating classes or one row of the last class, both forms with a closed-form
    leave-one-out, 10 to 1000 rows: every entry stays within NOISE_BOUND (the worst found
    is a 2-row class of "weighted" at 1000 rows, just under 4; NOISE_BOUND's comment
    derives 16 for values spanning all of [-B, B])."""
    import itertools

    proj = flux.shared_projection(3, 2, max_value=1.0)
    bound = flux.descriptor_bound(proj, 1.0)
    corners = np.array(list(itertools.product([0.0, 1.0], repeat=3)))
    worst = 0.0
    for n in (10, 200, 1000):
        for a, b in itertools.product(range(len(corners)), repeat=2):
            for k in (1, 2, n // 2):
                x = np.repeat(corners[[a]], n, axis=0)
                x[:k] = corners[b]
                for pattern in ("outliers", "alternate", "one"):
                    y = np.zeros(n, dtype=np.int64)
                    if pattern == "outliers":
                        y[:k] = 1
                    elif pattern == "alternate":
                        y[::2] = 1
                    else:
                        y[0] = 1
                    for form in ("weighted_all", "weighted"):
                        noise, _ = flux.noise_contribution(x, y, proj, 2, bound=bound,
                                                           form=form)
                        worst = max(worst, float(np.abs(noise).max()))
    assert 3.5 < worst <= 4.0 < flux.NOISE_BOUND


def test_a_contribution_beyond_the_public_bound_is_refused_not_clipped():
    """A client (or a bound too small for its data) whose noise entry exceeds NOISE_BOUND
    stops the pooling with a clear error naming the client, before anything is sent."""
    parts = _contributions(5)
    big = parts[2][0].copy()
    big[0, 0] = flux.NOISE_BOUND * 1.01
    for secure in (False, True):
        with pytest.raises(InputError, match="client 2's descriptor noise exceeds"):
            flux.pool_noise(parts[:2] + [(big, parts[2][1])] + parts[3:], secure=secure)
    edge = parts[2][0].copy()
    edge[0, 0] = flux.NOISE_BOUND                         # at the bound: accepted
    flux.pool_noise(parts[:2] + [(edge, parts[2][1])] + parts[3:])


def _contributions(seed, clients=6, n_classes=3):
    rng = np.random.default_rng(seed)
    proj = flux.shared_projection(4, 2, max_value=1.0)
    return [flux.noise_contribution(*_client(rng, int(rng.integers(4, 15)), n_classes),
                                    proj, n_classes, bound=flux.descriptor_bound(proj, 1.0))
            for _ in range(clients)]


def test_pooled_shape_is_the_mean_and_secure_equals_plaintext_bit_for_bit():
    parts = _contributions(5)
    plain, df = flux.pool_noise(parts)
    assert df == sum(d for _, d in parts)
    np.testing.assert_allclose(plain, sum(s for s, _ in parts) / len(parts),
                               rtol=0, atol=2.0 ** -30)
    for parties in (None, np.array([0, 0, 1, 1, 2, 2]), np.array([0, 1, 0, 1, 0, 1])):
        secure, secure_df = flux.pool_noise(parts, secure=True, parties=parties)
        assert np.array_equal(secure, plain) and secure_df == df


def test_secure_pooling_holds_party_sums_at_the_bound():
    """Two clients per party, each at NOISE_BOUND in one entry: the party's sum is twice the
    bound, and the secure sum still equals the plaintext one (its public bound is the bound
    times the largest party's clients)."""
    parts = _contributions(7)
    edge = [(s.copy(), d) for s, d in parts]
    for s, _ in edge:
        s[0, 0] = flux.NOISE_BOUND
        s[1, 1] = -flux.NOISE_BOUND
    plain, df = flux.pool_noise(edge)
    secure, secure_df = flux.pool_noise(edge, secure=True, parties=[0, 0, 1, 1, 2, 2])
    assert np.array_equal(secure, plain) and secure_df == df
    assert plain[0, 0] == flux.NOISE_BOUND and plain[1, 1] == -flux.NOISE_BOUND


def test_whitening_of_clients_is_the_contributions_pooled_and_whitened():
    rng = np.random.default_rng(31)
    proj = flux.shared_projection(4, 2, max_value=1.0)
    clients = [_client(rng, int(rng.integers(3, 12)), 3) for _ in range(6)]
    bound = flux.descriptor_bound(proj, 1.0)
    for form in ("weighted_all", "weighted"):
        parts = [flux.noise_contribution(x, y, proj, 3, bound=bound, form=form)
                 for x, y in clients]
        want = flux.noise_whitening(*flux.pool_noise(parts))
        for secure, parties in ((False, None), (True, [0, 0, 1, 1, 2, 2])):
            got = flux.whitening_of_clients([x for x, _ in clients], [y for _, y in clients],
                                            proj, 3, bound=bound, form=form, secure=secure,
                                            parties=parties)
            assert np.array_equal(got.matrix, want.matrix) and got.df == want.df
            assert got.shrinkage == want.shrinkage


def test_pool_noise_rejects_parties_of_the_wrong_length():
    with pytest.raises(ParameterError, match="one label per client"):
        flux.pool_noise(_contributions(5), parties=[0, 1])


@pytest.mark.parametrize("n,p,scale", [(5, 3, 1.0), (40, 5, 1.0), (12, 30, 1.0),
                                       (300, 8, 1.0), (40, 5, 1e-3)])
def test_oas_shrinkage_equals_scikit_learns(n, p, scale):
    x = np.random.default_rng(n * p).normal(size=(n, p)) * np.linspace(1, 3, p) * scale
    assert flux.oas_shrinkage(empirical_covariance(x), n) == pytest.approx(oas(x)[1],
                                                                          rel=1e-12)
    assert flux.oas_shrinkage(np.eye(1), 10) == 0.0


def test_whitened_distances_are_mahalanobis_distances_of_the_shrunk_noise():
    parts = _contributions(11, clients=8)
    pooled, df = flux.pool_noise(parts)
    white = flux.noise_whitening(pooled, df)
    kept = white.kept
    sd = np.sqrt(np.diag(pooled)[kept])
    corr = pooled[np.ix_(kept, kept)] / np.outer(sd, sd)
    shrunk = np.outer(sd, sd) * shrunk_covariance(corr, white.shrinkage)
    assert white.shrinkage == pytest.approx(flux.oas_shrinkage(corr, df), rel=1e-12)
    x = np.random.default_rng(2).normal(size=(6, pooled.shape[0]))
    y = white.apply(x)
    for i, j in itertools.combinations(range(6), 2):
        diff = (x[i] - x[j])[kept]
        assert ((y[i] - y[j]) ** 2).sum() == pytest.approx(diff @ np.linalg.solve(shrunk, diff),
                                                           rel=1e-9)
    assert not white.matrix[~kept].any() and not white.matrix[:, ~kept].any()
    assert "coordinates with noise" in white.summary()


def test_whitened_iid_clients_have_no_direction_with_more_spread_than_the_noise():
    """1000 iid clients of 100 rows: the descriptors' spread across clients is their sampling
    noise. Whitened by the pooled jackknife noise, no direction spreads beyond the
    Marchenko-Pastur edge of 1000 samples in 12 dimensions ((1 + sqrt(12/1000))^2 = 1.23,
    relative to the median direction; 1.35 allowed); that is what keeps the K rules' level
    on iid federations. The jackknife may overstate the noise (Efron & Stein 1981): it does,
    about twice, in the directions the descriptor's identities constrain (the weighted class
    means sum to zero, the variance decomposes), where only second-order noise is left; those
    directions then weigh less, never more. Unwhitened, the spread spans orders of
    magnitude."""
    rng = np.random.default_rng(19)
    proj = flux.shared_projection(4, 2, max_value=1.0)
    mix = np.array([[1.0, 0.2, 0.0, 0.0], [0.0, 0.3, 0.0, 0.1], [0.0, 0.0, 2.0, 0.0],
                    [0.1, 0.0, 0.0, 0.05]])
    clients = []
    for _ in range(1000):
        y = rng.integers(0, 2, 100)
        clients.append((0.5 + 0.1 * (rng.normal(size=(100, 4)) + y[:, None]) @ mix, y))
    desc = np.stack([flux.descriptor(x, y, proj, 2) for x, y in clients])
    white = flux.noise_whitening(*flux.pool_noise(
        [flux.noise_contribution(x, y, proj, 2, bound=1.0) for x, y in clients]))
    before = np.linalg.eigvalsh(np.cov(desc[:, white.kept].T))
    after = np.linalg.eigvalsh(np.cov(white.apply(desc)[:, white.kept].T))
    after = after / np.median(after)
    assert before.max() / before.min() > 100 and white.kept.sum() == 12
    assert after.max() < 1.35 and after.min() > 0.3


def test_the_public_bound_holds_at_its_worst_case():
    white = flux.noise_whitening(*flux.pool_noise(_contributions(13)))
    bound = 0.7
    for j in range(white.matrix.shape[1]):
        worst = bound * np.sign(white.matrix[:, j])
        assert abs(white.apply(worst)[j]) <= white.bound(bound) * (1 + 1e-12)
    column = int(np.abs(white.matrix).sum(axis=0).argmax())
    worst = bound * np.sign(white.matrix[:, column])
    assert abs(white.apply(worst)[column]) == pytest.approx(white.bound(bound), rel=1e-12)


def test_an_indefinite_pooled_noise_from_rounding_is_projected_not_refused(caplog):
    """Seed 3097's cell (label, 20 clients, 500 rows, 1:10, 2 classes) pooled coordinates
    with noise near the 2^-30 resolution, and their rounded correlation passed 1. Such a
    matrix is projected onto the nearest PSD correlation (unit diagonal) and shrunk again,
    with a warning; a PSD matrix is left as it is."""
    s = np.array([[1.0, 0.3, 0.0], [0.3, 1.0e-9, 1.001e-9], [0.0, 1.001e-9, 1.0e-9]])
    with caplog.at_level("WARNING"):
        white = flux.noise_whitening(s, 10 ** 6)
    assert "indefinite" in caplog.text
    sd = np.sqrt(np.diag(s))
    corr = s / np.outer(sd, sd)
    w, u = np.linalg.eigh(corr)
    psd = (u * np.maximum(w, 0)) @ u.T
    psd = psd / np.outer(np.sqrt(np.diag(psd)), np.sqrt(np.diag(psd)))
    rho = flux.oas_shrinkage(psd, 10 ** 6)
    assert white.shrinkage == pytest.approx(rho, rel=1e-9) and rho > 0
    cov = np.outer(sd, sd) * shrunk_covariance(psd, rho)
    x = np.array([[0.1, 2e-5, -1e-5], [0.0, 0.0, 0.0]])
    y = white.apply(x)
    diff = x[0] - x[1]
    assert ((y[0] - y[1]) ** 2).sum() == pytest.approx(diff @ np.linalg.solve(cov, diff),
                                                       rel=1e-6)
    caplog.clear()
    with caplog.at_level("WARNING"):
        flux.noise_whitening(np.array([[1.0, 0.5], [0.5, 1.0]]), 10 ** 6)
    assert "indefinite" not in caplog.text


def test_scale_bits_is_the_finest_that_fits_63_bits_and_the_bound_has_a_floor_of_one():
    from finite_field import Quantizer

    MAX_EXACT_INTEGER = 2 ** 63 - 1                     # the protocol's limit (63 bits)

    white = flux.noise_whitening(*flux.pool_noise(_contributions(17)))
    dim = white.matrix.shape[1]
    for descriptor_bound in (0.5, 40.0, 3000.0, 1e6):
        bound = white.bound(descriptor_bound)
        q = white.scale_bits(descriptor_bound, 16)
        assert Quantizer(scale_bits=q, bound=bound).distance_bound(dim) < MAX_EXACT_INTEGER
        assert q == 16 or (Quantizer(scale_bits=q + 1, bound=bound).distance_bound(dim)
                           >= MAX_EXACT_INTEGER)
    assert white.scale_bits(1e6, 16) < 16 and white.scale_bits(0.5, 16) == 16
    assert white.scale_bits(0.5, 7) == 7
    tiny = flux.noise_whitening(np.eye(2) * 1e6, 5)
    assert tiny.bound(1.0) == 1.0 and tiny.bound(1e4) == pytest.approx(10.0)
    with pytest.raises(ParameterError, match="even at scale_bits 0"):
        flux.noise_whitening(np.eye(2) * 1e-30, 5).scale_bits(1.0, 16)


def test_a_coordinate_without_noise_is_dropped_and_the_others_are_whitened():
    s = np.array([[2.0, 0.5, 0.0, 0.3], [0.5, 1.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0],
                  [0.3, 0.0, 0.0, 4.0]])
    white = flux.noise_whitening(s, 50)
    kept = np.array([True, True, False, True])
    assert white.kept.tolist() == kept.tolist() and "3 of 4 coordinates" in white.summary()
    assert not white.matrix[2].any() and not white.matrix[:, 2].any()
    sub = flux.noise_whitening(s[np.ix_(kept, kept)], 50)
    np.testing.assert_allclose(white.matrix[np.ix_(kept, kept)], sub.matrix, rtol=1e-12)


def test_noise_whitening_rejects_bad_input():
    with pytest.raises(InputError, match="finite square"):
        flux.noise_whitening(np.ones((3, 2)), 5)
    with pytest.raises(InputError, match="finite square"):
        flux.noise_whitening(np.full((2, 2), np.nan), 5)
    with pytest.raises(InputError, match="degree of freedom"):
        flux.noise_whitening(np.eye(2), 0)
    with pytest.raises(InputError, match="no descriptor coordinate"):
        flux.noise_whitening(np.zeros((3, 3)), 4)
    white = flux.noise_whitening(np.eye(3) / 3, 4)
    with pytest.raises(InputError, match="expected descriptors of 3"):
        white.apply(np.ones((2, 4)))


def test_block_distances_whitened_secure_equals_plaintext_and_the_float_distances():
    rng = np.random.default_rng(23)
    proj = flux.shared_projection(4, 2, max_value=1.0)
    clients = [_client(rng, int(rng.integers(5, 20)), 3) for _ in range(7)]
    desc = np.stack([flux.descriptor(x, y, proj, 3) for x, y in clients])
    white = flux.noise_whitening(*flux.pool_noise(
        [flux.noise_contribution(x, y, proj, 3, bound=1.0) for x, y in clients]))
    bound = flux.descriptor_bound(proj, 1.0)
    args = dict(n_components=2, n_classes=3, bound=bound, normalization="whitened",
                whitening=white)
    plain, blocks, scales = flux.block_distances(desc, secure=False, **args)
    secure = flux.block_distances(desc, secure=True, parties=np.arange(7) % 3, **args)[0]
    assert blocks is None and scales is None and np.array_equal(secure, plain)
    y = white.apply(desc)
    exact = ((y[:, None] - y[None]) ** 2).sum(-1)
    # quantization to 2^-16 per entry: |error| <= 2 * dim * (2 * |diff| * 2^-16 + 2^-32)
    assert np.abs(plain - exact).max() < 4 * y.shape[1] * np.abs(y).max() * 2.0 ** -15
    with pytest.raises(ParameterError, match="needs whitening"):
        flux.block_distances(desc, **{**args, "whitening": None})
    with pytest.raises(ParameterError, match="needs normalization='whitened'"):
        flux.block_distances(desc, **{**args, "normalization": "none"})
    with pytest.raises(ParameterError, match="mixes every block"):
        flux.block_distances(desc, blocks=[0, 1], **args)


@pytest.mark.timeout(600)
def test_run_flux_whitened_secure_equals_plaintext():
    data = fl.make_federated("digits", shift="label", n_groups=2, clients_per_group=4,
                             new_per_group=1, seed=12)
    model = fl.MLP(data.n_features, 16, data.n_classes)
    runs = secure_and_plain_flux_runs(data, model, 12, **flux.WHITENED_RECIPE)
    secure, plain = runs
    assert flux.WHITENED_RECIPE == {"normalization": "whitened", "k_rule": "calibrated_axis",
                                    "k_alpha": 0.01, "k_references": 199}
    for run in runs:     # the recipe's test: top axis, level 0.01, 199 draws, on this D
        again = calibrated_k(run.distances, statistic="axis_ci", alpha=0.01, references=199,
                             random_state=12)
        assert run.decision.alpha == 0.01 and run.decision.references == 199
        assert run.decision.p_value == again.p_value and run.n_clusters == again.k
    assert secure.decision.p_value == plain.decision.p_value
    assert np.array_equal(secure.distances, plain.distances)
    assert np.array_equal(secure.whitening.matrix, plain.whitening.matrix)
    assert np.array_equal(secure.labels, plain.labels)
    assert np.array_equal(secure.prefix, plain.prefix)
    # the D is the whitened descriptors' (recomputed here from the run's own encoder)
    l = flux.flux_components(data.n_classes, 16)
    proj = flux.shared_projection(16, l, max_value=flux.ACTIVATION_MARGIN *
                                  plain.max_activation)
    desc = flux.client_descriptors(model, plain.global_model, data.clients, proj,
                                   data.n_classes)
    y = plain.whitening.apply(desc)
    exact = ((y[:, None] - y[None]) ** 2).sum(-1)
    assert np.abs(plain.distances - exact).max() < 4 * y.shape[1] * np.abs(y).max() * 2.0 ** -15


def test_cluster_clients_passes_the_level_and_draws_to_the_calibrated_rules():
    rng = np.random.default_rng(19)
    x = np.concatenate([rng.normal(0, 1, (12, 3)), rng.normal(0, 1, (12, 3)) + [2.2, 0, 0]])
    d = ((x[:, None] - x[None]) ** 2).sum(-1)
    for k_rule, statistic in (("calibrated_axis", "axis_ci"), ("calibrated", "ward_gap")):
        for alpha, refs in ((0.01, 199), (0.05, None), (None, 59)):
            level = {} if alpha is None else {"alpha": alpha}
            want = calibrated_k(d, statistic=statistic, references=refs, random_state=3,
                                **level)
            got = flux.cluster_clients(d, k_rule=k_rule, k_alpha=alpha, k_references=refs,
                                       random_state=3)
            assert got.decision.p_value == want.p_value and got.n_clusters == want.k
            assert got.decision.alpha == want.alpha
            assert got.decision.references == want.references
    strict = flux.cluster_clients(d, k_rule="calibrated_axis", k_alpha=0.01, k_references=199)
    assert strict.n_clusters == 1
    assert flux.cluster_clients(d, k_rule="calibrated_axis").n_clusters >= 2
    for k_rule in ("ward", "dbscan"):
        with pytest.raises(ParameterError, match="apply to the calibrated K rules"):
            flux.cluster_clients(d, k_rule=k_rule, k_alpha=0.01)
        with pytest.raises(ParameterError, match="apply to the calibrated K rules"):
            flux.cluster_clients(d, k_rule=k_rule, k_references=99)


def test_a_coordinator_that_lies_about_the_pooled_shape_chooses_the_metric():
    """The option's documented limit (docs/adapters.md): the whitening is a public function
    of the pooled shape, and the clients take the shape from the coordinator. A coordinator
    that reports a shape with almost no noise along one coordinate gets a D whose top
    principal axis is that coordinate's values (up to sign and offset), which the honest
    whitened D does not give it."""
    rng = np.random.default_rng(29)
    proj = flux.shared_projection(4, 2, max_value=1.0)
    clients = [_client(rng, 30, 2) for _ in range(12)]
    desc = np.stack([flux.descriptor(x, y, proj, 2) for x, y in clients])
    pooled, df = flux.pool_noise([flux.noise_contribution(x, y, proj, 2, bound=1.0)
                                  for x, y in clients])
    target = 5                                            # a class-0 mean coordinate
    lie = pooled.copy()
    lie[target, :] = lie[:, target] = 0.0
    lie[target, target] = 1e-12 * np.trace(pooled)
    bound = flux.descriptor_bound(proj, 1.0)

    def recovered(shape):
        white = flux.noise_whitening(shape, 10 ** 9)
        d = flux.block_distances(desc, n_components=2, n_classes=2, bound=bound,
                                 normalization="whitened", whitening=white, secure=False)[0]
        top = mds_embedding(d)[0][:, 0]
        return abs(np.corrcoef(top, desc[:, target])[0, 1])

    assert recovered(lie) > 0.999
    assert recovered(pooled) < 0.9


@pytest.mark.timeout(600)
def test_run_flux_whitened_runs_each_clients_encoder_once_and_matches_the_direct_path():
    """Each client's training rows go through the encoder once (descriptor, activation
    bound and jackknife noise share that pass; before, three passes), and the metric and
    D equal the pieces computed directly from the run's encoder."""
    data = fl.make_federated("digits", shift="label", n_groups=2, clients_per_group=3,
                             new_per_group=1, seed=5)
    base = fl.MLP(data.n_features, 16, data.n_classes)
    rows = {id(c.x_train): 0 for c in list(data.clients) + list(data.new_clients)}

    class Counting(fl.MLP):
        def latents(self, params, x):
            if id(x) in rows:
                rows[id(x)] += 1
            return super().latents(params, x)

    model = Counting(data.n_features, 16, data.n_classes)
    run = flux.run_flux(data, model, seed=5, secure=False, cluster_rounds=1,
                        warmup_rounds=1, **flux.WHITENED_RECIPE)
    assert sorted(rows.values()) == [1] * len(rows)
    encoder = run.global_model
    latents = [base.latents(encoder, c.x_train) for c in data.clients]
    assert run.max_activation == max(float(z.max()) for z in latents + [
        base.latents(encoder, c.x_train) for c in data.new_clients])
    l = flux.flux_components(data.n_classes, 16)
    proj = flux.shared_projection(16, l, max_value=flux.ACTIVATION_MARGIN * run.max_activation)
    bound = flux.descriptor_bound(proj, flux.ACTIVATION_MARGIN * run.max_activation)
    again = flux.whitening_of_clients(latents, [c.y_train for c in data.clients], proj,
                                      data.n_classes, bound=bound)
    assert np.array_equal(again.matrix, run.whitening.matrix)


def test_cluster_clients_passes_the_group_floor_to_the_top_axis_rules():
    """``k_min_group`` reaches calibrated_k's ``min_group`` (one client far from eleven:
    split off with no floor, not with 2) and is refused with every other K rule."""
    rng = np.random.default_rng(3)
    x = rng.normal(size=(12, 4))
    x[0] += [12.0, 0, 0, 0]
    d = ((x[:, None] - x[None]) ** 2).sum(-1)
    for k_rule, statistic in (("calibrated_axis", "axis_ci"),
                              ("calibrated_unimodal", "axis_unimodal")):
        want = calibrated_k(d, statistic=statistic, alpha=0.01, references=199,
                            random_state=4, min_group=2)
        got = flux.cluster_clients(d, k_rule=k_rule, k_alpha=0.01, k_references=199,
                                   k_min_group=2, random_state=4)
        assert got.decision.p_value == want.p_value and got.decision.min_group == 2
        assert got.n_clusters == want.k
    assert flux.cluster_clients(d, k_rule="calibrated_axis", k_alpha=0.01,
                                k_references=199).n_clusters >= 2
    assert flux.cluster_clients(d, k_rule="calibrated_axis", k_alpha=0.01,
                                k_references=199, k_min_group=2).n_clusters == 1
    for k_rule in ("calibrated", "calibrated_denoised", "ward", "dbscan"):
        with pytest.raises(ParameterError, match="k_min_group applies"):
            flux.cluster_clients(d, k_rule=k_rule, k_min_group=2)
    data = fl.make_federated("digits", shift="label", n_groups=2, clients_per_group=3,
                             new_per_group=0, seed=1)
    model = fl.MLP(data.n_features, 8, data.n_classes)
    with pytest.raises(ParameterError, match="k_min_group applies"):
        flux.run_flux(data, model, k_rule="calibrated", k_min_group=2)
    run = flux.run_flux(data, model, seed=1, secure=False, warmup_rounds=1, cluster_rounds=1,
                        k_min_group=2, **flux.WHITENED_RECIPE)
    want = calibrated_k(run.distances, statistic="axis_ci", alpha=0.01, references=199,
                        random_state=1, min_group=2)
    assert run.decision.min_group == 2 and run.decision.statistic == want.statistic
    assert run.decision.p_value == want.p_value and run.n_clusters == want.k
