"""FMCL on protected thermometer signatures: distance, K window, secure == plaintext."""

from __future__ import annotations

import itertools
import math
import re
from fractions import Fraction as F

import numpy as np
import pytest
from sklearn.metrics import adjusted_rand_score

from finite_field import InputError, ParameterError
from omnifc._clustering import average_linkage_labels
from omnifc.adapters import _k_selection, fmcl

pytestmark = pytest.mark.timeout(120)


def _naive_fmcl(means, weights):
    """Independent loop implementation of Algorithm 3 with g = min(1/Omega, 100)."""
    n, c, _ = means.shape
    d = np.zeros((n, n))
    for i, j in itertools.combinations(range(n), 2):
        num = om = 0.0
        for k in range(c):
            m = min(weights[i, k], weights[j, k])
            if m > 0:
                a, b = means[i, k], means[j, k]
                num += m * (1 - a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))
                om += m
        d[i, j] = d[j, i] = (num / (om + 1e-3) * min(1 / om, 100.0)) if om > 0 else np.inf
    off = ~np.eye(n, dtype=bool)
    finite = d[off & np.isfinite(d)]
    d[off & ~np.isfinite(d)] = min(2 * np.percentile(finite, 95), np.percentile(finite, 99))
    return d


@pytest.fixture(scope="module")
def three_domains():
    clients, domains = fmcl.synthetic_domains(seed=0)   # 3 x 30 clients, Dirichlet(0.1)
    sig = [fmcl.signature(x, y, 10) for x, y in clients]
    means = np.stack([s[0] for s in sig])
    weights = np.stack([s[1] for s in sig])
    return clients, domains, means, weights


def test_direct_distance_equals_naive_algorithm(three_domains):
    _, _, means, weights = three_domains
    sub = slice(0, 40)
    expected = _naive_fmcl(means[sub], weights[sub])
    assert np.isinf(fmcl.fmcl_distances(means[sub], weights[sub], fill=False)).any()  # fills used
    np.testing.assert_allclose(fmcl.fmcl_distances(means[sub], weights[sub], fill="paper"), expected,
                               rtol=1e-12, atol=1e-12)


def test_round_weights_largest_remainder():
    k = fmcl.round_weights([0.333, 0.333, 0.334, 0.0], 10)
    assert k.sum() == 10 and k[3] == 0
    w = np.random.Generator(np.random.PCG64(1)).dirichlet(0.1 * np.ones(10), size=50)
    for row in w:
        k = fmcl.round_weights(row, 50)
        assert k.sum() == 50 and np.all(np.abs(k / 50 - row) < 1 / 50)


def test_thermometer_identity_is_exact_for_rounded_weights(three_domains):
    _, _, means, weights = three_domains
    q = 40
    sub = slice(0, 30)
    rounded = np.stack([fmcl.round_weights(w, q) / q for w in weights[sub]])
    rows = [fmcl.thermometer_rows(m, w, q) for m, w in zip(means[sub], weights[sub])]
    z = np.stack([r[0] for r in rows])
    t = np.stack([r[1] for r in rows])
    sq = lambda x: ((x[:, None] - x[None]) ** 2).sum(-1)   # noqa: E731
    got = fmcl.fmcl_from_thermometer(sq(z), sq(t), q, fill=False)
    want = fmcl.fmcl_distances(means[sub], rounded, fill=False)
    finite = np.isfinite(want)
    assert np.array_equal(finite, np.isfinite(got))
    np.testing.assert_allclose(got[finite], want[finite], rtol=1e-9, atol=1e-12)


def test_secure_thermometer_equals_plaintext_thermometer():
    clients, _ = fmcl.synthetic_domains(clients_per_domain=3, samples=200, seed=2)
    sig = [fmcl.signature(x, y, 10) for x, y in clients]
    means, weights = np.stack([s[0] for s in sig]), np.stack([s[1] for s in sig])
    secure = fmcl.secure_thermometer_distances(means, weights, resolution=20,
                                               parties=np.arange(9) % 3)
    plain = fmcl.secure_thermometer_distances(means, weights, resolution=20, secure=False)
    assert np.array_equal(secure, plain)
    a, b = fmcl.fmcl_server(secure), fmcl.fmcl_server(plain)
    assert np.array_equal(a.labels, b.labels) and a.n_clusters == b.n_clusters


@pytest.mark.slow
def test_domains_recovered_and_kmeans_on_means_is_worse(three_domains):
    clients, domains, means, weights = three_domains
    direct = fmcl.fmcl_server(fmcl.fmcl_distances(means, weights))
    assert direct.window[0] <= 3 <= direct.window[1]
    assert direct.n_clusters == 3
    assert adjusted_rand_score(domains, direct.labels) >= 0.9
    baseline = fmcl.kmeans_on_mean_embeddings(np.stack([x.mean(0) for x, _ in clients]), 3)
    assert adjusted_rand_score(domains, baseline) < 0.6   # measured 0.24 (seed 0)
    # The thermometer path (what the secure path computes, exactly; q = 500).
    therm = fmcl.fmcl_server(fmcl.secure_thermometer_distances(means, weights, secure=False))
    assert therm.window[0] <= 3 <= therm.window[1]
    assert adjusted_rand_score(domains, therm.labels) >= 0.9


def test_thermometer_path_within_documented_bound(three_domains):
    _, _, means, weights = three_domains
    q = fmcl.DEFAULT_RESOLUTION
    direct = fmcl.fmcl_distances(means, weights, fill=False)
    therm = fmcl.secure_thermometer_distances(means, weights, resolution=q, secure=False)
    raw = fmcl.fmcl_distances(means, weights, fill=True)   # same fill rule, for finite pairs
    bound = fmcl.thermometer_error_bound(means, weights, resolution=q)
    checked = np.isfinite(bound) & np.isfinite(direct)
    assert checked.mean() > 0.8                            # most pairs have overlap > Delta
    assert np.all(np.abs(therm - raw)[checked] <= bound[checked])


def test_k_window_and_edge_cases():
    assert fmcl.k_window(0.2) == (1, 3) and fmcl.k_window(0.5) == (2, 6)
    assert fmcl.k_window(0.7) == (3, 10)
    two = fmcl.fmcl_server(np.array([[0.0, 1.0], [1.0, 0.0]]))
    assert two.n_clusters == 1 and two.labels.tolist() == [0, 0]
    none_shared = np.full((4, 4), np.inf)
    np.fill_diagonal(none_shared, 0.0)
    filled = fmcl.fill_missing(none_shared)
    assert filled[0, 1] == 1.0 and fmcl.coefficient_of_variation(filled) == 0.0
    flat = fmcl.fmcl_server(filled, rule="paper")
    assert flat.n_clusters == 1            # window (1, 3); no split has a positive silhouette
    # the silhouette rule never answers K = 1; the default (tested) rule does: every
    # permutation of an all-equal matrix is the matrix itself, so p = 1
    assert fmcl.fmcl_server(filled, rule="silhouette").n_clusters == 2
    assert fmcl.fmcl_server(filled).n_clusters == 1
    assert fmcl.fmcl_server(np.array([[0.0, 1.0], [1.0, 0.0]]), rule="silhouette").n_clusters == 1
    assert fmcl.coefficient_of_variation(np.zeros((3, 3))) == 0.0


def _signatures(clients):
    sig = [fmcl.signature(x, y, 10) for x, y in clients]
    return np.stack([s[0] for s in sig]), np.stack([s[1] for s in sig])


@pytest.mark.parametrize("n_domains", [2, 3])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_auto_k_finds_planted_two_and_three_domains_with_defaults(n_domains, seed):
    clients, domains = fmcl.synthetic_domains(n_domains=n_domains, clients_per_domain=10,
                                              samples=300, seed=seed)
    means, weights = _signatures(clients)
    result = fmcl.fmcl_server(fmcl.fmcl_distances(means, weights))   # all defaults
    assert result.n_clusters == n_domains
    assert adjusted_rand_score(domains, result.labels) == 1.0
    # The paper's rule on the same signatures: D_big fill and the CV window. Planted K = 2
    # gives CV > 0.70, so its window (3, 10) cannot contain 2.
    paper = fmcl.fmcl_server(fmcl.fmcl_distances(means, weights, fill="paper"), rule="paper")
    if n_domains == 2:
        assert paper.window == (3, 10) and paper.n_clusters != 2


@pytest.mark.parametrize("shift", ["offset"])
def test_auto_k_other_shift_types(shift):
    # permutation (concept shift) is weaker (K right in 2-5 of 5 seeds per K, see
    # docs/adapters.md): a client whose few classes are fixed points of the permutation
    # looks like the other domain.
    clients, domains = fmcl.synthetic_domains(n_domains=3, clients_per_domain=10, samples=300,
                                              shift=shift, seed=3)
    means, weights = _signatures(clients)
    result = fmcl.fmcl_server(fmcl.fmcl_distances(means, weights))
    assert result.n_clusters == 3 and adjusted_rand_score(domains, result.labels) == 1.0


def test_geodesic_fill_routes_missing_pairs_through_shared_classes():
    d = np.array([[0.0, 0.1, np.inf, 5.0], [0.1, 0, 0.2, 5.0], [np.inf, 0.2, 0, 5.0],
                  [5.0, 5.0, 5.0, 0]])
    filled = fmcl.geodesic_fill(d)
    assert filled[0, 2] == pytest.approx(0.3) and filled[2, 0] == filled[0, 2]
    assert fmcl.fill_missing(d)[0, 2] == pytest.approx(5.0)   # the paper's D_big
    apart = np.array([[0.0, np.inf], [np.inf, 0.0]])          # no path: D_big (all missing: 1)
    assert fmcl.geodesic_fill(apart)[0, 1] == 1.0


def test_exact_resolution_makes_weight_rounding_the_identity():
    assert fmcl.exact_resolution([120, 120, 80]) == 240
    with pytest.raises(ValueError, match="limit"):
        fmcl.exact_resolution([997, 991], limit=1000)
    counts = np.array([[3, 0, 117], [60, 60, 0], [1, 1, 118]])
    for row in counts:
        assert fmcl.round_weights(row / row.sum(), 240).tolist() == (row * 2).tolist()


@pytest.mark.parametrize("n_domains,seed", [(2, 0), (3, 1)])
def test_secure_fmcl_is_lossless_on_the_quantized_signature(n_domains, seed):
    clients, domains = fmcl.synthetic_domains(n_domains=n_domains, clients_per_domain=8,
                                              samples=120, seed=seed)
    means, weights = _signatures(clients)
    q = fmcl.exact_resolution([len(y) for _, y in clients])          # 120: weights exact
    secure = fmcl.secure_thermometer_distances(means, weights, resolution=q,
                                               parties=np.arange(len(clients)) % 3)
    # bit for bit: the direct formula on the quantized signature, computed from integers
    assert np.array_equal(secure, fmcl.quantized_fmcl_distances(means, weights, resolution=q))
    # against the unquantized direct distance: the stated bound, and the same labels
    direct_raw = fmcl.fmcl_distances(means, weights, fill=False)
    quant_raw = fmcl.quantized_fmcl_distances(means, weights, resolution=q, fill=False)
    finite = np.isfinite(direct_raw)
    assert np.array_equal(finite, np.isfinite(quant_raw))            # same missing pairs
    bound = fmcl.thermometer_error_bound(means, weights, resolution=q)
    assert np.all(np.abs(quant_raw[finite] - direct_raw[finite]) <= bound[finite])
    a = fmcl.fmcl_server(secure)
    b = fmcl.fmcl_server(fmcl.fmcl_distances(means, weights))
    assert a.n_clusters == b.n_clusters == n_domains
    assert np.array_equal(a.labels, b.labels)


@pytest.mark.parametrize("shift,n_groups", [("feature", 3), ("concept", 2)])
def test_fmcl_end_to_end_federated_secure_equals_plaintext(shift, n_groups):
    from omnifc import fl

    data = fl.make_federated("digits", shift=shift, n_groups=n_groups, clients_per_group=4,
                             train_samples=150, test_samples=100, seed=0)
    secure = fmcl.run_federated_fmcl(data, rounds=8, secure=True)
    plain = fmcl.run_federated_fmcl(data, rounds=8, secure=False)
    assert secure["resolution"] == 150                      # exact class weights
    assert np.array_equal(secure["distances"], plain["distances"])
    assert np.array_equal(secure["labels"], plain["labels"])
    assert all(np.array_equal(a, b) for a, b in zip(secure["run"].models, plain["run"].models))
    assert secure["n_clusters"] == n_groups
    assert adjusted_rand_score(data.groups, secure["labels"]) == 1.0
    model = fl.SoftmaxRegression(data.n_features, data.n_classes)
    fedavg = fl.run_federated(data.clients, [model.init(0)], rounds=8,
                              local_train=fl.sgd_trainer(model, epochs=2, batch_size=20,
                                                         learning_rate=0.5),
                              evaluate=fl.accuracy_evaluator(model), seed=0)
    # measured (seed 0): feature 0.93 vs 0.68, concept 0.94 vs 0.40
    assert secure["accuracy"] > fedavg.history[-1].metrics["accuracy"] + 0.1


# -- folded in from test_fmcl_bites.py ----------------------------------------------------
# omnifc.adapters.fmcl pinned against independent expectations (mutation testing, issue 14).
#
# Every expectation here is recomputed outside the module: the FMCL formulas of the module
# docstring and docs/adapters.md ("FMCL") in exact Python fractions on small hand-made
# signatures whose unit class means are rational ((3, 4) / 5, (5, 12) / 13, ...), the
# thermometer codes and the anchored Gram matrices with Python integers, percentiles by
# linear interpolation in plain Python, shortest paths by Floyd-Warshall in plain Python,
# average linkage with scipy, the silhouette by its definition.

EPS = F(1, 1000)      # the paper's eps (docs/adapters.md)
BETA = F(100)         # cap of the inverse-overlap factor g


# ----------------------------------------------------------------------------- references

def _g(omega):
    """g(Omega) = min(Omega^-1, 100) (alpha = 1, beta = 100)."""
    return min(1 / omega, BETA)


def _cos(a, b):
    """Cosine of two vectors whose norms are rational (exact); a zero vector gives None."""
    na = sum(F(x) ** 2 for x in a)
    nb = sum(F(x) ** 2 for x in b)
    if na == 0 or nb == 0:
        return None
    root = _sqrt(na * nb)
    return sum(F(x) * F(y) for x, y in zip(a, b)) / root


def _sqrt(x):
    r = F(math.isqrt(x.numerator), math.isqrt(x.denominator))
    assert r * r == x, "test data must have rational norms"
    return r


def _pair(wi, wj, mi, mj):
    """(N, Omega) of one pair: N = sum_c m_c (1 - cos_c), Omega = sum_c m_c."""
    num = om = F(0)
    for c in range(len(wi)):
        m = min(F(wi[c]), F(wj[c]))
        if m > 0:
            num += m * (1 - _cos(mi[c], mj[c]))
            om += m
    return num, om


def _combine(num, om):
    return float(num / (om + EPS) * _g(om)) if om > 0 else math.inf


def _fmcl_exact(means, weights):
    """The FMCL distance matrix (no fill; inf where no class is shared) in fractions."""
    n = len(weights)
    d = [[0.0] * n for _ in range(n)]
    for i, j in itertools.combinations(range(n), 2):
        d[i][j] = d[j][i] = _combine(*_pair(weights[i], weights[j], means[i], means[j]))
    return np.array(d)


def _percentile(values, p):
    """numpy's default ("linear") percentile, in plain Python."""
    s = sorted(values)
    rank = F(p, 100) * (len(s) - 1)
    lo = math.floor(rank)
    hi = min(lo + 1, len(s) - 1)
    return float(F(s[lo]) + (rank - lo) * (F(s[hi]) - F(s[lo])))


def _d_big(d):
    n = len(d)
    finite = [d[i][j] for i in range(n) for j in range(n) if i != j and math.isfinite(d[i][j])]
    if not finite:
        return 1.0
    return min(2 * _percentile(finite, 95), _percentile(finite, 99))


def _geodesic(d):
    """omnifc's fill in plain Python: each inf entry -> its shortest path (Floyd-Warshall)
    through the finite entries; finite entries kept; no path -> D_big of the result."""
    n = len(d)
    p = [[float(d[i][j]) for j in range(n)] for i in range(n)]
    for k in range(n):
        for i in range(n):
            for j in range(n):
                if p[i][k] + p[k][j] < p[i][j]:
                    p[i][j] = p[i][k] + p[k][j]
    out = [[float(d[i][j]) if math.isfinite(d[i][j]) else p[i][j] for j in range(n)]
           for i in range(n)]
    big = _d_big(out)
    return np.array([[v if math.isfinite(v) else big for v in row] for row in out])


def _largest_remainder(weights, q):
    """Largest-remainder rounding in fractions (ties: the lower index first)."""
    w = [F(x) for x in weights]
    scaled = [x / sum(w) * q for x in w]
    k = [math.floor(x) for x in scaled]
    order = sorted(range(len(w)), key=lambda c: (-(scaled[c] - k[c]), c))
    for c in order[:q - sum(k)]:
        k[c] += 1
    return k


# Hand-made signatures: 4 clients, 3 classes, d = 2; every unit mean is rational.
MEANS = np.array([
    [[3, 4], [1, 0], [0, 0]],          # client 0: classes 0, 1
    [[8, 6], [0, 5], [12, 5]],         # client 1: all three
    [[0, 0], [0, 0], [5, 12]],         # client 2: class 2 only
    [[1, 0], [0, 0], [0, 3]],          # client 3: classes 0 (weight 0.004) and 2
], dtype=np.float64)
WEIGHTS = np.array([
    [0.5, 0.5, 0.0],
    [0.25, 0.25, 0.5],
    [0.0, 0.0, 1.0],
    [0.004, 0.0, 0.996],
])


# ----------------------------------------------------------------------------- client side

def test_signature_is_class_means_and_frequencies():
    e = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0], [-1.0, 0.0]])
    y = np.array([0, 0, 2, 0])
    means, weights = fmcl.signature(e, y, 4)
    assert means.tolist() == [[1.0, 2.0], [0.0, 0.0], [5.0, 6.0], [0.0, 0.0]]
    assert weights.tolist() == [0.75, 0.0, 0.25, 0.0]
    assert means.shape == (4, 2) and weights.shape == (4,)
    # integer embeddings are averaged as floats, not truncated
    means, _ = fmcl.signature(np.array([[1, 0], [2, 0]]), np.array([1, 1]), 2)
    assert means.tolist() == [[0.0, 0.0], [1.5, 0.0]]
    # labels at or beyond n_classes are not counted
    means, weights = fmcl.signature(e, np.array([0, 1, 1, 2]), 2)
    assert means.tolist() == [[1.0, 2.0], [4.0, 5.0]]
    assert weights.tolist() == [1 / 3, 2 / 3]


@pytest.mark.parametrize("e,y,shapes", [
    (np.ones(3), np.zeros(3, dtype=int), "(3,) and (3,)"),
    (np.ones((3, 2)), np.zeros(2, dtype=int), "(3, 2) and (2,)"),
    (np.ones((0, 2)), np.zeros(0, dtype=int), "(0, 2) and (0,)"),
])
def test_signature_refuses_bad_shapes(e, y, shapes):
    with pytest.raises(InputError, match=re.escape(
            f"expected embeddings (N, d) with N >= 1 labels, got {shapes}")):
        fmcl.signature(e, y, 2)


@pytest.mark.parametrize("weights,q", [
    ([0.25, 0.75], 4),                  # on the grid
    ([1.0, 3.0], 4),                    # unnormalized: divided by the sum first
    ([1.0, 3.0, 2.0], 3),               # scaled 0.5, 1.5, 1.0: largest remainder -> 1, 1, 1
    ([0.1, 0.2, 0.7], 3),
    ([1.0, 1.0, 1.0], 2),               # ties: the lower index first
    ([0.333, 0.333, 0.334, 0.0], 10),
    ([0.4, 0.6], 1),
    ([5.0, 0.0, 2.0, 2.0, 1.0], 7),
])
def test_round_weights_is_largest_remainder(weights, q):
    k = fmcl.round_weights(weights, q)
    assert k.dtype == np.int64
    assert k.tolist() == _largest_remainder(weights, q)
    assert sum(k.tolist()) == q


def test_round_weights_default_resolution_is_500():
    k = fmcl.round_weights([1.0, 2.0])
    assert k.tolist() == _largest_remainder([1, 2], 500) == [167, 333]


@pytest.mark.parametrize("q", [0, -3])
def test_round_weights_refuses_resolution_below_one(q):
    with pytest.raises(ParameterError, match=re.escape(f"resolution must be >= 1, got {q}")):
        fmcl.round_weights([0.5, 0.5], q)


def test_exact_resolution_is_the_lcm_up_to_the_limit():
    assert fmcl.exact_resolution([4, 6, 10]) == math.lcm(4, 6, 10) == 60
    assert fmcl.exact_resolution(np.array([[3], [5]])) == 15
    assert fmcl.exact_resolution([7]) == 7
    assert fmcl.exact_resolution([4096]) == 4096                 # the default limit, inclusive
    assert fmcl.exact_resolution([8, 12], limit=24) == 24
    message = ("the least common multiple of the sample counts exceeds limit={}; use a fixed "
               "resolution (weights rounded, error bounded by thermometer_error_bound)")
    with pytest.raises(ParameterError, match=re.escape(message.format(4096))):
        fmcl.exact_resolution([4097])
    with pytest.raises(ParameterError, match=re.escape(message.format(23))):
        fmcl.exact_resolution([8, 12], limit=23)
    with pytest.raises(ParameterError, match=re.escape(message.format(34))):
        fmcl.exact_resolution([5, 7], limit=34)
    with pytest.raises(ParameterError, match=re.escape(
            "sample counts must be positive integers, got []")):
        fmcl.exact_resolution([])
    with pytest.raises(ParameterError, match=re.escape(
            "sample counts must be positive integers, got [3, 0]")):
        fmcl.exact_resolution([3, 0])
    assert fmcl.exact_resolution([1, 1]) == 1


def _thermometer(means, weights, q):
    """t and z of one client in plain Python (class-major, slot, then coordinate)."""
    k = _largest_remainder(weights, q)
    t, z = [], []
    for c, mean in enumerate(means):
        norm = math.sqrt(sum(float(x) ** 2 for x in mean))
        for slot in range(q):
            on = slot < k[c]
            t.append(1.0 if on else 0.0)
            z.extend(float(x) / norm if on else 0.0 for x in mean)
    return z, t


def test_thermometer_rows_hand_made():
    z, t = fmcl.thermometer_rows([[3.0, 4.0], [0.0, 0.0], [0.0, 2.0]], [0.5, 0.0, 0.5], 4)
    assert t.tolist() == [1, 1, 0, 0, 0, 0, 0, 0, 1, 1, 0, 0]
    assert z.tolist() == ([0.6, 0.8] * 2 + [0, 0] * 2       # class 0: 2 of 4 slots
                          + [0, 0] * 4                      # class 1: weight 0
                          + [0.0, 1.0] * 2 + [0, 0] * 2)    # class 2: 2 of 4 slots
    for means, weights in zip(MEANS, WEIGHTS):
        z, t = fmcl.thermometer_rows(means, weights, 6)
        want_z, want_t = _thermometer(means, weights, 6)
        assert t.tolist() == want_t and z.tolist() == want_z
    z, t = fmcl.thermometer_rows(MEANS[1], WEIGHTS[1])                # q = 500
    assert t.shape == (3 * 500,) and z.shape == (3 * 500 * 2,)
    assert t.sum() == 500


def test_thermometer_rows_refuses_a_weighted_class_without_mean():
    with pytest.raises(InputError, match=r"^class 1 has weight but a zero mean embedding$"):
        fmcl.thermometer_rows([[1.0, 0.0], [0.0, 0.0]], [0.5, 0.5], 4)
    # a class whose weight rounds to 0 needs no mean
    z, t = fmcl.thermometer_rows([[1.0, 0.0], [0.0, 0.0]], [0.99, 0.01], 4)
    assert t.tolist() == [1, 1, 1, 1, 0, 0, 0, 0]


# ----------------------------------------------------------------------------- distances

def test_fmcl_distances_against_fractions():
    want = _fmcl_exact(MEANS, WEIGHTS)
    got = fmcl.fmcl_distances(MEANS, WEIGHTS, fill=False)
    assert np.array_equal(np.isinf(got), np.isinf(want))
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=0)
    # the pieces: (0, 1) has Omega = 1/2 (g = 2), (0, 3) Omega = 0.004 (g capped at 100)
    assert want[0, 1] == pytest.approx(0.26 / 0.501 * 2, rel=1e-12)
    assert want[0, 3] == pytest.approx(0.004 * 0.4 / 0.005 * 100, rel=1e-12)
    assert math.isinf(want[0, 2]) and np.all(np.diag(got) == 0)


def test_fmcl_distances_fills():
    raw = _fmcl_exact(MEANS, WEIGHTS)
    geo = _geodesic(raw)
    default = fmcl.fmcl_distances(MEANS, WEIGHTS)
    np.testing.assert_allclose(default, geo, rtol=1e-12)
    np.testing.assert_allclose(fmcl.fmcl_distances(MEANS, WEIGHTS, fill="geodesic"), geo,
                               rtol=1e-12)
    np.testing.assert_allclose(fmcl.fmcl_distances(MEANS, WEIGHTS, fill=True), geo, rtol=1e-12)
    paper = raw.copy()
    paper[0, 2] = paper[2, 0] = _d_big(raw)
    np.testing.assert_allclose(fmcl.fmcl_distances(MEANS, WEIGHTS, fill="paper"), paper,
                               rtol=1e-12)
    assert math.isinf(fmcl.fmcl_distances(MEANS, WEIGHTS, fill=None)[0, 2])
    with pytest.raises(ParameterError, match=re.escape(
            "fill must be 'geodesic', 'paper' or False, got 'Paper'")):
        fmcl.fmcl_distances(MEANS, WEIGHTS, fill="Paper")


def test_fmcl_from_thermometer_against_python_integers():
    q = 6
    rounded = [[F(k, q) for k in _largest_remainder(w, q)] for w in WEIGHTS]
    rows = [_thermometer(m, w, q) for m, w in zip(MEANS, WEIGHTS)]
    sq = lambda a, b: float(sum((F(x) - F(y)) ** 2 for x, y in zip(a, b)))  # noqa: E731
    d_z = np.array([[sq(a[0], b[0]) for b in rows] for a in rows])
    d_t = np.array([[sq(a[1], b[1]) for b in rows] for a in rows])
    got = fmcl.fmcl_from_thermometer(d_z, d_t, q, fill=False)
    want = _fmcl_exact(MEANS, rounded)
    assert np.array_equal(np.isinf(got), np.isinf(want))
    np.testing.assert_allclose(got, want, rtol=1e-9)
    # the weight 0.004 of client 3 rounds to 0 at q = 6: (0, 3) lost its only shared class
    assert math.isinf(got[0, 3])
    np.testing.assert_allclose(fmcl.fmcl_from_thermometer(d_z, d_t, q), _geodesic(want),
                               rtol=1e-9)


def test_fmcl_from_thermometer_overlap_snapping_and_clamping():
    q = 10
    # Omega = 1 - d_t / (2 q); N = (d_z - d_t) / (2 q)
    omega = np.array([[1.0, 0.04, 0.06, 0.5], [0.04, 1.0, 0.5, 0.5],
                      [0.06, 0.5, 1.0, 0.5], [0.5, 0.5, 0.5, 1.0]])
    n = np.array([[0.0, 0.01, 0.01, 0.1], [0.01, 0.0, 0.2, -0.05],
                  [0.01, 0.2, 0.0, 0.0], [0.1, -0.05, 0.0, 0.0]])
    d_t = 2 * q * (1 - omega)
    d_z = d_t + 2 * q * n
    got = fmcl.fmcl_from_thermometer(d_z, d_t, q, fill=False)
    assert math.isinf(got[0, 1])                      # 0.04 < 0.5 / q: snapped to 0
    assert got[0, 2] == pytest.approx(0.01 / 0.061 / 0.06, rel=1e-9)   # 0.06 > 0.5 / q: kept
    assert got[1, 3] == 0.0                           # a negative N is clamped to 0
    assert got[0, 3] == pytest.approx(0.1 / 0.501 * 2, rel=1e-9)
    assert got[1, 2] == pytest.approx(0.2 / 0.501 * 2, rel=1e-9)
    assert got[2, 3] == 0.0 and np.all(np.diag(got) == 0)
    # an overlap below 0 (d_t > 2 q) is clipped to 0: no shared class
    far = fmcl.fmcl_from_thermometer(np.array([[0.0, 30.0], [30.0, 0.0]]),
                                     np.array([[0.0, 25.0], [25.0, 0.0]]), q, fill=False)
    assert math.isinf(far[0, 1])


# ----------------------------------------------------------------------------- fills

def _symmetric(n, entries):
    d = np.zeros((n, n))
    for (i, j), v in entries.items():
        d[i, j] = d[j, i] = v
    return d


def test_fill_missing_is_min_of_twice_p95_and_p99_of_finite_off_diagonals():
    inf = math.inf
    # light tail: P99 < 2 P95, so D_big = P99 (the zero diagonal is not counted)
    light = _symmetric(4, {(0, 1): 1.0, (0, 2): 2.0, (0, 3): 3.0, (1, 2): 4.0, (1, 3): 5.0,
                           (2, 3): inf})
    got = fmcl.fill_missing(light)
    want = _percentile([1, 1, 2, 2, 3, 3, 4, 4, 5, 5], 99)
    assert want < 2 * _percentile([1, 1, 2, 2, 3, 3, 4, 4, 5, 5], 95)
    assert got[2, 3] == got[3, 2] == pytest.approx(want, rel=1e-15)
    assert got[0, 3] == 3.0 and np.all(np.diag(got) == 0)
    assert math.isinf(light[2, 3])                      # the input is not modified
    # heavy tail: 2 P95 < P99, so D_big = 2 P95
    values = {(i, j): 1.0 for i, j in itertools.combinations(range(7), 2)}
    values[(0, 1)] = 1000.0
    values[(5, 6)] = inf
    heavy = _symmetric(7, values)
    finite = [heavy[i, j] for i in range(7) for j in range(7)
              if i != j and math.isfinite(heavy[i, j])]
    p95, p99 = _percentile(finite, 95), _percentile(finite, 99)
    assert 2 * p95 < p99
    assert fmcl.fill_missing(heavy)[5, 6] == pytest.approx(2 * p95, rel=1e-12)
    # nothing missing: unchanged; nothing finite: 1
    assert np.array_equal(fmcl.fill_missing(_symmetric(3, {(0, 1): 2.0, (0, 2): 7.0,
                                                           (1, 2): 0.5})),
                          _symmetric(3, {(0, 1): 2.0, (0, 2): 7.0, (1, 2): 0.5}))
    nothing = np.full((3, 3), inf)
    np.fill_diagonal(nothing, 0.0)
    ones = np.ones((3, 3))
    np.fill_diagonal(ones, 0.0)
    assert np.array_equal(fmcl.fill_missing(nothing), ones)


def test_geodesic_fill_against_floyd_warshall():
    inf = math.inf
    d = _symmetric(5, {(0, 1): 1.0, (0, 2): inf, (0, 3): 4.0, (0, 4): inf, (1, 2): 2.5,
                       (1, 3): inf, (1, 4): inf, (2, 3): 0.5, (2, 4): inf, (3, 4): inf})
    got = fmcl.geodesic_fill(d)
    want = _geodesic(d)
    np.testing.assert_allclose(got, want, rtol=1e-15)
    assert got[0, 2] == 3.5 and got[1, 3] == 3.0 and got[0, 3] == 4.0   # finite ones kept
    # client 4 shares no class with anyone: D_big of the filled matrix
    assert got[0, 4] == pytest.approx(_d_big(want), rel=1e-15) and got[4, 0] == got[0, 4]
    assert math.isinf(d[0, 2])                          # the input is not modified
    # nothing missing: the same values, a copy
    full = _symmetric(3, {(0, 1): 1.0, (0, 2): 9.0, (1, 2): 2.0})
    out = fmcl.geodesic_fill(full)
    assert np.array_equal(out, full) and out is not full
    out[0, 1] = 5.0
    assert full[0, 1] == 1.0


@pytest.mark.parametrize("short", [0.0, 1e-9])
def test_geodesic_fill_walks_through_zero_length_edges(short):
    # Two identical clients (distance 0) or nearly identical ones are an edge, not a missing
    # link. (A real bug found here: a dense csgraph reads entries within 1e-8 of 0 as "no
    # edge", so the path went 0 -> 3 -> 2 = 12, and the old "smallest positive length" fix
    # for exact zeros did not help.)
    d = _symmetric(4, {(0, 1): short, (0, 2): math.inf, (0, 3): 6.0, (1, 2): 0.5,
                       (1, 3): 6.0, (2, 3): 6.0})
    got = fmcl.geodesic_fill(d)
    assert got[0, 2] == got[2, 0] == short + 0.5
    assert got[0, 1] == short and np.all(np.diag(got) == 0)


# ----------------------------------------------------------------------------- K selection

def test_coefficient_of_variation_of_off_diagonals():
    d = _symmetric(3, {(0, 1): 1.0, (0, 2): 3.0, (1, 2): 2.0})
    values = [1, 1, 3, 3, 2, 2]
    mean = F(sum(values), len(values))
    var = sum((F(v) - mean) ** 2 for v in values) / len(values)      # population variance
    assert fmcl.coefficient_of_variation(d) == pytest.approx(math.sqrt(var) / float(mean),
                                                             rel=1e-15)
    d[0, 0] = 100.0                                     # the diagonal is ignored
    assert fmcl.coefficient_of_variation(d) == pytest.approx(math.sqrt(var) / float(mean),
                                                             rel=1e-15)
    assert type(fmcl.coefficient_of_variation(d)) is float
    assert fmcl.coefficient_of_variation(np.zeros((1, 1))) == 0.0      # no off-diagonal
    assert fmcl.coefficient_of_variation(np.zeros((3, 3))) == 0.0      # mean 0


@pytest.mark.parametrize("cv,window", [(0.0, (1, 3)), (0.3499, (1, 3)), (0.35, (2, 6)),
                                       (0.6999, (2, 6)), (0.70, (3, 10)), (2.0, (3, 10))])
def test_k_window_thresholds(cv, window):
    assert fmcl.k_window(cv) == window


def _partition(labels):
    """A labelling as a set of frozensets (independent of the label numbering)."""
    groups = {}
    for i, c in enumerate(np.asarray(labels).tolist()):
        groups.setdefault(c, set()).add(i)
    return {frozenset(g) for g in groups.values()}


def _scipy_average(d, k):
    from scipy.cluster.hierarchy import fcluster, linkage
    from scipy.spatial.distance import squareform
    return fcluster(linkage(squareform(d, checks=False), method="average"), k,
                    criterion="maxclust")


def _silhouette(d, labels):
    """The silhouette by its definition (a: mean intra distance, b: nearest other cluster)."""
    labels = list(labels)
    n = len(labels)
    total = 0.0
    for i in range(n):
        own = [d[i][j] for j in range(n) if j != i and labels[j] == labels[i]]
        if not own:
            continue                                    # a singleton scores 0
        a = sum(own) / len(own)
        b = min(sum(d[i][j] for j in range(n) if labels[j] == c)
                / sum(1 for j in range(n) if labels[j] == c)
                for c in set(labels) if c != labels[i])
        total += (b - a) / max(a, b)
    return total / n


# Six clients, no tied distances; average and single linkage disagree at K = 3.
CHAIN = np.array([[0.0, 1.14, 2.31, 3.62, 6.2, 6.92], [1.14, 0.0, 1.3, 2.5, 5.1, 5.85],
                  [2.31, 1.3, 0.0, 1.43, 3.91, 4.61], [3.62, 2.5, 1.43, 0.0, 2.62, 3.42],
                  [6.2, 5.1, 3.91, 2.62, 0.0, 0.92], [6.92, 5.85, 4.61, 3.42, 0.92, 0.0]])


def test_average_linkage_and_silhouettes_against_scipy_and_the_definition():
    scores, labelings = _k_selection._silhouettes(CHAIN, [1, 2, 3, 4])
    assert sorted(scores) == [1, 2, 3, 4]
    assert labelings[1].tolist() == [0] * 6 and scores[1] == 0.0
    for k in (2, 3, 4):
        assert _partition(labelings[k]) == _partition(_scipy_average(CHAIN, k))
        assert labelings[k].dtype == np.int64
        assert scores[k] == pytest.approx(_silhouette(CHAIN, labelings[k]), rel=1e-12)
        assert type(scores[k]) is float
    assert _partition(labelings[3]) == {frozenset({0, 1}), frozenset({2, 3}),
                                        frozenset({4, 5})}   # single linkage: {0, 1, 2}, {3}
    assert _partition(average_linkage_labels(CHAIN, 3)) == _partition(labelings[3])
    assert average_linkage_labels(CHAIN, 1).tolist() == [0] * 6
    assert average_linkage_labels(CHAIN, 1).dtype == np.int64


def test_choose_clusters_silhouette_rule_against_the_definition():
    labels, k, window, scores = fmcl.choose_clusters(CHAIN, rule="silhouette")
    assert window == (2, 5)                             # 2..min(10, n - 1)
    assert sorted(scores) == [2, 3, 4, 5]
    best = max(scores.values())
    assert k == min(key for key, v in scores.items() if v == best)
    for key in scores:
        assert scores[key] == pytest.approx(
            _silhouette(CHAIN, _scipy_average(CHAIN, key)), rel=1e-12)
    assert _partition(labels) == _partition(_scipy_average(CHAIN, k))
    labels, k, window, scores = fmcl.choose_clusters(CHAIN, rule="silhouette", max_clusters=3)
    assert window == (2, 3) and sorted(scores) == [2, 3]
    _, _, window, scores = fmcl.choose_clusters(CHAIN, rule="silhouette", max_clusters=1)
    assert window == (2, 2) and sorted(scores) == [2]
    result = fmcl.fmcl_server(CHAIN, rule="silhouette", max_clusters=3)
    assert result.window == (2, 3) and sorted(result.silhouettes) == [2, 3]


@pytest.mark.parametrize("rule", ["silhouette", "paper"])
def test_choose_clusters_with_fewer_than_three_clients(rule):
    for d in (np.zeros((1, 1)), np.array([[0.0, 4.0], [4.0, 0.0]])):
        n = d.shape[0]
        labels, k, window, scores = fmcl.choose_clusters(d, rule=rule)
        assert labels.tolist() == [0] * n and labels.dtype == np.int64
        assert k == 1 and scores == {1: 0.0}
        assert window == ((2, 2) if rule == "silhouette" else fmcl.k_window(0.0))


def test_choose_clusters_refuses_an_unknown_rule():
    with pytest.raises(ParameterError, match=re.escape(
            "rule must be one of ('additive', 'additive_mix', 'calibrated', 'tested', "
            "'silhouette', 'paper'), got 'Paper'")):
        fmcl.choose_clusters(CHAIN, rule="Paper")


def test_silhouette_rule_ties_go_to_the_smaller_k(monkeypatch):
    labelings = {k: np.full(6, k) for k in range(2, 6)}
    monkeypatch.setattr(_k_selection, "_silhouettes",
                        lambda d, ks: ({k: {2: 0.1, 3: 0.5, 4: 0.5, 5: 0.2}[k] for k in ks},
                                       {k: labelings[k] for k in ks}))
    labels, k, _, _ = fmcl.choose_clusters(CHAIN)
    assert k == 3 and labels.tolist() == [3] * 6


@pytest.mark.parametrize("values,expected", [
    ([0.5, 0.5, 0.3, 0.4, 0.2], 3),      # strict local maxima only: index 3
    ([0.1, 0.3, 0.2, 0.6, 0.1], 3),      # the largest of two local maxima
    ([0.6, 0.3, 0.2, 0.5, 0.1], 0),      # the first entry is a local maximum
    ([0.1, 0.3, 0.2, 0.1, 0.4], 4),      # and so is the last
    ([0.2, 0.2, 0.2, 0.2, 0.2], 0),      # no strict maximum: the argmax (the first)
    ([0.2, 0.5, 0.5, 0.1, 0.0], 1),      # a plateau at the top: the argmax, its first K
])
def test_paper_rule_takes_the_largest_strict_local_maximum(monkeypatch, values, expected):
    seen = {}

    def fake(d, ks):
        seen["ks"] = list(ks)
        return ({k: v for k, v in zip(ks, values)}, {k: np.full(12, k) for k in ks})

    monkeypatch.setattr(_k_selection, "_silhouettes", fake)
    monkeypatch.setattr(_k_selection, "coefficient_of_variation", lambda d: 0.5)   # window (2, 6)
    d = np.ones((12, 12))
    labels, k, window, scores = fmcl.choose_clusters(d, rule="paper")
    assert window == (2, 6) and seen["ks"] == [2, 3, 4, 5, 6]
    assert k == seen["ks"][expected] and labels.tolist() == [k] * 12


def test_paper_rule_window_capped_at_n_minus_one():
    # CV of CHAIN's off-diagonals >= 0.70 -> window (3, 10); K <= n - 1 = 5
    cv = fmcl.coefficient_of_variation(CHAIN)
    window = fmcl.k_window(cv)
    labels, k, got_window, scores = fmcl.choose_clusters(CHAIN, rule="paper")
    assert got_window == window
    assert sorted(scores) == list(range(window[0], min(window[1], 5) + 1))
    for key in scores:
        assert scores[key] == pytest.approx(
            _silhouette(CHAIN, _scipy_average(CHAIN, key)), rel=1e-12)
    # n = 3 and window (3, 10): no K left, K = 1
    far = _symmetric(3, {(0, 1): 1.0, (0, 2): 10.0, (1, 2): 30.0})
    assert fmcl.k_window(fmcl.coefficient_of_variation(far)) == (3, 10)
    labels, k, window, scores = fmcl.choose_clusters(far, rule="paper")
    assert k == 1 and scores == {1: 0.0} and labels.tolist() == [0, 0, 0]
    assert window == (3, 10)


def test_fmcl_server_result_fields():
    d = CHAIN.astype(np.float32)
    result = fmcl.fmcl_server(d, rule="paper", max_clusters=3)
    labels, k, window, scores = fmcl.choose_clusters(CHAIN.astype(np.float32), rule="paper")
    assert result.n_clusters == k and result.window == window and result.silhouettes == scores
    assert np.array_equal(result.labels, labels)
    assert result.distances.dtype == np.float64 and np.array_equal(result.distances, d)
    result = fmcl.fmcl_server(CHAIN, rule="silhouette", max_clusters=3)
    assert result.window == (2, 3)


# ----------------------------------------------------------------------------- secure path

# d = 4 so that sqrt(d) in the error bound is exact; every unit mean is rational.
MEANS4 = np.array([
    [[3, 4, 0, 0], [0, 0, 1, 0], [0, 0, 0, 0]],
    [[4, 3, 0, 0], [0, 0, 5, 12], [2, 0, 0, 0]],
    [[0, 0, 0, 0], [0, 0, 12, 5], [0, 0, 0, 7]],
    [[0, 0, 3, 4], [0, 0, 0, 0], [0, 6, 0, 8]],
], dtype=np.float64)
WEIGHTS4 = np.array([[0.6, 0.4, 0.0], [0.3, 0.3, 0.4], [0.0, 0.45, 0.55], [0.02, 0.0, 0.98]])


def _round_half_up(x):
    return math.floor(x + F(1, 2))


def _quantized_reference(means, weights, q, s):
    """The quantized signature's FMCL distance from Python integers (module docstring)."""
    n, c, dim = means.shape
    k = [_largest_remainder(w, q) for w in weights]
    ints = []
    for i in range(n):
        rows = []
        for cls in range(c):
            norm = float(np.linalg.norm(means[i, cls]))
            unit = ([float(v) / norm for v in means[i, cls]] if norm > 0 and k[i][cls]
                    else [0.0] * dim)
            rows.append([_round_half_up(F(u) * 2 ** s) for u in unit])
        ints.append(rows)
    d = np.zeros((n, n))
    for i, j in itertools.combinations(range(n), 2):
        g_t = sum(min(k[i][cls], k[j][cls]) for cls in range(c))
        g_z = sum(F(min(k[i][cls], k[j][cls]) * sum(a * b for a, b in zip(ints[i][cls],
                                                                         ints[j][cls])),
                    4 ** s) for cls in range(c))
        omega, num = F(g_t, q), max((g_t - g_z) / q, F(0))
        d[i, j] = d[j, i] = _combine(num, omega)
    return d


@pytest.mark.parametrize("q,s", [(7, 3), (20, 16)])
def test_quantized_fmcl_distances_against_python_integers(q, s):
    want = _quantized_reference(MEANS4, WEIGHTS4, q, s)
    got = fmcl.quantized_fmcl_distances(MEANS4, WEIGHTS4, resolution=q, scale_bits=s,
                                        fill=False)
    assert np.array_equal(np.isinf(got), np.isinf(want))
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=0)
    np.testing.assert_allclose(
        fmcl.quantized_fmcl_distances(MEANS4, WEIGHTS4, resolution=q, scale_bits=s),
        _geodesic(want), rtol=1e-12)


def test_quantized_fmcl_distances_defaults_are_q500_and_16_bits():
    want = _quantized_reference(MEANS4, WEIGHTS4, 500, 16)
    np.testing.assert_allclose(fmcl.quantized_fmcl_distances(MEANS4, WEIGHTS4, fill=False),
                               want, rtol=1e-12, atol=0)
    assert fmcl.DEFAULT_RESOLUTION == 500


def test_anchored_gram_matrices_give_the_fmcl_distance():
    q = 5
    rows = [_thermometer(m, w, q) for m, w in zip(MEANS4, WEIGHTS4)]
    zero = ([0.0] * len(rows[0][0]), [0.0] * len(rows[0][1]))
    rows.append(zero)                                   # the public anchor row, last
    sq = lambda a, b: float(sum((F(x) - F(y)) ** 2 for x, y in zip(a, b)))  # noqa: E731
    d_z = np.array([[sq(a[0], b[0]) for b in rows] for a in rows])
    d_t = np.array([[sq(a[1], b[1]) for b in rows] for a in rows])
    # inner products recovered exactly from distances to the anchor
    gram_t = fmcl._secure._gram_from_anchored(d_t)
    want_t = [[sum(F(x) * F(y) for x, y in zip(a[1], b[1])) for b in rows[:-1]]
              for a in rows[:-1]]
    assert gram_t.tolist() == [[float(v) for v in r] for r in want_t]
    gram_z = fmcl._secure._gram_from_anchored(d_z)
    want_z = [[float(sum(F(x) * F(y) for x, y in zip(a[0], b[0]))) for b in rows[:-1]]
              for a in rows[:-1]]
    np.testing.assert_allclose(gram_z, want_z, rtol=1e-12)
    rounded = [[F(k, q) for k in _largest_remainder(w, q)] for w in WEIGHTS4]
    want = _fmcl_exact(MEANS4, rounded)
    got = fmcl.fmcl_from_anchored(d_z, d_t, q, fill=False)
    assert np.array_equal(np.isinf(got), np.isinf(want))
    np.testing.assert_allclose(got, want, rtol=1e-9)
    np.testing.assert_allclose(fmcl.fmcl_from_anchored(d_z, d_t, q), _geodesic(want),
                               rtol=1e-9)
    np.testing.assert_allclose(fmcl.fmcl_from_anchored(d_z, d_t, q, fill="paper"),
                               _fill_paper(want), rtol=1e-9)


def _fill_paper(d):
    big = _d_big(d)
    return np.array([[v if math.isfinite(v) else big for v in row] for row in d])


def test_from_gram_clamps_a_negative_numerator():
    # G^z > G^t happens only through quantization; N is clamped at 0, Omega = G^t / q
    got = fmcl._secure._from_gram(np.array([[4.0, 3.5], [3.5, 4.0]]), np.array([[4.0, 3.0], [3.0, 4.0]]),
                          4, False)
    assert got.tolist() == [[0.0, 0.0], [0.0, 0.0]]
    got = fmcl._secure._from_gram(np.array([[4.0, 1.0], [1.0, 4.0]]), np.array([[4.0, 3.0], [3.0, 4.0]]),
                          4, False)
    assert got[0, 1] == pytest.approx(float(F(2, 4) / (F(3, 4) + EPS) * F(4, 3)), rel=1e-12)


def _spy_protect(monkeypatch):
    calls = []
    real = fmcl._secure.protect

    def spy(rows, **kwargs):
        calls.append((np.array(rows), kwargs))
        return real(rows, **kwargs)

    monkeypatch.setattr(fmcl._secure, "protect", spy)
    return calls


@pytest.mark.parametrize("q,s", [(7, 3), (6, 16)])
def test_secure_thermometer_distances_equal_the_quantized_reference(monkeypatch, q, s):
    calls = _spy_protect(monkeypatch)
    want = _quantized_reference(MEANS4, WEIGHTS4, q, s)
    plain = fmcl.secure_thermometer_distances(MEANS4, WEIGHTS4, resolution=q, scale_bits=s,
                                              secure=False, fill=False)
    assert calls == []
    np.testing.assert_allclose(plain, want, rtol=1e-12, atol=0)
    secure = fmcl.secure_thermometer_distances(MEANS4, WEIGHTS4, resolution=q, scale_bits=s,
                                               fill=False, parties=["a", "b", "c", "a"])
    assert np.array_equal(secure, plain)
    # z (bound 1, signed) and t (bound 1, nonnegative): the documented public bounds; the
    # anchor row goes to the first client's party
    (z, z_kwargs), (t, t_kwargs) = calls
    rows = [_thermometer(m, w, q) for m, w in zip(MEANS4, WEIGHTS4)]
    assert z.tolist() == [r[0] for r in rows] + [[0.0] * len(rows[0][0])]
    assert t.tolist() == [r[1] for r in rows] + [[0.0] * len(rows[0][1])]
    assert z_kwargs == {"bound": 1.0, "scale_bits": s, "parties": ["a", "b", "c", "a", "a"]}
    assert t_kwargs == {"bound": 1.0, "scale_bits": s, "nonnegative": True,
                        "parties": ["a", "b", "c", "a", "a"]}


def test_secure_thermometer_distances_defaults(monkeypatch):
    calls = _spy_protect(monkeypatch)
    got = fmcl.secure_thermometer_distances(MEANS4[:3], WEIGHTS4[:3], resolution=4,
                                            segments=1, noise_segments=1)
    want = _quantized_reference(MEANS4[:3], WEIGHTS4[:3], 4, 16)
    np.testing.assert_allclose(got, _geodesic(want), rtol=1e-12)
    assert [kw.get("parties") for _, kw in calls] == [None, None]
    assert [kw["scale_bits"] for _, kw in calls] == [16, 16]
    assert [(kw["segments"], kw["noise_segments"]) for _, kw in calls] == [(1, 1), (1, 1)]
    plain = fmcl.secure_thermometer_distances(MEANS4, WEIGHTS4, secure=False, fill=False)
    np.testing.assert_allclose(plain, _quantized_reference(MEANS4, WEIGHTS4, 500, 16),
                               rtol=1e-12, atol=0)
    paper = fmcl.secure_thermometer_distances(MEANS4, WEIGHTS4, resolution=7, scale_bits=3,
                                              secure=False, fill="paper")
    np.testing.assert_allclose(paper, _fill_paper(_quantized_reference(MEANS4, WEIGHTS4, 7, 3)),
                               rtol=1e-12)


def _bound_reference(means, weights, q, s):
    """thermometer_error_bound from the module docstring, in fractions (d = 4: sqrt exact)."""
    n, c, dim = means.shape
    root = _sqrt(F(dim))
    h = F(1, 2 ** (s + 1))
    e_q = 4 * root * h + 2 * dim * h * h
    err = [sum(abs(F(k, q) - F(w)) for k, w in zip(_largest_remainder(ws, q), ws))
           for ws in weights]

    def f(nu, om):
        return nu / (om + EPS) * _g(om)

    out = np.zeros((n, n))
    for i, j in itertools.combinations(range(n), 2):
        num, om = _pair(weights[i], weights[j], means[i], means[j])
        delta = err[i] + err[j]
        if om <= delta:
            out[i, j] = out[j, i] = math.inf
            continue
        high = f(num + 2 * delta + e_q, om - delta) - f(num, om)
        low = f(num, om) - f(max(num - 2 * delta - e_q, F(0)), om + delta)
        out[i, j] = out[j, i] = float(max(high, low))
    return out


@pytest.mark.parametrize("q,s", [(7, 3), (20, 5), (500, 16)])
def test_thermometer_error_bound_against_fractions(q, s):
    want = _bound_reference(MEANS4, WEIGHTS4, q, s)
    got = fmcl.thermometer_error_bound(MEANS4, WEIGHTS4, resolution=q, scale_bits=s)
    assert np.array_equal(np.isinf(got), np.isinf(want))
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=0)
    assert np.all(np.diag(got) == 0)


def test_thermometer_error_bound_defaults_and_edge_cases():
    want = _bound_reference(MEANS4, WEIGHTS4, 500, 16)
    np.testing.assert_allclose(fmcl.thermometer_error_bound(MEANS4, WEIGHTS4), want,
                               rtol=1e-9, atol=0)
    # q = 7: client 3's weights round with Delta > Omega for (0, 3): inf; exact weights on
    # the grid: Delta = 0 and the bound comes from the mean quantization alone
    got = fmcl.thermometer_error_bound(MEANS4, WEIGHTS4, resolution=7, scale_bits=3)
    assert math.isinf(got[0, 3])
    grid = np.array([[0.5, 0.5, 0.0], [0.25, 0.25, 0.5], [0.0, 0.5, 0.5], [0.0, 0.0, 1.0]])
    np.testing.assert_allclose(fmcl.thermometer_error_bound(MEANS4, grid, resolution=4,
                                                            scale_bits=3),
                               _bound_reference(MEANS4, grid, 4, 3), rtol=1e-9, atol=0)


# 10 points where k-means++ with one init depends on the seed
POINTS = np.array([[0.262, 0.298], [0.814, 0.092], [0.6, 0.729], [0.188, 0.055],
                   [0.275, 0.657], [0.562, 0.15], [0.433, 0.669], [0.423, 0.633],
                   [0.967, 0.683], [0.392, 0.187]])


def test_kmeans_on_mean_embeddings_is_sklearn_kmeans_on_the_means():
    from sklearn.cluster import KMeans

    seen = set()
    for seed in range(4):
        want = KMeans(3, random_state=seed, n_init="auto").fit(POINTS).labels_
        got = fmcl.kmeans_on_mean_embeddings(POINTS, 3, random_state=seed)
        assert _partition(got) == _partition(want)
        seen.add(frozenset(_partition(want)))
    assert len(seen) > 1                                # the seed matters here
    default = KMeans(3, random_state=0, n_init="auto").fit(POINTS).labels_
    assert _partition(fmcl.kmeans_on_mean_embeddings(POINTS, 3)) == _partition(default)
    assert fmcl.kmeans_on_mean_embeddings(POINTS, 3).dtype == np.int64


# ----------------------------------------------------------------------------- precision

def test_client_side_computes_in_float64_from_float32_input():
    # float32 embeddings: the class mean is the float64 mean of the float32 values
    e = np.array([[1.0], [2.0 ** -24], [2.0 ** -24]], dtype=np.float32)
    means, weights = fmcl.signature(e, np.array([0, 0, 0]), 1)
    assert means[0, 0] == float((1 + F(2) ** -23) / 3)
    # largest remainder on float32 weights: 1, 1, 4 at q = 4 -> 2/3, 2/3, 8/3 -> 1, 1, 2
    k = fmcl.round_weights(np.array([1, 1, 4], dtype=np.float32), 4)
    assert k.tolist() == _largest_remainder([1, 1, 4], 4) == [1, 1, 2]
    # thermometer rows: the unit means in float64
    for means, weights in zip(MEANS.astype(np.float32), WEIGHTS):
        z, t = fmcl.thermometer_rows(means, weights, 6)
        want_z, want_t = _thermometer(means.astype(np.float64), weights, 6)
        assert z.tolist() == want_z and t.tolist() == want_t


def test_server_side_computes_in_float64_from_float32_input():
    means32, weights32 = MEANS.astype(np.float32), WEIGHTS.astype(np.float32)
    want = _fmcl_exact(MEANS, [[F(float(w)) for w in row] for row in weights32])
    got = fmcl.fmcl_distances(means32, weights32, fill=False)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=0)
    got = fmcl.fmcl_distances(means32, WEIGHTS, fill=False)
    np.testing.assert_allclose(got, _fmcl_exact(MEANS, WEIGHTS), rtol=1e-12, atol=0)
    got = fmcl.fmcl_distances(MEANS, weights32, fill=False)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=0)
    # the thermometer combination, from float32 squared distances
    q = 5                                               # overlaps like 0.4: not dyadic
    rows = [_thermometer(m, w, q) for m, w in zip(MEANS, WEIGHTS)]
    sq = lambda a, b: float(sum((F(x) - F(y)) ** 2 for x, y in zip(a, b)))  # noqa: E731
    d_z = np.array([[sq(a[0], b[0]) for b in rows] for a in rows], dtype=np.float32)
    d_t = np.array([[sq(a[1], b[1]) for b in rows] for a in rows], dtype=np.float32)
    for dz, dt in ((d_z, d_t), (d_z, d_t.astype(np.float64)), (d_z.astype(np.float64), d_t)):
        want = np.zeros((4, 4))
        for i, j in itertools.combinations(range(4), 2):
            z_ij, t_ij = F(float(dz[i, j])), F(float(dt[i, j]))
            num = max((z_ij - t_ij) / (2 * q), F(0))
            om = min(max(1 - t_ij / (2 * q), F(0)), F(1))
            om = F(0) if om <= F(1, 2 * q) else om
            want[i, j] = want[j, i] = _combine(num, om)
        got = fmcl.fmcl_from_thermometer(dz, dt, q, fill=False)
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=0)


def test_no_numpy_warning_for_pairs_without_shared_class():
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        d = fmcl.fmcl_distances(MEANS, WEIGHTS, fill=False)
        assert math.isinf(d[0, 2])
        assert fmcl._paper._g(np.array([0.0, 0.5, 0.004])).tolist() == [100.0, 2.0, 100.0]


def test_a_weighted_class_with_zero_mean_has_cosine_zero():
    # the paper's cosine has +eps in its denominator: cos(0, x) = 0, so d_c = 1
    for _ in range(5):
        means = np.array([[[1.0, 0.0], [0.0, 0.0]], [[0.0, 2.0], [0.0, 3.0]],
                          [[5.0, 0.0], [7.0, 1.0]]])
        weights = np.array([[0.5, 0.5], [0.5, 0.5], [0.25, 0.75]])
        got = fmcl.fmcl_distances(means, weights, fill=False)
        assert got[0, 1] == pytest.approx(float(F(1) / (1 + EPS)), rel=1e-12)   # N = 1
        assert got[0, 2] == pytest.approx(float(F(1, 2) / (F(3, 4) + EPS) * F(4, 3)),
                                          rel=1e-12)                            # cos 1, 0


def test_round_weights_sums_to_q_at_large_q_and_breaks_ties_by_class_order():
    assert fmcl.round_weights([1.0, 1.0, 1.0], 10 ** 9).tolist() == \
        _largest_remainder([1, 1, 1], 10 ** 9) == [333333334, 333333333, 333333333]
    # 20 classes, fractional parts 1/4, 1/2, 3/4 with ties across the cut: stable order
    counts = [3, 3, 3, 2, 3, 1, 2, 3, 1, 1, 1, 2, 3, 1, 2, 2, 3, 1, 2, 1]
    assert fmcl.round_weights(np.array(counts, dtype=np.float64), 10).tolist() == \
        _largest_remainder(counts, 10)


# ----------------------------------------------------------------------------- synthetic data

def test_fixed_encoder_is_the_documented_relu_map_with_a_public_seed():
    x = np.arange(10, dtype=np.int64).reshape(2, 5) - 4
    for seed, dim in ((7, 3), (0, 16)):
        rng = np.random.Generator(np.random.PCG64(seed))
        w = rng.standard_normal((5, dim)) / math.sqrt(5)
        b = 0.1 * rng.standard_normal(dim)
        want = np.maximum(x.astype(np.float64) @ w + b, 0.0)
        encode = fmcl.fixed_encoder(5, dim, seed=seed)
        got = encode(x)
        assert got.dtype == np.float64 and got.shape == (2, dim)
        np.testing.assert_allclose(got, want, rtol=1e-14, atol=0)
        assert (got == 0).any() and (got > 0).any()     # the ReLU is active on this input
    np.testing.assert_array_equal(fmcl.fixed_encoder(5)(x), fmcl.fixed_encoder(5, 16, seed=0)(x))


def test_rotation_is_a_rotation():
    rng = np.random.Generator(np.random.PCG64(3))
    r = fmcl._simulation._rotation(5, 3.0, rng)
    np.testing.assert_allclose(r @ r.T, np.eye(5), atol=1e-12)
    assert np.linalg.det(r) == pytest.approx(1.0, abs=1e-12)
    assert np.abs(r - np.eye(5)).max() > 0.1
    np.testing.assert_allclose(fmcl._simulation._rotation(5, 0.0, rng), np.eye(5), atol=1e-15)


def test_synthetic_domains_shapes_labels_and_refusal():
    clients, domains = fmcl.synthetic_domains(n_domains=2, clients_per_domain=3, n_classes=4,
                                              dim=5, samples=40, seed=1)
    assert domains.tolist() == [0, 0, 0, 1, 1, 1]
    assert len(clients) == 6
    for x, y in clients:
        assert x.shape == (40, 5) and y.shape == (40,)
        assert set(y.tolist()) <= {0, 1, 2, 3}
    again, _ = fmcl.synthetic_domains(n_domains=2, clients_per_domain=3, n_classes=4, dim=5,
                                      samples=40, seed=1)
    assert all(np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
               for a, b in zip(clients, again))
    other, _ = fmcl.synthetic_domains(n_domains=2, clients_per_domain=3, n_classes=4, dim=5,
                                      samples=40, seed=2)
    assert not np.array_equal(clients[0][0], other[0][0])
    clients, domains = fmcl.synthetic_domains(clients_per_domain=1, samples=5)
    assert domains.tolist() == [0, 1, 2]                # defaults: 3 domains, 10 classes, d 8
    assert all(x.shape == (5, 8) for x, _ in clients)
    with pytest.raises(ParameterError, match=re.escape(
            "shift must be one of ('rotation', 'offset', 'permutation'), got 'rotate'")):
        fmcl.synthetic_domains(shift="rotate")


def _class_means(clients, n_classes):
    """Pooled per-class means of a list of (x, y)."""
    x = np.concatenate([c[0] for c in clients])
    y = np.concatenate([c[1] for c in clients])
    return np.array([x[y == c].mean(axis=0) for c in range(n_classes)])


@pytest.mark.parametrize("shift", ["rotation", "offset", "permutation"])
def test_synthetic_domains_shift_types(shift):
    # alpha large: every client holds every class, so class means are well estimated
    clients, domains = fmcl.synthetic_domains(n_domains=2, clients_per_domain=4, n_classes=4,
                                              dim=6, samples=500, alpha=1000.0, shift=shift,
                                              seed=5)
    a = _class_means(clients[:4], 4)
    b = _class_means(clients[4:], 4)
    # within a class, samples scatter around the class mean with unit variance
    x, y = clients[0]
    spread = np.concatenate([x[y == c] - a[c] for c in range(4)])
    assert spread.var(axis=0).mean() == pytest.approx(1.0, abs=0.15)
    pair = np.linalg.norm(a[:, None] - b[None, :], axis=2)   # (class in 0, class in 1)
    if shift == "permutation":
        # the same set of class means, matched by a permutation that is not the identity
        match = pair.argmin(axis=1)
        assert sorted(match.tolist()) == [0, 1, 2, 3] and match.tolist() != [0, 1, 2, 3]
        assert pair.min(axis=1).max() < 0.3
    else:
        assert pair.min(axis=1).min() > 0.5                  # every class mean moved
    if shift == "rotation":
        # a rigid motion: the class means' pairwise distances are kept
        da = np.linalg.norm(a[:, None] - a[None], axis=2)
        db = np.linalg.norm(b[:, None] - b[None], axis=2)
        np.testing.assert_allclose(da, db, atol=0.3)
    if shift == "offset":
        da = np.linalg.norm(a[:, None] - a[None], axis=2)
        db = np.linalg.norm(b[:, None] - b[None], axis=2)
        assert np.abs(da - db).max() > 1.0                   # classes moved independently


def test_synthetic_domains_dirichlet_alpha_controls_label_skew():
    def classes_held(alpha):
        clients, _ = fmcl.synthetic_domains(n_domains=1, clients_per_domain=20, samples=200,
                                            alpha=alpha, seed=0)
        return np.mean([len(set(y.tolist())) for _, y in clients])

    assert classes_held(0.01) < 1.5                      # one class per client, mostly
    assert classes_held(100.0) == 10.0                   # every class
    default = fmcl.synthetic_domains(n_domains=1, clients_per_domain=20, samples=200, seed=0)
    explicit = fmcl.synthetic_domains(n_domains=1, clients_per_domain=20, samples=200,
                                      alpha=0.1, rotation=3.0, shift="rotation", seed=0)
    assert all(np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
               for a, b in zip(default[0], explicit[0]))


def test_three_clients_are_split_by_both_rules():
    d = _symmetric(3, {(0, 1): 1.0, (0, 2): 1.1, (1, 2): 1.2})
    # silhouette of {0, 1} | {2}: client 0: a = 1, b = 1.1; client 1: a = 1, b = 1.2; 2 alone
    split = (F(11, 10) - 1) / F(11, 10) / 3 + (F(12, 10) - 1) / F(12, 10) / 3
    labels, k, window, scores = fmcl.choose_clusters(d, rule="silhouette")
    assert k == 2 and window == (2, 2) and _partition(labels) == {frozenset({0, 1}),
                                                                   frozenset({2})}
    assert scores[2] == pytest.approx(float(split), rel=1e-12)
    assert fmcl.k_window(fmcl.coefficient_of_variation(d)) == (1, 3)
    labels, k, window, scores = fmcl.choose_clusters(d, rule="paper")
    assert window == (1, 3) and sorted(scores) == [1, 2]       # K <= n - 1 = 2
    assert scores[1] == 0.0 and scores[2] == pytest.approx(float(split), rel=1e-12)
    assert k == 2 and _partition(labels) == {frozenset({0, 1}), frozenset({2})}


def test_k_selection_in_float64_from_float32_input():
    d32 = CHAIN.astype(np.float32)
    d64 = d32.astype(np.float64)
    for rule in ("silhouette", "paper"):
        _, _, _, scores = fmcl.choose_clusters(d32, rule=rule)
        for key in scores:
            assert scores[key] == pytest.approx(
                _silhouette(d64, _scipy_average(d64, key)), rel=1e-13)
    assert fmcl.coefficient_of_variation(d32) == fmcl.coefficient_of_variation(d64)


def test_coefficient_of_variation_small_mean_and_no_warning():
    import warnings

    d = _symmetric(3, {(0, 1): 0.1, (0, 2): 0.3, (1, 2): 0.2})   # mean 0.2 < 1
    assert fmcl.coefficient_of_variation(d) == pytest.approx(
        np.std([0.1, 0.3, 0.2]) / 0.2, rel=1e-12)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert fmcl.coefficient_of_variation(np.zeros((1, 1))) == 0.0


def test_fills_in_float64_from_float32_input():
    inf = math.inf
    d = _symmetric(4, {(0, 1): 0.1, (0, 2): inf, (0, 3): 0.7, (1, 2): 0.2, (1, 3): 0.3,
                       (2, 3): 0.9}).astype(np.float32)
    exact = [[float(v) for v in row] for row in d]
    got = fmcl.geodesic_fill(d)
    assert got.dtype == np.float64
    assert got[0, 2] == float(F(float(d[0, 1])) + F(float(d[1, 2])))
    paper = fmcl.fill_missing(d)
    assert paper.dtype == np.float64
    assert paper[0, 2] == pytest.approx(_d_big(exact), rel=1e-14)
    assert math.isinf(d[0, 2])                          # not modified


# ----------------------------------------------------------------------------- end to end

@pytest.mark.parametrize("secure,parties,rule,seed", [(True, None, "silhouette", 0),
                                                      (False, [0, 0, 1, 1, 2, 2], "paper", 3)])
def test_run_federated_fmcl_wiring(monkeypatch, secure, parties, rule, seed):
    from omnifc import fl
    from omnifc.fl._data import Client

    data = fl.make_federated("digits", shift="feature", n_groups=2, clients_per_group=3,
                             train_samples=40, test_samples=20, seed=0)
    c0 = data.clients[0]
    data.clients[0] = Client(c0.x_train[:30], c0.y_train[:30], c0.x_test, c0.y_test, c0.group)
    calls = {}

    def spy(name, owner):
        real = getattr(owner, name)

        def wrapped(*args, **kwargs):
            result = real(*args, **kwargs)
            calls.setdefault(name, []).append((args, kwargs, result))
            return result
        monkeypatch.setattr(owner, name, wrapped)

    spy("exact_fmcl_distances", fmcl._simulation)
    spy("fmcl_server", fmcl._simulation)
    spy("sgd_trainer", fl)
    spy("run_federated", fl)
    out = fmcl.run_federated_fmcl(data, rounds=2, encoder_dim=4, secure=secure, parties=parties,
                                  rule=rule, seed=seed, scale_bits=12)
    # signatures from the fixed encoder with the public seed
    rng = np.random.Generator(np.random.PCG64(seed))
    w = rng.standard_normal((data.n_features, 4)) / math.sqrt(data.n_features)
    b = 0.1 * rng.standard_normal(4)
    (args, kwargs, d), = calls["exact_fmcl_distances"]     # exact weights: class counts
    for i, c in enumerate(data.clients):
        emb = np.maximum(c.x_train @ w + b, 0.0)
        for cls in range(data.n_classes):
            rows = emb[c.y_train == cls]
            want = rows.mean(axis=0) if len(rows) else np.zeros(4)
            np.testing.assert_allclose(args[0][i, cls], want, rtol=1e-12, atol=1e-15)
            assert args[1][i, cls] == len(rows)
    owners = np.arange(6) % 3 if parties is None else parties
    assert np.array_equal(kwargs.pop("parties"), owners)
    assert kwargs == {"secure": secure, "scale_bits": 12}
    (args, kwargs, server), = calls["fmcl_server"]
    assert args[0] is d and kwargs == {"rule": rule}
    (args, kwargs, trainer), = calls["sgd_trainer"]
    assert kwargs == {"epochs": 2, "batch_size": 20, "learning_rate": 0.5}
    model = args[0]
    assert isinstance(model, fl.SoftmaxRegression)
    (args, kwargs, run), = calls["run_federated"]
    assert args[0] is data.clients
    assert len(args[1]) == server.n_clusters
    assert all(np.array_equal(m, model.init(seed)) for m in args[1])
    assert kwargs["rounds"] == 2 and kwargs["seed"] == seed and kwargs["local_train"] is trainer
    assert np.array_equal(kwargs["assign"](None), server.labels)
    assert sorted(kwargs) == ["assign", "evaluate", "local_train", "rounds", "seed"]
    assert out["labels"] is server.labels and out["n_clusters"] == server.n_clusters
    assert out["distances"] is d and out["resolution"] == 120 and out["run"] is run  # lcm(30, 40)
    assert out["server"] is server
    assert out["accuracy"] == run.history[-1].metrics["accuracy"]
    assert out["accuracy"] == pytest.approx(
        fl.mean_accuracy(model, run.models, server.labels, data.clients), rel=1e-12)


def test_anchored_path_in_float64_from_float32_input():
    q = 5
    rows = [_thermometer(m, w, q) for m, w in zip(MEANS4, WEIGHTS4)]
    rows.append(([0.0] * len(rows[0][0]), [0.0] * len(rows[0][1])))
    sq = lambda a, b: float(sum((F(x) - F(y)) ** 2 for x, y in zip(a, b)))  # noqa: E731
    # scaled by 0.9 and the distances to the anchor jittered (arbitrary, N stays positive)
    # so that the float32 sums round
    d_z = np.array([[0.9 * sq(a[0], b[0]) for b in rows] for a in rows])
    d_z[-1, :-1] += 0.01 * np.sqrt(np.arange(2.0, 6.0))
    d_z[:-1, -1] = d_z[-1, :-1]
    d_z = d_z.astype(np.float32)
    d_t = np.array([[sq(a[1], b[1]) for b in rows] for a in rows], dtype=np.float32)
    n = len(rows) - 1

    def gram(d, i, j):
        return (F(float(d[i, n])) + F(float(d[j, n])) - F(float(d[i, j]))) / 2

    want = np.zeros((n, n))
    for i, j in itertools.combinations(range(n), 2):
        g_t, g_z = gram(d_t, i, j), gram(d_z, i, j)
        want[i, j] = want[j, i] = _combine(max((g_t - g_z) / q, F(0)), g_t / q)
    for dz, dt in ((d_z, d_t), (d_z, d_t.astype(np.float64)), (d_z.astype(np.float64), d_t)):
        got = fmcl.fmcl_from_anchored(dz, dt, q, fill=False)
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=0)
    assert (want[np.isfinite(want)] > 0).sum() >= 6     # the numerators are not clamped


def test_quantized_path_edge_cases():
    import warnings

    # absent classes have zero means: no 0/0 and no warning
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fmcl.quantized_fmcl_distances(MEANS4, WEIGHTS4, resolution=7, scale_bits=3)
    # float32 input: the same as float64 input
    np.testing.assert_allclose(
        fmcl.quantized_fmcl_distances(MEANS4.astype(np.float32), WEIGHTS4.astype(np.float32),
                                      resolution=7, scale_bits=3, fill=False),
        _quantized_reference(MEANS4, WEIGHTS4.astype(np.float32).astype(np.float64), 7, 3),
        rtol=1e-12, atol=0)
    # a weighted class with zero mean: cosine 0, as in the direct distance
    means = np.array([[[1.0, 0.0], [0.0, 0.0]], [[0.0, 2.0], [0.0, 3.0]]])
    weights = np.array([[0.5, 0.5], [0.5, 0.5]])
    for _ in range(3):
        got = fmcl.quantized_fmcl_distances(means, weights, resolution=2, scale_bits=4,
                                            fill=False)
        assert got[0, 1] == pytest.approx(float(F(1) / (1 + EPS)), rel=1e-12)
    # a single client (no pair): the plaintext path gives [[0]]
    one = fmcl.secure_thermometer_distances(MEANS4[:1], WEIGHTS4[:1], resolution=3,
                                            secure=False)
    assert one.tolist() == [[0.0]]


def test_rotation_generator_has_entries_of_variance_one_over_dim():
    # R = expm(s A) with A = (a - a^T) / sqrt(2 d), a standard normal: A's off-diagonal
    # entries have variance 1/d (the rotation's size does not grow with d). For a small s,
    # (R - R^T) / (2 s) = A + O(s^2).
    dim, s = 60, 1e-4
    r = fmcl._simulation._rotation(dim, s, np.random.Generator(np.random.PCG64(11)))
    a = (r - r.T) / (2 * s)
    off = a[~np.eye(dim, dtype=bool)]
    assert off.var() * dim == pytest.approx(1.0, abs=0.1)
    np.testing.assert_allclose(a, -a.T, atol=1e-12)


def test_synthetic_domains_documented_defaults_and_scales():
    default = fmcl.synthetic_domains()
    explicit = fmcl.synthetic_domains(n_domains=3, clients_per_domain=30, n_classes=10, dim=8,
                                      samples=1000, alpha=0.1, rotation=3.0,
                                      shift="rotation", seed=0)
    assert np.array_equal(default[1], explicit[1])
    assert all(np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
               for a, b in zip(default[0], explicit[0]))
    assert len(default[0]) == 90 and default[0][0][0].shape == (1000, 8)
    # class means ~ 3 N(0, 1): per-coordinate variance 9 (domain 0 of "permutation" is
    # the unshifted class means); many classes and dimensions, every class well sampled
    clients, _ = fmcl.synthetic_domains(n_domains=1, clients_per_domain=2, n_classes=30,
                                        dim=30, samples=3000, alpha=1000.0,
                                        shift="permutation", seed=4)
    means = _class_means(clients, 30)
    assert means.var() == pytest.approx(9.0, rel=0.15)
    # "offset": each class moved by 3 N(0, 1) per domain: a difference has variance 18
    clients, _ = fmcl.synthetic_domains(n_domains=2, clients_per_domain=2, n_classes=30,
                                        dim=30, samples=3000, alpha=1000.0, shift="offset",
                                        seed=4)
    diff = _class_means(clients[:2], 30) - _class_means(clients[2:], 30)
    assert np.median(np.abs(diff)) == pytest.approx(0.6745 * math.sqrt(18.0), rel=0.1)


def test_thermometer_error_bound_where_the_lower_side_is_larger():
    # Omega = 0.0101 sits just above the kink of g at 0.01 (min(1/Omega, 100)), opposite
    # means (N = 2 Omega), Delta = 0.0004 at q = 500: f(N, Omega) - f(N - 2 Delta - e_q,
    # Omega + Delta) exceeds the upper side, so the bound is the lower side
    means = np.array([[[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 0, 0]],
                      [[-1, 0, 0, 0], [0, 0, 0, 0], [0, 0, 1, 0]]], dtype=np.float64)
    weights = np.array([[0.0101, 0.9899, 0.0], [0.0101, 0.0, 0.9899]])
    want = _bound_reference(means, weights, 500, 16)
    got = fmcl.thermometer_error_bound(means, weights)
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=0)
    assert want[0, 1] == pytest.approx(20.023125289176118, rel=1e-9)   # the lower side
    # float32 weights: computed in float64 from their values
    w32 = WEIGHTS4.astype(np.float32)
    want = _bound_reference(MEANS4, [[float(v) for v in row] for row in w32], 20, 5)
    np.testing.assert_allclose(fmcl.thermometer_error_bound(MEANS4, w32, resolution=20,
                                                            scale_bits=5),
                               want, rtol=1e-9, atol=0)


def test_quantized_means_are_rounded_once_at_scale_bits():
    # a unit-mean coordinate 1e-6 below the half-way point 1.5 / 8 of the 2^-3 grid rounds
    # down to 1/8 (round half up of 1.499992); rounding first to 2^-16 would give 1.5 / 8
    # and then 2/8
    u = 0.1875 - 1e-6
    means = np.array([[[u, math.sqrt(1 - u * u)]], [[1.0, 0.0]]])
    weights = np.array([[1.0], [1.0]])
    got = fmcl.quantized_fmcl_distances(means, weights, resolution=2, scale_bits=3,
                                        fill=False)
    np.testing.assert_allclose(got, _quantized_reference(means, weights, 2, 3), rtol=1e-12)


def test_thermometer_error_bound_from_float32_means():
    m32 = MEANS4.astype(np.float32) * np.float32(1.1)
    want = _bound_reference_float(m32.astype(np.float64), WEIGHTS4, 20, 5)
    np.testing.assert_allclose(fmcl.thermometer_error_bound(m32, WEIGHTS4, resolution=20,
                                                            scale_bits=5),
                               want, rtol=1e-12, atol=0)


def _bound_reference_float(means, weights, q, s):
    """The same bound with the cosines in float64 from the given float values."""
    n, c, dim = means.shape
    unit = np.zeros_like(means)
    for i in range(n):
        for cls in range(c):
            norm = math.sqrt(sum(float(v) ** 2 for v in means[i, cls]))
            if norm > 0:
                unit[i, cls] = [float(v) / norm for v in means[i, cls]]
    h = 2.0 ** -(s + 1)
    e_q = 4 * math.sqrt(dim) * h + 2 * dim * h * h
    err = [sum(abs(k / q - w) for k, w in zip(_largest_remainder(ws, q), ws)) for ws in weights]

    def f(nu, om):
        return nu / (om + 1e-3) * min(1 / om, 100.0) if om > 0 else math.inf

    out = np.zeros((n, n))
    for i, j in itertools.combinations(range(n), 2):
        num = om = 0.0
        for cls in range(c):
            m = min(weights[i][cls], weights[j][cls])
            num += m * (1 - sum(a * b for a, b in zip(unit[i, cls], unit[j, cls])))
            om += m
        delta = err[i] + err[j]
        if om <= delta:
            out[i, j] = out[j, i] = math.inf
            continue
        high = f(num + 2 * delta + e_q, om - delta) - f(num, om)
        low = f(num, om) - f(max(num - 2 * delta - e_q, 0.0), om + delta)
        out[i, j] = out[j, i] = max(high, low)
    return out


def test_run_federated_fmcl_defaults(monkeypatch):
    from omnifc import fl

    data = fl.make_federated("digits", shift="feature", n_groups=2, clients_per_group=3,
                             train_samples=30, test_samples=20, seed=1)
    seen = {}
    real_encoder, real_secure, real_run = (fmcl.fixed_encoder,
                                           fmcl.exact_fmcl_distances, fl.run_federated)

    def encoder(n_features, dim, **kwargs):
        seen["encoder"] = (n_features, dim, kwargs)
        return real_encoder(n_features, dim, **kwargs)

    def secure(means, counts, **kwargs):     # the default: exact class weights
        seen["secure"] = kwargs["secure"]
        return real_secure(means, counts, **kwargs)

    def run(*args, **kwargs):
        seen["run"] = (kwargs["rounds"], kwargs["seed"])
        return real_run(*args, **kwargs)

    monkeypatch.setattr(fmcl._simulation, "fixed_encoder", encoder)
    monkeypatch.setattr(fmcl._simulation, "exact_fmcl_distances", secure)
    monkeypatch.setattr(fl, "run_federated", run)
    out = fmcl.run_federated_fmcl(data)
    assert seen == {"encoder": (data.n_features, 16, {"seed": 0}), "secure": True,
                    "run": (10, 0)}
    history = out["run"].history
    assert len(history) == 10
    model = fl.SoftmaxRegression(data.n_features, data.n_classes)
    assert out["accuracy"] == pytest.approx(
        fl.mean_accuracy(model, out["run"].models, out["labels"], data.clients), rel=1e-12)
    assert out["accuracy"] != history[1].metrics["accuracy"]      # the last round, not the 2nd
