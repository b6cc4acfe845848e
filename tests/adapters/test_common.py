"""The shared mechanism: protect (secure distances in client order) and the group sums."""

from __future__ import annotations

import re

import numpy as np
import pytest
from scipy.spatial.distance import cdist
from sklearn.cluster import AgglomerativeClustering, KMeans
from sklearn.metrics import adjusted_rand_score, silhouette_score

from finite_field import InputError, ParameterError
from omnifc.adapters import (
    client_parties,
    kmeans_from_distances,
    plaintext_distances,
    protect,
    quantize_rows,
    secure_group_sums,
    silhouette_from_distances,
    ward_from_distances,
)
from omnifc.adapters._common import _as_rows
from omnifc.adapters.clove import cluster_cost

pytestmark = pytest.mark.timeout(120)


def _rng(seed=0):
    return np.random.Generator(np.random.PCG64(seed))


def test_protect_is_exact_and_in_client_order_with_grouped_parties():
    rows = _rng(1).uniform(-1, 1, (9, 5))
    organizations = ["b", "a", "c", "a", "b", "c", "c", "a", "b"]   # interleaved on purpose
    out = protect(rows, bound=1.0, scale_bits=12, parties=organizations)
    q = np.floor(np.clip(rows, -1, 1) * 2**12 + 0.5).astype(np.int64)   # independent reference
    ref = ((q[:, None, :] - q[None, :, :]) ** 2).sum(-1)
    assert np.array_equal(out.integer_distances, ref)
    assert np.array_equal(out.distances, ref / 4.0**12)
    assert np.array_equal(out.distances, plaintext_distances(quantize_rows(rows, bound=1.0,
                                                                            scale_bits=12)))
    assert out.result.party_names == ["b", "a", "c"]


def test_client_parties_default_one_party_per_client():
    groups = client_parties(3)
    assert [name for name, _ in groups] == ["client-0", "client-1", "client-2"]
    with pytest.raises(ValueError):
        client_parties(3, ["a", "b"])


@pytest.mark.parametrize("parties", [None, [0, 1, 2, 0, 1, 2, 0]])
def test_secure_group_sums_equal_plaintext_cluster_sums(parties):
    """CLoVE's matching cost: secure sum per cluster == plaintext sums of quantized rows."""
    losses = _rng(2).uniform(0, 3, (7, 4))
    labels = np.array([2, 0, 0, 1, 2, 2, 0])
    out = secure_group_sums(losses, labels, n_groups=3, bound=16.0, scale_bits=20,
                            nonnegative=True, parties=parties)
    quantized = quantize_rows(losses, bound=16.0, scale_bits=20, nonnegative=True)
    expected = np.zeros((3, 4))
    for i, k in enumerate(labels):
        expected[k] += quantized[i]
    assert np.array_equal(out.totals, expected)
    assert np.array_equal(out.totals, cluster_cost(quantized, labels, 3))
    ints = np.floor(losses * 2**20 + 0.5).astype(np.int64)
    assert np.array_equal(out.result.integer_total.reshape(3, 4),
                          np.stack([ints[labels == k].sum(0) for k in range(3)]))


def test_clustering_on_distances_matches_sklearn_on_vectors():
    rng = _rng(3)
    x = np.concatenate([rng.normal(c, 0.3, (8, 4)) for c in (0.0, 2.0, 4.0)])
    d = cdist(x, x, "sqeuclidean")
    for seed in range(3):
        ours = kmeans_from_distances(d, 3, random_state=seed)
        theirs = KMeans(3, random_state=seed, n_init="auto").fit(x).labels_
        assert adjusted_rand_score(ours, theirs) == 1.0
    for k in (2, 3, 5):
        ward = AgglomerativeClustering(n_clusters=k, linkage="ward").fit_predict(x)
        assert adjusted_rand_score(ward_from_distances(d, k), ward) == 1.0
        assert silhouette_from_distances(d, ward) == pytest.approx(silhouette_score(x, ward),
                                                                   abs=1e-12)


# -- folded in from test_common_bites.py --------------------------------------------------
# omnifc.adapters._common pinned against independent expectations (mutation testing, issue 14).
#
# The shared mechanism of every adapter: the shape rules for client vectors, the grouping of
# clients into parties, the exact plaintext reference distances (each of its integer paths,
# checked against Python integers where float64 would round), what protect() passes to the
# protocol, the group sums (checked against numpy sums of hand-quantized rows) and the
# clustering helpers (checked against scikit-learn and scipy on the vectors).

def _exact(rows):
    """Squared distances with Python integers/fractions (rows given as ints, and a scale)."""
    rows = [[int(v) for v in r] for r in rows]
    return [[sum((a - b) ** 2 for a, b in zip(x, y)) for y in rows] for x in rows]


def test_as_rows_shapes():
    assert _as_rows([np.array([[1, 2]]), [3, 4]]).tolist() == [[1.0, 2.0], [3.0, 4.0]]
    assert _as_rows((np.array([1, 2]), np.array([3, 4]))).dtype == np.float64
    assert _as_rows(np.array([1, 2, 3])).tolist() == [[1.0], [2.0], [3.0]]
    assert _as_rows(np.ones((2, 3), dtype=np.int8)).dtype == np.float64
    with pytest.raises(InputError, match=re.escape(
            "client vectors must form a 2-D array (clients x features), got shape (2, 2, 2)")):
        _as_rows(np.zeros((2, 2, 2)))
    with pytest.raises(InputError, match=r"^no client vectors given$"):
        _as_rows(np.zeros((0, 3)))


def test_client_parties_groups_in_order_of_first_occurrence():
    groups = client_parties(6, [7, "x", 7, 3, "x", 7])
    assert [name for name, _ in groups] == ["7", "x", "3"]
    assert [idx.tolist() for _, idx in groups] == [[0, 2, 5], [1, 4], [3]]
    assert [idx.tolist() for _, idx in client_parties(2)] == [[0], [1]]
    with pytest.raises(ParameterError, match=re.escape(
            "parties must give one label per client: expected 3, got 2")):
        client_parties(3, ["a", "b"])
    with pytest.raises(ParameterError, match="expected 1, got 2"):
        client_parties(1, ["a", "b"])


def test_plaintext_distances_small_dyadic_rows_are_exact():
    x = np.array([[0.5, -0.25], [0.125, 1.0], [-1.0, 0.0]])
    q = (x * 8).astype(int)
    assert plaintext_distances(x).tolist() == [[v / 64 for v in r] for r in _exact(q)]


def test_plaintext_distances_int64_path_is_exact_where_float_would_round():
    # entries ~2^27: norms ~2^54 lose the last bits in float64, the difference does not
    x = np.array([[2.0**27 + 1, 3.0], [2.0**27, 0.0], [5.0, 2.0**26 + 3]])
    assert plaintext_distances(x).tolist() == [[float(v) for v in r] for r in _exact(x)]


def test_plaintext_distances_object_path_beyond_int64():
    # 4 d largest^2 >= 2^62: int64 would overflow; Python integers do not
    x = np.array([[2.0**35 + 1, 1.0], [2.0**35, 0.0]])
    assert plaintext_distances(x).tolist() == [[0.0, 2.0], [2.0, 0.0]]
    x = np.array([[2.0**39 + 3], [2.0**39]])
    assert plaintext_distances(x).tolist() == [[0.0, 9.0], [9.0, 0.0]]
    # many features: 4 d largest^2 decides, not largest alone (int64 would wrap to 0)
    x = np.array([[2.0**31] * 16, [-(2.0**31)] * 16])
    assert plaintext_distances(x).tolist() == [[0.0, 2.0**68], [2.0**68, 0.0]]
    assert plaintext_distances(x).dtype == np.float64   # not Python objects
    # a distance that itself is beyond int64 (wrapping arithmetic would give 0)
    x = np.array([[2.0**39 + 1], [-(2.0**39)]])
    far = float((2**40 + 1) ** 2)
    assert plaintext_distances(x).tolist() == [[0.0, far], [far, 0.0]]


def test_plaintext_distances_of_vectors_without_features():
    assert plaintext_distances(np.zeros((3, 0))).tolist() == [[0.0] * 3] * 3


def test_plaintext_distances_dyadic_rows_are_summed_exactly():
    # halves at 2^26: each square needs 55 bits; summed one by one in float64 the three
    # quarters are lost, the exact sum (Python integers) rounds up once
    x = np.array([[2.0**26 + 0.5, 0.5, 0.5], [0.0, 0.0, 0.0]])
    exact = float((2**27 + 1) ** 2 + 1 + 1) / 4        # in units of 2^-2
    assert exact == 2.0**52 + 2.0**26 + 1
    assert plaintext_distances(x).tolist() == [[0.0, exact], [exact, 0.0]]


def test_plaintext_distances_fine_dyadic_and_non_dyadic_rows():
    # multiples of 2^-30 are still integers after scaling
    x = np.array([[2.0**-30, 0.0], [0.0, 3 * 2.0**-30]])
    assert plaintext_distances(x).tolist() == [[0.0, 10 * 2.0**-60], [10 * 2.0**-60, 0.0]]
    # non-dyadic rows: the difference of the rows, squared (numpy on the plaintext)
    y = np.array([[0.1, 0.7], [0.3, 0.2], [1 / 3, 0.0]])
    diff = y[:, None, :] - y[None, :, :]
    assert np.array_equal(plaintext_distances(y), (diff ** 2).sum(-1))


def test_quantize_rows_is_round_clip():
    x = np.array([[-3.0, 0.30, 0.74], [0.5 + 1 / 1024, 2.0, -0.26]])
    assert quantize_rows(x, bound=1.0, scale_bits=2).tolist() == [[-1.0, 0.25, 0.75],
                                                                  [0.5, 1.0, -0.25]]
    assert quantize_rows(x, bound=0.5, scale_bits=3, nonnegative=True).tolist() == \
        [[0.0, 0.25, 0.5], [0.5, 0.5, 0.0]]


def test_protect_passes_its_parameters_and_keeps_them():
    rows = np.array([[0.3, -2.0], [0.55, 0.9], [1.7, 0.1]])
    out = protect(rows, bound=1.0, scale_bits=3, nonnegative=True, max_clipped=1.0)
    q = np.round(np.clip(rows, 0, 1) * 8).astype(int)   # no ties in these values
    assert out.integer_distances.tolist() == _exact(q)
    assert out.distances.tolist() == [[v / 64 for v in r] for r in _exact(q)]
    assert (out.bound, out.scale_bits, out.nonnegative) == (1.0, 3, True)
    assert out.result.party_names == ["client-0", "client-1", "client-2"]
    # segments and noise_segments reach the protocol: l=1, t=2 needs 2+4-1 = 5 parties
    with pytest.raises(ParameterError):
        protect(rows, bound=1.0, noise_segments=2, max_clipped=1.0)
    five = np.arange(10.0).reshape(5, 2) / 10
    wide = protect(five, bound=1.0, segments=2, noise_segments=1)
    assert wide.distances.tolist() == protect(five, bound=1.0).distances.tolist()
    assert wide.result.parameters["segments"] == 2


def test_protect_refuses_clipping_by_default():
    with pytest.raises(InputError, match="outside the public bound"):
        protect(np.array([[0.3, -2.0], [0.5, 0.9], [1.7, 0.1]]), bound=1.0)


def test_group_sums_more_groups_than_used_and_the_errors():
    rows = np.array([[0.5, 0.25], [0.75, 0.5], [1.0, 1.0]])
    out = secure_group_sums(rows, [2, 0, 2], n_groups=4, bound=1.0, scale_bits=4,
                            nonnegative=True)
    assert out.totals.tolist() == [[0.75, 0.5], [0.0, 0.0], [1.5, 1.25], [0.0, 0.0]]
    default = secure_group_sums(rows, [2, 0, 2], bound=1.0, scale_bits=4, nonnegative=True)
    assert default.totals.shape == (3, 2)
    with pytest.raises(ParameterError, match=re.escape(
            "groups must give one group per client: expected 3, got 2")):
        secure_group_sums(rows, [0, 1], bound=1.0)
    with pytest.raises(ParameterError, match=re.escape(
            "group indices must lie in [0, 2), got [0, 2]")):
        secure_group_sums(rows, [0, 1, 2], n_groups=2, bound=1.0)
    with pytest.raises(ParameterError, match=re.escape(
            "group indices must lie in [0, 3), got [-1, 2]")):
        secure_group_sums(rows, [-1, 1, 2], bound=1.0)


def test_group_sums_of_a_party_holding_several_clients_near_the_bound():
    # one party holds three clients of one group, each at the bound: its contribution is
    # 3 R, which the secure sum accepts because the bound is scaled by the largest count
    rows = np.array([[1.0, 1.0], [1.0, 0.5], [1.0, 1.0], [0.25, 0.0], [0.5, 0.5]])
    out = secure_group_sums(rows, [0, 0, 0, 1, 1], bound=1.0, scale_bits=4, nonnegative=True,
                            parties=["a", "a", "a", "b", "c"])
    assert out.totals.tolist() == [[3.0, 2.5], [0.75, 0.5]]
    signed = secure_group_sums(-rows, [0, 0, 0, 1, 1], bound=1.0, scale_bits=4,
                               parties=["a", "a", "a", "b", "c"])
    assert signed.totals.tolist() == [[-3.0, -2.5], [-0.75, -0.5]]


def test_kmeans_from_distances_checks_k_and_passes_options():
    x = np.array([[0.0, 0.0], [0.0, 1.0], [9.0, 9.0], [9.0, 8.0], [20.0, 0.0]])
    d = ((x[:, None] - x[None]) ** 2).sum(-1)
    assert kmeans_from_distances(d, 1).tolist() == [0] * 5
    labels = kmeans_from_distances(d, 5)
    assert sorted(labels.tolist()) == [0, 1, 2, 3, 4] and labels.dtype == np.int64
    for bad in (0, 6, -1):
        with pytest.raises(ParameterError, match=re.escape(
                f"n_clusters must be in [1, 5], got {bad}")):
            kmeans_from_distances(d, bad)
    three = kmeans_from_distances(d, 3.0)
    assert len(set(three.tolist())) == 3


def test_kmeans_from_distances_seed_and_n_init_reach_sklearn():
    from sklearn.cluster import KMeans

    from omnifc._geometry import classical_mds

    rng = np.random.default_rng(3)
    x = rng.uniform(0, 1, (40, 2))
    d = ((x[:, None] - x[None]) ** 2).sum(-1)
    coords = classical_mds(d)
    for seed in (0, 4):
        want = KMeans(6, random_state=seed, n_init=1).fit(coords).labels_
        assert kmeans_from_distances(d, 6, random_state=seed, n_init=1).tolist() == \
            want.tolist()
    default = KMeans(6, random_state=0, n_init="auto").fit(coords).labels_
    assert kmeans_from_distances(d, 6).tolist() == default.tolist()
    # n_init reaches KMeans: ten restarts give another partition than one on these data
    ten = KMeans(6, random_state=0, n_init=10).fit(coords).labels_
    assert ten.tolist() != default.tolist()
    assert kmeans_from_distances(d, 6, n_init=10).tolist() == ten.tolist()


def test_ward_of_one_row_and_int_cut():
    assert ward_from_distances(np.zeros((1, 1)), 1).tolist() == [0]
    assert ward_from_distances(np.zeros((1, 1)), 1).dtype == np.int64
    x = np.array([[0.0], [1.0], [10.0], [11.0]])
    d = (x - x.T) ** 2
    labels = ward_from_distances(d, 2.0)
    assert labels.dtype == np.int64 and labels.tolist() == [0, 0, 1, 1]


# --- secure_group_sums: what reaches the secure sum, against hand-quantized Python integers ---

def _q(value, q, bound, nonnegative=False):
    """Independent quantizer: floor(2^q clip(x) + 1/2) with exact fractions (round half up)."""
    from fractions import Fraction
    from math import floor

    x = Fraction(float(value))
    x = min(max(x, Fraction(0) if nonnegative else -Fraction(bound)), Fraction(bound))
    return floor(x * 2**q + Fraction(1, 2))


def _group_totals(rows, groups, n_groups, q, bound, nonnegative=False):
    totals = [[0] * len(rows[0]) for _ in range(n_groups)]
    for row, g in zip(rows, groups):
        for j, v in enumerate(row):
            totals[g][j] += _q(v, q, bound, nonnegative)
    return totals


@pytest.fixture
def sum_spy(monkeypatch):
    """Record the arguments of every omnifc.secure_sum call, then run the real one."""
    import omnifc._secure_sum as module

    real, calls = module.secure_sum, []

    def spy(contributions, **kwargs):
        calls.append((dict(contributions), kwargs))
        return real(contributions, **kwargs)

    monkeypatch.setattr(module, "secure_sum", spy)
    return calls


def test_group_sums_signed_and_nonnegative_totals_are_the_hand_quantized_sums(sum_spy):
    # party "a" holds a positive and a negative client of group 0: only nonnegative=True
    # clips the negative one to 0 before the party adds them (0.40625 + 0, not 0.40625 - 0.3)
    rows = [[0.4, -0.3], [-0.3, 0.7], [1.6, -2.5], [0.11, 0.9], [-0.05, 0.26]]
    groups = [0, 0, 1, 1, 0]
    parties = ["a", "a", "b", "c", "c"]
    signed = secure_group_sums(np.array(rows), groups, bound=1.5, scale_bits=5,
                               parties=parties)
    want = _group_totals(rows, groups, 2, 5, 1.5)
    assert signed.result.integer_total.tolist() == want
    assert signed.totals.tolist() == [[v / 32 for v in r] for r in want]
    assert signed.totals.dtype == np.float64
    assert signed.result.parameters["nonnegative"] is False
    nonneg = secure_group_sums(np.array(rows), groups, bound=1.5, scale_bits=5,
                               nonnegative=True, parties=parties)
    want_nonneg = _group_totals(rows, groups, 2, 5, 1.5, nonnegative=True)
    assert nonneg.result.integer_total.tolist() == want_nonneg
    assert nonneg.result.parameters["nonnegative"] is True
    # the difference is exactly the negative entries (clipped to 0 only with nonnegative)
    assert [[a - b for a, b in zip(x, y)] for x, y in zip(want_nonneg, want)] == \
        [[10 + 2, 10], [0, 48]]   # -q(-0.3) - q(-0.05), -q(-0.3); -q(-2.5 clipped to -1.5)
    assert [kw["nonnegative"] for _, kw in sum_spy] == [False, True]
    assert [kw["scale_bits"] for _, kw in sum_spy] == [5, 5]


def test_group_sums_options_reach_the_secure_sum(sum_spy):
    rows = np.array([[0.5, 0.25], [0.75, -0.5], [0.125, 1.0]])
    out = secure_group_sums(rows, [1, 0, 1], bound=1.0, scale_bits=3,
                            primes=[2147483629], deadline=30.0)
    assert out.result.parameters["primes"] == [2147483629]   # the default would be 2^31 - 1
    assert out.totals.tolist() == [[0.75, -0.5], [0.625, 1.25]]
    (_, kwargs), = sum_spy
    assert kwargs == {"bound": 1.0, "scale_bits": 3, "nonnegative": False,
                      "primes": [2147483629], "deadline": 30.0}
    with pytest.raises(ParameterError):
        secure_group_sums(rows, [1, 0, 1], bound=1.0, transport="carrier-pigeon")


def test_group_sums_one_contribution_per_party_and_the_bound_per_party(sum_spy):
    rows = [[0.5, -0.75], [1.0, 0.25], [-1.0, 1.0], [0.375, 0.5]]
    out = secure_group_sums(np.array(rows), [0, 0, 1, 0], bound=1.0, scale_bits=3,
                            parties=["a", "a", "b", "b"])
    contributions, kwargs = sum_spy[0]
    assert list(contributions) == ["a", "b"]                  # 2 contributions, not 4
    assert out.result.parameters["parties"] == 2
    assert out.result.parameters["party_names"] == ["a", "b"]
    assert np.asarray(contributions["a"]).tolist() == [[1.5, -0.5], [0.0, 0.0]]
    assert np.asarray(contributions["b"]).tolist() == [[0.375, 0.5], [-1.0, 1.0]]
    assert out.result.integer_total.tolist() == _group_totals(rows, [0, 0, 1, 0], 2, 3, 1.0)
    # party "a" holds two clients of group 0: the public bound is 2 R; "b" one per group
    assert kwargs["bound"] == 2.0 and out.result.parameters["bound"] == 2.0
    # one client per party (or a party's clients in distinct groups): the bound stays R
    secure_group_sums(np.array(rows), [0, 1, 0, 1], bound=1.0, scale_bits=3,
                      parties=["a", "a", "b", "b"])
    secure_group_sums(np.array(rows), [0, 0, 1, 0], bound=1.0, scale_bits=3)
    assert [kw["bound"] for _, kw in sum_spy[1:]] == [1.0, 1.0]
    # three clients of one party in one group next to a party of one: 3 R (largest count)
    secure_group_sums(np.array(rows), [1, 1, 1, 0], bound=1.0, scale_bits=3,
                      parties=["a", "a", "a", "b"])
    assert sum_spy[-1][1]["bound"] == 3.0


def test_group_sums_labels_are_cast_to_integers():
    rows = np.array([[0.5, 0.25], [0.75, 0.5], [0.125, 1.0]])
    out = secure_group_sums(rows, np.array([[1.0], [0.0], [1.0]]), bound=1.0, scale_bits=3)
    assert out.totals.tolist() == [[0.75, 0.5], [0.625, 1.25]]


def test_default_scale_bits_is_16():
    # 1 + 2^-17 is a tie at 16 bits (rounds up to 1 + 2^-16); exact at 17, 1.0 at 15
    value = 1.0 + 2.0**-17
    assert _q(value, 16, 2.0) == 2**16 + 1
    want = (2**16 + 1) / 2**16
    assert quantize_rows(np.array([[value]]), bound=2.0).tolist() == [[want]]
    sums = secure_group_sums(np.array([[value], [0.0]]), [0, 0], bound=2.0)
    assert sums.totals.tolist() == [[want]]
    assert sums.result.parameters["scale_bits"] == 16
    out = protect(np.array([[value], [0.0], [0.0]]), bound=2.0)
    assert out.scale_bits == 16
    assert out.integer_distances[0, 1] == (2**16 + 1) ** 2
    assert out.distances[0, 1] == want**2


# -- folded in from test_common_bites2.py -------------------------------------------------
# omnifc.adapters._common: the survivors of the 2026-11-30 re-run (mutation testing, issue 14).
#
# ``ward_from_distances`` accepts what ``check_distance_matrix`` accepts (asymmetry and a
# diagonal up to 1e-9 of the scale, e.g. a protocol's D after float arithmetic) and clusters
# like scikit-learn's ward on the vectors; ``plaintext_distances`` is exact on integer rows
# up to 2^40 (checked against Python integers where float64 sums would round).

def _partition(labels):
    groups = {}
    for i, c in enumerate(np.asarray(labels).tolist()):
        groups.setdefault(c, set()).add(i)
    return {frozenset(g) for g in groups.values()}


def test_ward_accepts_the_tolerances_of_check_distance_matrix():
    x = np.array([[0.0, 0.0], [0.3, 0.1], [4.0, 4.2], [4.4, 3.9], [9.0, 0.5], [8.7, 0.1]])
    d = ((x[:, None] - x[None]) ** 2).sum(-1)
    noisy = d.copy()
    noisy[0, 1] += 1e-12                                  # |D - D^T| <= 1e-9 * scale
    noisy[2, 2] = 1e-12                                   # diagonal <= 1e-9 * scale
    for k in (2, 3, 4):
        want = AgglomerativeClustering(n_clusters=k, linkage="ward").fit_predict(x)
        got = ward_from_distances(noisy, k)
        assert _partition(got) == _partition(want)
        assert got.shape == (6,) and got.dtype == np.int64
        assert _partition(ward_from_distances(d, k)) == _partition(want)


def test_plaintext_distances_exact_on_integer_rows_below_2_to_40():
    # float64 sums of these squares round (checked: einsum gives another float); the
    # integer path gives the correctly rounded exact value
    a = [883257358527, 950800789499, 848616813520]
    x = np.array([a, [0, 0, 0], [1, -2, 3]], dtype=np.float64)
    exact = [[sum((p - q) ** 2 for p, q in zip(u, v)) for v in x.astype(np.int64).tolist()]
             for u in x.astype(np.int64).tolist()]
    got = plaintext_distances(x)
    assert got.tolist() == [[float(v) for v in row] for row in exact]
    diff = x[:, None, :] - x[None, :, :]
    assert np.einsum("ijk,ijk->ij", diff, diff)[0, 1] != float(exact[0][1])   # the witness
