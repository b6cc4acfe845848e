"""FLUX's spiked-null test (``omnifc.adapters.flux._spiked_null``): the bound's ratio test
with nothing told, against a Gaussian fitted with the contrasts' noise as its floor (issue
24, twenty-fifth pass), checked against computations written out here; and
benchmarks/flux_spiked_null.py, which judges the union of the default and the test."""

from __future__ import annotations

import json
import math
from fractions import Fraction

import numpy as np
import pytest
from sklearn.covariance import oas

from benchmark_scripts import load_benchmark
from omnifc.adapters._calibrated_k import mds_embedding
from omnifc.adapters.flux import _spiked_null as spiked
from oracles import split_federation, sq_distances


@pytest.fixture(scope="module")
def sn():
    return load_benchmark("flux_spiked_null")


@pytest.fixture(scope="module")
def free():
    return load_benchmark("flux_direction_free_bound")


def _federation(rng, n, rows, k, **kwargs):
    """``oracles.split_federation`` with each client's own effect along the first axis."""
    return split_federation(rng, n, rows, k, client_axes="first", **kwargs)


def _contrasts(g, k):
    return np.vstack([(g[:r].sum(axis=0) - r * g[r]) / np.sqrt(r * (r + 1))
                      * 2 * np.sqrt((k - 1) / k) for r in range(1, k)])


def _statistic(free, gram, d, n, expected):
    """T written out: the separation of m : n - m groups whose pooled spread is the top
    eigenvalue's excess over pure noise's, the log likelihood ratio at it, the largest over
    the m of at least two kept."""
    excess = max(np.linalg.eigvalsh(gram)[-1] - expected[0], 1e-3) / (n - 1)
    return max(free.log_likelihood_ratio(gram, m, math.sqrt(excess / (m / n * (1 - m / n))),
                                         d, told_centre=False)
               for m in range(2, n // 2 + 1))


def test_the_statistic_reads_the_separation_from_the_excess(sn, free):
    """Over m = 2 .. n / 2, each at the separation the excess gives: a lone outlier client
    (which m = 1 would explain best) does not enter; no excess over the noise, no
    evidence."""
    rng = np.random.default_rng(2)
    y = rng.standard_normal((6, 8))
    y[0, 0] += 12.0                                    # one client far off: a group of one
    y -= y.mean(axis=0)
    gram = y @ y.T
    expected = np.full(6, 9.0)
    got = spiked.ratio_statistic(gram[None], 8, 6, expected)[0]
    assert got == pytest.approx(_statistic(free, gram, 8, 6, expected), rel=1e-12)
    c = (np.linalg.eigvalsh(gram)[-1] - 9.0) / 5
    with_one = free.log_likelihood_ratio(gram, 1, math.sqrt(c / (1 / 6 * 5 / 6)), 8,
                                         told_centre=False)
    assert with_one > got + 1.0                        # m = 1 would have won
    assert spiked.ratio_statistic(gram[None], 8, 6, expected + 1.0)[0] != got   # reads expected
    quiet = spiked.ratio_statistic(gram[None], 8, 6, np.full(6, 1e9))[0]        # the floor
    assert abs(quiet) < 1e-3
    with pytest.raises(ValueError, match="n >= 4"):
        spiked.ratio_statistic(np.eye(3)[None], 8, 3, expected)
    for n in (4, 5):                                   # the smallest: two groups of two
        part = y[:n] - y[:n].mean(axis=0)
        g = part @ part.T
        assert spiked.ratio_statistic(g[None], 8, n, expected)[0] == pytest.approx(
            _statistic(free, g, 8, n, expected), rel=1e-12)


def test_the_spikes_are_the_eigenvalues_above_the_noise(sn):
    """A spike planted along one axis is found there, with c from its excess over the
    expected noise eigenvalue; eigenvalues below what noise gives are no spikes."""
    rng = np.random.default_rng(3)
    n, p = 6, 30
    y = rng.standard_normal((n, p))
    y[:, 4] += 12.0 * rng.standard_normal(n)           # a Gaussian client effect along e_4
    centred = y - y.mean(axis=0)
    values = np.sort(np.linalg.eigvalsh(centred @ centred.T))[::-1]
    expected = np.full(n, float(p))                    # a noise Gram's mean eigenvalue
    spikes = spiked.fitted_spikes(y, 1.0, expected)
    assert len(spikes) == int(np.sum(values[:n - 1] > p))
    c, v = spikes[0]
    assert c == pytest.approx((values[0] - p) / (n - 1), rel=1e-12)
    assert abs(v[4]) > 0.95 and np.linalg.norm(v) == pytest.approx(1.0)
    # the same spike in noise units: kappa scales the clients, not the excess's meaning
    c4, _ = spiked.fitted_spikes(2.0 * y, 4.0, expected)[0]
    assert c4 == pytest.approx(c, rel=1e-12)
    assert spiked.fitted_spikes(y, 1.0, np.full(n, values[0] + 1.0)) == []
    assert len(spiked.fitted_spikes(y, 1.0, np.zeros(n))) == n - 1       # every axis, the last too
    exact = np.linalg.eigh(spiked.scaled_gram(y, 1.0))[0][::-1]          # its own computation
    assert spiked.fitted_spikes(y, 1.0, exact) == []                      # above, not at, the noise


def test_the_gram_of_a_stack_is_each_gram(sn):
    rng = np.random.default_rng(6)
    stack = rng.standard_normal((3, 5, 4))
    got = spiked.scaled_gram(stack, 2.0)
    for one, want in zip(stack, got):
        centred = one - one.mean(axis=0)
        assert np.allclose(centred @ centred.T / 2.0, want, rtol=1e-12, atol=1e-12)


def test_the_p_is_the_rank_among_draws_rebuilt_from_its_seed(sn, free):
    """Every step written out on D's own embedding: whitening by Cholesky's factor of the
    OAS covariance (not the eigenvectors the script uses; T and the spikes' excesses are the
    same for every whitening), the pilot's expected eigenvalues, the spikes mapped back to
    the descriptors' coordinates (L v for Cholesky's L), each draw's contrasts and clients
    from the same stream, S re-estimated, T read by the written-out statistic."""
    n, k, pilot, b = 6, 4, 7, 19
    rng = np.random.default_rng(8)
    rows = _federation(rng, n, 20, k, shift=0.8, small=3, client_sd=0.2, p=3)
    x = mds_embedding(sq_distances(rows))[0]
    g, f = x[:k * n].reshape(k, n, -1), x[k * n:]
    contrasts = _contrasts(g, k)
    kappa = (k - 1) / 4

    def gram_of(points, cov):
        lower = np.linalg.cholesky(cov)
        y = (points - points.mean(axis=0)) @ np.linalg.inv(lower).T
        return y @ y.T / kappa, y, lower

    s = oas(contrasts, assume_centered=True)[0]
    values, vectors = np.linalg.eigh(s)                # the stream's square root of S
    root = vectors * np.sqrt(values)
    draw = np.random.default_rng(5)

    def clients_of(spikes_original):
        noise = draw.standard_normal(contrasts.shape) @ root.T
        w = draw.standard_normal(f.shape) @ root.T
        for c, u in spikes_original:
            w = w + math.sqrt(c) * draw.standard_normal((n, 1)) * u[None, :]
        return noise, math.sqrt(kappa) * w

    pil = []
    for _ in range(pilot):
        noise, clients = clients_of([])
        pil.append(np.sort(np.linalg.eigvalsh(
            gram_of(clients, oas(noise, assume_centered=True)[0])[0]))[::-1])
    expected = np.mean(pil, axis=0)
    gram, y, lower = gram_of(f, s)
    ell, axes = np.linalg.eigh(gram)                   # each spike's sign as the stream's
    spikes = []
    for j in range(n - 1):
        lj, uj = ell[-1 - j], axes[:, -1 - j]
        if lj > expected[j]:
            v = y.T @ uj
            spikes.append(((lj - expected[j]) / (n - 1), lower @ (v / np.linalg.norm(v))))
    assert spikes                                       # the test exercises the spikes
    t = _statistic(free, gram, x.shape[1], n, expected)
    null = []
    for _ in range(b):
        noise, clients = clients_of(spikes)
        null.append(_statistic(free, gram_of(clients, oas(noise, assume_centered=True)[0])[0],
                               x.shape[1], n, expected))
    got = spiked.spiked_null_test(sq_distances(rows), n, groups=k, references=b, pilot=pilot, seed=5)
    assert got.statistic == pytest.approx(t, rel=1e-9, abs=1e-9)
    assert got.spikes == len(spikes)
    assert got.p_value == (1 + sum(v >= t for v in null)) / (1 + b)
    assert 0.05 < got.p_value < 0.95                      # draws on both sides of T


@pytest.mark.slow
def test_level_with_client_effects_and_power_on_groups(sn):
    """Six clients of 20 rows, four groups each. Clients of one distribution, and clients
    that each differ along one direction by two noise units (the null the noise-level test
    does not hold: it rejects 28 of these 40), are split at 0.05 about as often as the level
    allows (seen: 0 and 2 of 40); two groups of three, 7.2 noise units apart, mostly (seen:
    32 of 40)."""
    rng = np.random.default_rng(11)
    runs = 40
    nl = load_benchmark("flux_noise_level")

    def outcomes(**kw):
        feds = [sq_distances(_federation(rng, 6, 20, 4, **kw)) for _ in range(runs)]
        ps = [spiked.spiked_null_test(d, 6, groups=4, references=39, pilot=19, seed=s).p_value
              for s, d in enumerate(feds)]
        return feds, sum(p <= 0.05 for p in ps)

    assert outcomes()[1] <= 6                           # P(Binomial(40, 0.05) >= 7) = 0.005
    feds, split = outcomes(client_sd=0.45)              # 0.45 against a mean's noise of 0.22
    assert split <= 6
    assert sum(nl.noise_level_test(d, 6, groups=4, references=39, seed=s)[1] <= 0.05
               for s, d in enumerate(feds)) >= 20
    assert outcomes(shift=1.6, small=3)[1] >= 24


def test_the_defaults_ten_groups_seed_zero_and_one_draw(sn):
    """Ten groups and seed 0 unless told (the default's split, the runs' seeds); one
    reference draw and one pilot draw are enough to run."""
    rng = np.random.default_rng(9)
    rows = _federation(rng, 6, 20, 10, shift=0.6, small=3)
    d = sq_distances(rows)
    got = spiked.spiked_null_test(d, 6, references=9, pilot=5)
    assert got == spiked.spiked_null_test(d, 6, groups=10, references=9, pilot=5, seed=0)
    x = mds_embedding(d)[0]
    parts = (_contrasts(x[:60].reshape(10, 6, -1), 10), x[60:])
    assert spiked.spiked_of_parts(*parts, references=9, pilot=5) == spiked.spiked_of_parts(
        *parts, references=9, pilot=5, seed=0)
    assert spiked.spiked_of_parts(*parts, references=9, pilot=5).statistic == pytest.approx(
        got.statistic, rel=1e-9)
    one = spiked.spiked_null_test(d, 6, references=1, pilot=1)
    assert one.p_value in (0.5, 1.0)
    told = spiked.spiked_null_test(d, 6, references=9, pilot=5, seed=2)   # its evidence
    assert (told.references, told.pilot, told.seed) == (9, 5, 2)
    assert (got.references, got.pilot, got.seed) == (9, 5, 0)


def test_scale_free_and_refusals(sn):
    rng = np.random.default_rng(4)
    d = sq_distances(_federation(rng, 6, 20, 4, shift=0.6, small=3))
    r = spiked.spiked_null_test(d, 6, groups=4, references=9, pilot=5, seed=1)
    assert spiked.spiked_null_test(9 * d, 6, groups=4, references=9, pilot=5,
                                   seed=1).p_value == r.p_value
    for bad in ({"references": 0}, {"pilot": 0}):
        with pytest.raises(ValueError, match="must be >= 1"):
            spiked.spiked_null_test(d, 6, groups=4, **bad)
    with pytest.raises(ValueError, match="D must be"):
        spiked.spiked_null_test(d[:-1, :-1], 6, groups=4)


def _rec(kind, shift, rows, x, classes, seed, p, default, planted=None):
    rec = {"kind": kind, "run": [shift, 6, rows, x, classes, seed], "p": p,
           "default": default, "spikes": 1}
    if planted is not None:
        rec["planted"] = planted
    return rec


def test_the_table_counts_cells_of_twelve(sn):
    """Per cell of 12 runs: the default right in 11 and 10, the spiked-null test (K = 2 at
    p <= 0.01, p = 0.01 included) in 11 and 12, the union in 12 and 12; cells where only the
    default is right, and where the test is right in 11 and 10 of 12 with the default in
    none; a cell of 11 runs is not counted; of two single groups the default splits one and
    the test (at p = 0.01) the other, the union both; another level reaches every column."""
    recs = [_rec("runs", "feature", 20, 1, 2, s, 0.01 if s < 11 else 0.5, 2 if s else 1, 2)
            for s in range(12)]
    recs += [_rec("runs", "concept", 50, 10, 10, s, 0.005, 2 if s < 10 else 1, 2)
             for s in range(12)]
    recs += [_rec("runs", "label", 20, 1, 2, s, 0.005, 2, 2) for s in range(11)]  # not 12
    recs += [_rec("runs", "label", 500, 1, 10, s, 0.5, 2, 2) for s in range(12)]
    recs += [_rec("runs", "conditional", 20, 10, 2, s, 0.005 if s < 11 else 0.5, 1, 2)
             for s in range(12)]
    recs += [_rec("runs", "conditional", 50, 1, 2, s, 0.005 if s < 10 else 0.5, 1, 2)
             for s in range(12)]
    recs += [_rec("one-group", "label", 500, g, 10, 1, 0.01 if g else 0.5, 1 if g else 2)
             for g in (0, 1)]
    lines = sn.table(recs)
    assert lines[:2] == ["| kind | shift | rows | classes | runs | default: K right / splits "
                         "| spiked-null test: K right / splits | union: K right / splits |",
                         "|---" * 8 + "|"]
    assert "| runs | feature | 20 | 2 | 12 | 11 | 11 | 12 |" in lines
    assert "| runs | concept | 50 | 10 | 12 | 10 | 12 | 12 |" in lines
    assert "| one-group | label | 500 | 10 | 2 | 1 | 1 | 2 |" in lines
    assert "| runs | label | 500 | 10 | 12 | 12 | 0 | 12 |" in lines
    assert "| runs | conditional | 20 | 2 | 12 | 0 | 11 | 11 |" in lines
    assert "| runs | conditional | 50 | 2 | 12 | 0 | 10 | 10 |" in lines
    assert lines[-1] == ("cells of 12 runs with K right in >= 11: default 2, spiked-null "
                         "test 3, union 4, of 5")
    loose = sn.table([_rec("runs", "feature", 20, 1, 2, s, 0.03, 1, 2) for s in range(12)],
                     alpha=0.05)
    assert "| runs | feature | 20 | 2 | 12 | 0 | 12 | 12 |" in loose


def test_the_union_asks_the_test_only_where_the_default_finds_one_cluster(sn):
    """The default's K where it is above 1, whatever the test says (K = 3 stays 3); else
    K = 2 at p <= alpha (p = alpha included), K = 1 above it."""
    assert [sn.union_k({"default": d, "p": p}) for d, p in
            ((3, 0.9), (2, 0.9), (3, 0.005), (1, 0.01), (1, 0.0100001), (1, 0.005))] == \
        [3, 2, 3, 2, 1, 2]
    assert sn.union_k({"default": 1, "p": 0.04}, alpha=0.05) == 2
    assert sn.union_k({"default": 1, "p": 0.06}, alpha=0.05) == 1


def _union_records(sn, *, extra=80, iid_split=3, splits=11, seeds=None):
    """A complete set of the fresh seeds' runs: the default right in the first half of the
    planted runs; the union right also in ``extra`` more (default 1, p = 0.005); the union
    splits ``iid_split`` iid runs (the spiked test) and ``splits`` single groups (half by
    the default, half by the test)."""
    grid = load_benchmark("bench_k_selection")
    lo, hi = sn.UNION_SEEDS if seeds is None else seeds
    planted, iid, single = [], [], []
    for seed in range(lo, hi + 1):
        for shift in grid.SHIFTS:
            for classes in (2, 10):
                for rows in (20, 50, 500):
                    for x in (1, 10):
                        planted.append(_rec("runs", shift, rows, x, classes, seed, 0.5, 1, 2))
                    for g in (0, 1):
                        single.append(_rec("one-group", shift, rows, g, classes, seed, 0.5, 1))
        for classes in (2, 10):
            for rows in (20, 50, 500):
                iid.append(_rec("runs", "none", rows, 1, classes, seed, 0.5, 1, 1))
    half = len(planted) // 2
    for r in planted[:half]:
        r["default"] = 2
    for r in planted[half:half + extra]:
        r["p"] = 0.005
    for r in iid[:iid_split]:
        r["p"] = 0.01
    for i, r in enumerate(single[:splits]):
        if i % 2:
            r["default"] = 2
        else:
            r["p"] = 0.01
    return planted, iid, single


def test_the_union_verdict_at_each_of_its_bounds(sn):
    """UNION_VERDICT on complete records of the fresh seeds: 576 planted, 72 iid and 576
    single groups; it holds at 69 of 72 iid runs kept whole and 11 of 576 single groups
    split, and not at 68 or 12; not when the union's gain is within the paired noise
    (written out here); incomplete with one run missing; a run given twice counts once, and
    runs of other seeds are ignored."""
    assert sn.UNION_SEEDS == (3469, 3480)
    planted, iid, single = _union_records(sn)
    assert (len(planted), len(iid), len(single)) == (576, 72, 576)
    v = sn.union_verdict(planted + iid + single)
    gain = np.array([1] * 80 + [0] * 496, dtype=float)     # union minus default, paired
    assert v["noise"] == pytest.approx(2 * gain.std(ddof=1) / math.sqrt(576) * 576)
    assert {k: v[k] for k in ("runs", "default", "union", "plus", "minus", "iid", "iid_one",
                              "single", "splits", "verdict")} == {
        "runs": 576, "default": 288, "union": 368, "plus": 80, "minus": 0, "iid": 72,
        "iid_one": 69, "single": 576, "splits": 11, "verdict": "holds"}
    for kwargs in ({"iid_split": 4}, {"splits": 12}):
        assert sn.union_verdict(sum(_union_records(sn, **kwargs), []))["verdict"] == \
            "does not hold"
    def noise(gain):
        return 2 * np.array([1] * gain + [0] * (576 - gain)).std(ddof=1) * math.sqrt(576)

    assert noise(3) > 3 and noise(4) < 4                   # a gain of 3 is within the noise
    assert sn.union_verdict(sum(_union_records(sn, extra=3), []))["verdict"] == \
        "does not hold"
    assert sn.union_verdict(sum(_union_records(sn, extra=4), []))["verdict"] == "holds"
    every = planted + iid + single
    for missing in (planted[5], iid[0], single[-1]):
        assert sn.union_verdict([r for r in every if r is not missing])["verdict"] == \
            "incomplete"
    other = [r for seeds in ((3433, 3434), (3468, 3468), (3481, 3481))
             for part in _union_records(sn, iid_split=72, seeds=seeds) for r in part]
    assert sn.union_verdict(every + planted[:3] + other) == v
    strict = sn.union_verdict(every, alpha=0.001)          # p = 0.005 and 0.01 no longer
    assert (strict["union"], strict["plus"], strict["iid_one"], strict["splits"]) == \
        (288, 0, 72, 5)
    assert "planted K right 288 against" in sn.union_lines(every, alpha=0.001)[0]
    lines = sn.union_lines(every)
    assert lines[:2] == ["union on seeds 3469-3480: planted K right 368 against the "
                         f"default's 288 of 576 (+80 / -0, noise {v['noise']:.1f}); iid one "
                         "cluster 69 of 72; single groups split 11 of 576",
                         "verdict (UNION_VERDICT): holds"]
    assert lines[2:] == ["union on seeds 3481-3492: planted K right 0 against the default's "
                         "0 of 0 (+0 / -0, noise 0.0); iid one cluster 0 of 0; single groups "
                         "split 0 of 0", "verdict (UNION_LEVEL_VERDICT): incomplete"]


def _binomial_tail(n, p, s):
    """P(Bin(n, p) >= s), exactly in rationals (Python integers)."""
    p = Fraction(p)
    return sum(math.comb(n, i) * p ** i * (1 - p) ** (n - i) for i in range(s, n + 1))


def test_most_splits_is_the_one_sided_binomial_bound(sn):
    """The second trial's bound, against exact rational binomial tails: the largest s with
    P(Bin(n, level) >= s) >= 0.05, for the trial's 576 groups and other sizes and levels."""
    for n, level in ((576, "0.02"), (576, "0.01"), (72, "0.05"), (40, "0.02"), (3, "0.5")):
        want = max(s for s in range(n + 1)
                   if _binomial_tail(n, Fraction(level), s) >= Fraction(1, 20))
        assert sn.most_splits(n, float(level)) == want
    assert sn.most_splits(576) == 17
    assert _binomial_tail(576, Fraction(2, 100), 12) > Fraction(47, 100)   # the first (c)


def test_the_second_union_verdict_at_each_of_its_bounds(sn):
    """UNION_LEVEL_VERDICT on complete records of its fresh seeds 3481-3492: it holds with
    17 of 576 single groups split and not with 18 (the first trial's bound was 11); the iid
    and gain bounds are the first trial's; the first trial's seeds are ignored, and the
    first trial ignores these; an unknown trial is refused."""
    assert sn.UNION_LEVEL_SEEDS == (3481, 3492)
    assert not set(range(3481, 3493)) & set(range(sn.UNION_SEEDS[0], sn.UNION_SEEDS[1] + 1))
    seeds = sn.UNION_LEVEL_SEEDS

    def verdict(**kwargs):
        return sn.union_verdict(sum(_union_records(sn, seeds=seeds, **kwargs), []),
                                trial="second")

    v = verdict(splits=17)
    assert (v["runs"], v["iid"], v["single"], v["splits"], v["iid_one"], v["verdict"]) == \
        (576, 72, 576, 17, 69, "holds")
    assert verdict(splits=18)["verdict"] == "does not hold"
    assert verdict(iid_split=4)["verdict"] == "does not hold"
    assert verdict(extra=3)["verdict"] == "does not hold"
    assert verdict(extra=4, splits=17)["verdict"] == "holds"
    mine = sum(_union_records(sn, seeds=seeds, splits=17), [])
    first = sum(_union_records(sn, splits=40), [])
    assert sn.union_verdict(mine + first, trial="second") == v
    assert sn.union_verdict(mine, trial="first")["verdict"] == "incomplete"
    assert sn.union_verdict(first, trial="first")["verdict"] == "does not hold"
    for missing in (0, 100):
        assert sn.union_verdict(mine[:missing] + mine[missing + 1:],
                                trial="second")["verdict"] == "incomplete"
    with pytest.raises(ValueError, match="trial must be one of"):
        sn.union_verdict(mine, trial="third")
    assert sn.union_lines(mine)[-1] == "verdict (UNION_LEVEL_VERDICT): holds"


def test_the_table_command_prints_the_union_verdict(sn, tmp_path, capsys):
    """--table prints the counts, then the union's line and its verdict on the files' records."""
    path = tmp_path / "r.jsonl"
    records = sum(_union_records(sn), [])
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    assert sn.main(["--table", str(path)]) == 0
    assert capsys.readouterr().out == "\n".join(sn.table(records) + sn.union_lines(records)) \
        + "\n"
    assert sn.union_lines(records)[1] == "verdict (UNION_VERDICT): holds"


def test_the_command_lines_defaults_and_refusals(sn, capsys):
    """The design seeds, every row count, class count and shift unless told; one kind of
    run is required, and --out with --runs or --one-group."""
    grid = load_benchmark("bench_k_selection")
    args = sn._parser().parse_args(["--runs", "--out", "x"])
    assert (args.seeds, args.rows, args.classes, args.shifts) == (
        "3433-3444", "20,50,500", "2,10", ",".join(grid.SHIFTS))
    assert sn._parser().description == sn.__doc__.splitlines()[0]
    for argv, says in ((["--seeds", "1"], "one of the arguments --runs --one-group --table "
                                          "--labels is required"),
                       (["--runs"], "--out is needed with --runs and --one-group")):
        with pytest.raises(SystemExit):
            sn.main(argv)
        assert says in capsys.readouterr().err


@pytest.mark.slow
def test_the_command_line_writes_resumes_and_counts(sn, tmp_path, capsys, monkeypatch):
    """In process (so mutation testing sees it): one seed, one class count, one row count;
    the records are the functions' on the grid's runs; a record lost is written again, the
    same, and nothing else; the single groups of two shifts, not recomputed on resume; the
    table."""
    runs, one = tmp_path / "runs.jsonl", tmp_path / "one.jsonl"
    common = ["--seeds", "3433", "--classes", "2", "--rows", "20"]
    assert sn.main(["--runs", *common, "--shifts", "feature", "--out", str(runs)]) == 0
    got = [json.loads(line) for line in runs.read_text().splitlines()]
    assert capsys.readouterr().out == "\n".join(sn.table(got)) + "\n"
    assert [r["run"] for r in got] == [["feature", 6, 20, 1, 2, 3433],
                                       ["feature", 6, 20, 10, 2, 3433],
                                       ["none", 6, 20, 1, 2, 3433]]
    nl = load_benchmark("flux_noise_level")
    full, planted = nl._split_run("feature", 6, 20, 10, 2, 3433)
    want = spiked.spiked_null_test(full, 6, seed=3433)
    assert got[1]["p"] == want.p_value and got[1]["spikes"] == want.spikes
    assert got[1]["planted"] == 2 and got[2]["planted"] == 1
    whole = runs.read_text()
    runs.write_text("".join(whole.splitlines(keepends=True)[:2]))   # the last record lost
    sn.main(["--runs", *common, "--shifts", "feature", "--out", str(runs)])
    assert runs.read_text() == whole
    assert sn.main(["--one-group", *common, "--shifts", "feature,concept",
                    "--out", str(one)]) == 0
    ones = [json.loads(line) for line in one.read_text().splitlines()]
    assert [r["run"] for r in ones] == [[shift, 6, 20, g, 2, 3433]
                                        for shift in ("feature", "concept") for g in (0, 1)]
    (d1, n1) = nl.one_group_distances("concept", 20, 2, 3433)[1]
    assert ones[3]["p"] == spiked.spiked_null_test(d1, n1, seed=3433).p_value
    before = one.read_text()

    def recomputed(*args, **kwargs):
        raise AssertionError("a single group already recorded was computed again")

    monkeypatch.setattr(sn, "one_group_records", recomputed)
    sn.main(["--one-group", *common, "--shifts", "feature,concept", "--out", str(one)])
    assert one.read_text() == before
    capsys.readouterr()
    assert sn.main(["--table", str(runs), str(one)]) == 0
    printed = capsys.readouterr().out
    assert printed == "\n".join(sn.table(got + ones) + sn.union_lines(got + ones)) + "\n"
    assert "verdict (UNION_VERDICT): incomplete\n" in printed             # not its seeds
    assert printed.endswith("verdict (UNION_LEVEL_VERDICT): incomplete\n")
    assert "| runs | feature | 20 | 2 | 2 |" in printed
    assert "| one-group | concept | 20 | 2 | 2 |" in printed


@pytest.mark.timeout(300)
def test_the_labels_where_the_test_adds_two_groups_are_the_librarys(sn, capsys, tmp_path):
    """added_labels: only planted runs where the default found one cluster and p <= alpha
    count; the ARI is of the library's labels on the run's split D (cluster_split_clients,
    which asks the test itself), against the planted groups; --labels prints the count."""
    from sklearn.metrics import adjusted_rand_score

    from omnifc.adapters import flux

    nl = load_benchmark("flux_noise_level")
    run = ["feature", 6, 20, 1, 10, 3481]
    keep = {"kind": "runs", "run": run, "planted": 2, "default": 1, "p": 0.01, "spikes": 3}
    others = [dict(keep, p=0.0101), dict(keep, default=2),
              dict(keep, run=["none", 6, 20, 1, 10, 3481], planted=1),
              {"kind": "one-group", "run": run, "default": 1, "p": 0.001, "spikes": 0}]
    got = sn.added_labels([keep] + others)
    full, planted = nl._split_run(*run)
    _, found = flux.cluster_split_clients(full, 6, random_state=3481)
    assert found.decision.k == 1 and found.n_clusters == 2      # the library asks the test
    assert got == [(run, pytest.approx(adjusted_rand_score(planted, found.labels)))]
    assert sn.added_labels([keep], alpha=0.005) == []
    path = tmp_path / "r.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in [keep] + others))
    assert sn.main(["--labels", str(path)]) == 0
    ari = got[0][1]
    rest = [] if ari > 1 - 1e-9 else [round(ari, 2)]
    assert capsys.readouterr().out == (f"runs where the test added K = 2: 1; labels with ARI "
                                       f"1: {int(not rest)}; the others' ARI: {rest}\n")
