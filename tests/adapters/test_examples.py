"""``omnifc simulate --adapter NAME`` examples pinned line by line (mutation testing, issue 14).

Each example's report is recomputed here from the adapters' public functions and the
documented set-up of the example (data, seeds, parties), with the ARI from scikit-learn,
and compared with the lines the example prints; a spy that makes the secure path differ
from the plaintext one must turn ``ok`` (and the printed "identical") to False. The FMCL
and CLoVE examples run on smaller data here (their data generators are wrapped to fewer
clients and samples) so that each test takes a few seconds.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from sklearn.metrics import adjusted_rand_score

from finite_field import ParameterError
from omnifc.adapters import _examples, run_example

pytestmark = pytest.mark.timeout(240)


def _ari(a, b):
    return float(adjusted_rand_score(a, b))


def test_run_example_refuses_an_unknown_name():
    with pytest.raises(ParameterError, match=re.escape(
            "unknown adapter 'Raw'; choose from ['client2vec', 'clove', 'flux', 'fmcl', "
            "'raw']")):
        run_example("Raw")
    assert sorted(_examples.EXAMPLES) == ["client2vec", "clove", "flux", "fmcl", "raw"]


# ----------------------------------------------------------------------------- raw

def _raw_expected(seed):
    from omnifc.experiments import load_dataset
    from omnifc.experiments import split_non_iid
    from omnifc.adapters import raw

    data = load_dataset("iris")
    parts = split_non_iid(data.labels, 3, 0.5)
    parties = {f"party-{i}": data.features[idx] for i, idx in enumerate(parts)}
    truth = np.concatenate([data.labels[idx] for idx in parts])
    plain = raw.run(parties, bound=data.bound, nonnegative=data.nonnegative, n_clusters=3,
                    random_state=seed, secure=False)
    return parties, truth, plain


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 3])
def test_raw_example_lines(seed, monkeypatch):
    from omnifc.adapters import raw

    from omnifc.experiments import load_dataset

    parties, truth, plain = _raw_expected(seed)
    calls = []
    real = raw.run

    def spy(parties, **kwargs):
        calls.append((parties, kwargs))
        return real(parties, **kwargs)

    monkeypatch.setattr(raw, "run", spy)
    lines, ok = run_example("raw", seed=seed)
    ari = _ari(truth, plain.labels)
    assert lines == [
        "claim (OmniFC)   the reconstruction is exact, so centralized k-means on D equals "
        "k-means on the pooled plaintext",
        f"plaintext        k-means ARI vs truth {ari:.3f}",
        f"secure           k-means ARI vs truth {ari:.3f}; labels identical to plaintext: True",
    ]
    assert ok is True
    (p1, secure_kw), (p2, plain_kw) = calls
    assert list(p1) == ["party-0", "party-1", "party-2"]
    for name in parties:
        assert np.array_equal(p1[name], parties[name]) and np.array_equal(p2[name], parties[name])
    data = load_dataset("iris")
    assert data.nonnegative is True
    expected = {"bound": data.bound, "nonnegative": True, "n_clusters": 3, "random_state": seed}
    assert secure_kw == expected
    assert plain_kw == dict(expected, secure=False)


def test_raw_example_reports_a_difference(monkeypatch):
    from omnifc.adapters import raw

    real = raw.run

    def shifted(parties, **kwargs):
        result = real(parties, **kwargs)
        if kwargs.get("secure", True):
            result.labels = (result.labels + 1) % 3       # a secure path that went wrong
        return result

    monkeypatch.setattr(raw, "run", shifted)
    lines, ok = run_example("raw")
    assert ok is False
    assert lines[2].endswith("labels identical to plaintext: False")


# ----------------------------------------------------------------------------- client2vec

def test_client2vec_example_lines():
    from omnifc.adapters import client2vec as c2v
    from omnifc.adapters import protect

    lines, ok = run_example("client2vec", seed=1)
    clients, domains = c2v.synthetic_domains(seed=1)
    indices = [c2v.client_index(f, lab) for f, lab in clients]
    parties = np.arange(len(clients)) % 4
    unit = np.stack([i[0] / np.linalg.norm(i[0]) for i in indices])
    cos_f = 1.0 - protect(unit, bound=1.0, parties=parties).distances / 2.0
    same = domains[:, None] == domains[None, :]
    off = ~np.eye(len(domains), dtype=bool)
    protected = protect(np.stack([c2v.protected_vector(i) for i in indices]),
                        bound=c2v.protection_bound(), parties=parties)
    s_sec = c2v.pair_similarity(protected.distances)
    s_dir = c2v.direct_pair_similarity(indices)
    prev = np.arange(0, len(clients), 4)
    gap = max(np.abs(c2v.sampling_probabilities(s_sec, prev)
                     - c2v.sampling_probabilities(s_dir, prev)).max(),
              np.abs(c2v.mwu_weights(s_sec, [prev, prev + 1])
                     - c2v.mwu_weights(s_dir, [prev, prev + 1])).max())
    assert lines == [
        "claim (Client2Vec) within-domain feature-index cosine is ~1 and cross-domain cosine "
        "is low; sampling and MWU weights depend on the indices only through similarities",
        f"secure           feature cosine from D: within-domain mean "
        f"{cos_f[same & off].mean():.3f}, cross-domain mean {cos_f[~same].mean():.3f}",
        f"secure vs direct max |p - p'| over sampling and MWU weights: {gap:.1e} "
        "(quantization 2^-16 of unit vectors)",
    ]
    assert ok is True
    assert 0 < gap < 1e-3                               # quantization only


# ----------------------------------------------------------------------------- fmcl

@pytest.fixture
def small_fmcl(monkeypatch):
    from omnifc.adapters import fmcl

    real = fmcl.synthetic_domains
    seeds = []

    def smaller(**kwargs):
        seeds.append(kwargs)
        return real(clients_per_domain=5, samples=120, **kwargs)

    monkeypatch.setattr(fmcl, "synthetic_domains", smaller)
    return real, seeds


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 2])
def test_fmcl_example_lines(small_fmcl, seed):
    from omnifc.adapters import fmcl

    real, seeds = small_fmcl
    lines, ok = run_example("fmcl", seed=seed)
    assert seeds == [{"seed": seed}]
    clients, domains = real(clients_per_domain=5, samples=120, seed=seed)
    sig = [fmcl.signature(x, y, 10) for x, y in clients]
    means, weights = np.stack([s[0] for s in sig]), np.stack([s[1] for s in sig])
    direct = fmcl.fmcl_server(fmcl.fmcl_distances(means, weights))
    plain = fmcl.fmcl_server(fmcl.secure_thermometer_distances(means, weights, resolution=500,
                                                               secure=False))
    baseline = fmcl.kmeans_on_mean_embeddings(np.stack([x.mean(0) for x, _ in clients]), 3,
                                              random_state=seed)
    assert lines == [
        "claim (FMCL)     the overlap-aware class-wise distance recovers the domains under "
        "Dirichlet(0.1) label skew (auto-K finds K = 3); k-means on mean embeddings "
        "does not",
        f"plaintext        direct FMCL: window {direct.window}, K = {direct.n_clusters}, "
        f"ARI {_ari(domains, direct.labels):.3f}; k-means on mean embeddings ARI "
        f"{_ari(domains, baseline):.3f}",
        f"secure           thermometer q=500: window {plain.window}, K = {plain.n_clusters}, "
        f"ARI {_ari(domains, plain.labels):.3f}; D and labels identical to the plaintext "
        f"thermometer path: True",
    ]
    assert ok is True


def test_fmcl_example_secure_path_and_a_difference(small_fmcl, monkeypatch):
    from omnifc.adapters import fmcl

    calls = []
    real = fmcl.secure_thermometer_distances

    def spy(means, weights, **kwargs):
        calls.append(kwargs)
        d = real(means, weights, **kwargs)
        if kwargs.get("secure", True):
            d = d.copy()
            d[0, 1] = d[1, 0] = 1e6                      # a secure path that went wrong
        return d

    monkeypatch.setattr(fmcl, "secure_thermometer_distances", spy)
    lines, ok = run_example("fmcl", seed=0)
    assert [sorted(kw) for kw in calls] == [["parties", "resolution"],
                                           ["resolution", "secure"]]
    assert calls[0]["resolution"] == calls[1]["resolution"] == 500
    assert np.array_equal(calls[0]["parties"], np.arange(15) % 3)
    assert calls[1]["secure"] is False
    assert ok is False and lines[2].endswith("path: False")


# ----------------------------------------------------------------------------- clove

@pytest.fixture
def small_clove(monkeypatch):
    from omnifc.adapters import clove

    real = clove.linear_mixture
    calls = []

    def smaller(**kwargs):
        calls.append(kwargs)
        return real(clients_per_cluster=2, train_points=60, **kwargs)

    monkeypatch.setattr(clove, "linear_mixture", smaller)
    return real, calls


def test_clove_example_lines(small_clove):
    from omnifc.adapters import clove

    real, calls = small_clove
    seed = 1
    lines, ok = run_example("clove", seed=seed)
    assert calls == [{"delta": 1.0, "seed": seed}, {"delta": 0.1, "seed": seed}]
    want = ["claim (CLoVE)    clustering loss vectors recovers the true clusters (ARI = 1) "
            "within 2 rounds, where IFCA from the same random models gets stuck"]
    for delta in (1.0, 0.1):
        clients, truth, _ = real(clients_per_cluster=2, train_points=60, delta=delta, seed=seed)
        start = clove.random_unit_models(5, 20, seed=1000 + seed)
        plain = clove.run_clove(clients, start, n_clusters=5, rounds=3, seed=seed,
                                secure=False)
        ifca = clove.run_ifca(clients, start, rounds=3)
        fmt = lambda run: " ".join(f"{_ari(truth, a):.2f}" for a in run.assignments)  # noqa
        used = len(set(ifca.assignments[0].tolist()))
        want.append(f"delta={delta:<4}       ARI per round: CLoVE plaintext [{fmt(plain)}], "
                    f"secure [{fmt(plain)}] (identical: True); IFCA [{fmt(ifca)}] "
                    f"({used} of 5 models picked in round 0)")
    want.append("note             IFCA only keeps the merges of round 0 (a model no client "
                "picks then is never picked again): at delta 0.1 1-2 models win, at delta 1 "
                "mostly 3-4, so IFCA's ARI there is often 0.57-0.75 (below 0.5 on 11 of 30 "
                "seeds)")
    assert lines == want
    assert ok is True


def test_clove_example_secure_arguments_and_a_difference(small_clove, monkeypatch):
    from omnifc.adapters import clove

    calls = []
    real = clove.run_clove

    def spy(clients, start, **kwargs):
        calls.append(kwargs)
        run = real(clients, start, **kwargs)
        if kwargs.get("secure", True) and kwargs["seed"] is not None:
            run.assignments[-1] = (run.assignments[-1] + 1) % 5    # a secure path gone wrong
        return run

    monkeypatch.setattr(clove, "run_clove", spy)
    lines, ok = run_example("clove", seed=2)
    secure_kw = calls[0]
    assert sorted(secure_kw) == ["n_clusters", "parties", "rounds", "seed"]
    assert (secure_kw["n_clusters"], secure_kw["rounds"], secure_kw["seed"]) == (5, 3, 2)
    assert np.array_equal(secure_kw["parties"], np.arange(10) % 5)
    assert calls[1] == {"n_clusters": 5, "rounds": 3, "seed": 2, "secure": False}
    assert len(calls) == 4
    assert ok is False
    assert "(identical: False)" in lines[1] and "(identical: False)" in lines[2]


# ----------------------------------------------------------------------------- flux

def test_flux_example_lines(monkeypatch):
    """The example runs run_flux's default pipeline (split rows: 10 delete-a-group
    descriptors, the min-p test at 0.01) and the paper's knee on the descriptors' own D;
    recomputed here in the clear, from the split descriptors up (split_descriptors under
    the example's per-client generators)."""
    from omnifc.adapters import flux
    from omnifc.adapters._common import plaintext_distances, quantize_rows

    seed = 1
    projection = flux.shared_projection(50, 10, max_value=8.0)
    bound = flux.descriptor_bound(projection, 8.0)
    want = ["claim (FLUX)     adaptive DBSCAN finds the number of distribution groups "
            "without K; label-free test-time assignment works for P(X) shifts, not for "
            "P(Y|X) swaps"]
    for shift in flux.SHIFTS:
        (train, groups), (new, new_groups) = flux.shift_scenario(shift, seed=seed)
        per_client = [flux.split_descriptors([x], [y], projection, 10, form="weighted_all",
                                             rng=np.random.default_rng([seed, i]), groups=10)
                      for i, (x, y) in enumerate(train)]
        left = [np.concatenate([g[j] for g in per_client]) for j in range(10)]
        desc = np.stack([flux.descriptor(x, y, projection, 10) for x, y in train])
        new_desc = np.stack([flux.descriptor(x, y, projection, 10) for x, y in new])
        q = lambda rows: plaintext_distances(quantize_rows(rows, bound=bound, scale_bits=16))
        d = flux.split_whitened_distances(q(np.vstack(left + [desc])), len(train), groups=10)
        knee = flux.adaptive_dbscan(q(desc), eps_rule="knee")
        found = flux.calibrated_k(d, statistic="axis_or_gap", alpha=0.01, references=199,
                                  random_state=seed)
        prefix = q(np.vstack([desc, new_desc])[:, :20])      # [mu_x, sigma_x]: 2 l = 20
        assigned = flux.assign_new_clients(prefix, found.labels)
        majority = {c: np.bincount(groups[found.labels == c]).argmax()
                    for c in set(found.labels.tolist())}
        accuracy = np.mean([majority[c] == g for c, g in zip(assigned, new_groups)])
        want.append(f"{shift:<7}          clusters found (2 groups): paper's knee -> "
                    f"{knee.n_clusters}, omnifc's default -> {found.k} (ARI "
                    f"{_ari(groups, found.labels):.2f}, one-cluster p = "
                    f"{found.p_value:.3f}); test-time accuracy {accuracy:.2f}")
    want.append("note             secure D equals the plaintext D bit for bit: True; with the "
                "paper's eps_scaling 1.0 every client whose nearest neighbour lies beyond the "
                "knee is a singleton (DBSCAN min_samples 2), so groups come back split, never "
                "merged; omnifc's default (run_flux's: flux.DEFAULT_RECIPE) reads each "
                "client's sampling noise from the D of its descriptor and its descriptors "
                "without each of 10 random groups of its rows, and tests one cluster at 0.01 "
                "against references drawn from that D, with no knob")
    calls = []
    real = flux.block_distances

    def spy(desc, **kwargs):
        calls.append(kwargs)
        return real(desc, **kwargs)

    monkeypatch.setattr(flux, "block_distances", spy)
    prefix_calls = []
    real_prefix = flux.prefix_distances

    def prefix_spy(train_desc, new_desc, **kwargs):
        prefix_calls.append(kwargs)
        return real_prefix(train_desc, new_desc, **kwargs)

    monkeypatch.setattr(flux, "prefix_distances", prefix_spy)
    split_calls = []
    real_split = flux.split_block_distances

    def split_spy(desc, splits, **kwargs):
        split_calls.append((splits, kwargs))
        return real_split(desc, splits, **kwargs)

    monkeypatch.setattr(flux, "split_block_distances", split_spy)
    lines, ok = run_example("flux", seed=seed)
    assert len(prefix_calls) == len(flux.SHIFTS)
    first = prefix_calls[0]
    assert np.array_equal(first.pop("parties"), np.arange(30) % 4)      # 20 train + 10 new
    assert sorted(first) == ["bound", "n_classes", "n_components", "normalization"]
    assert lines == want
    assert ok is True
    assert len(calls) == len(flux.SHIFTS) and len(split_calls) == 2 * len(flux.SHIFTS)
    (paper_kw,) = calls[:1]
    (left, secure_kw), (left_plain, plain_kw) = split_calls[:2]
    assert np.array_equal(secure_kw.pop("parties"), np.arange(20) % 4)   # 20 train clients
    assert np.array_equal(paper_kw.pop("parties"), np.arange(20) % 4)
    for groups in (left, left_plain):
        assert len(groups) == 10 and all(g.shape == (20, 220) for g in groups)
    assert paper_kw == dict(n_components=10, n_classes=10, bound=bound)
    assert secure_kw == dict(bound=bound) and plain_kw == dict(bound=bound, secure=False)


def test_flux_example_reports_a_difference(monkeypatch):
    from omnifc.adapters import flux

    real = flux.split_block_distances

    def wrong(desc, splits, **kwargs):
        d = real(desc, splits, **kwargs)
        if kwargs.get("secure", True):
            d = d.copy()
            d[0, 1] = d[1, 0] = d[0, 1] + 1.0            # a secure path that went wrong
        return d

    monkeypatch.setattr(flux, "split_block_distances", wrong)
    lines, ok = run_example("flux", seed=0)
    assert ok is False
    assert "bit for bit: False;" in lines[-1]


def test_run_example_default_seed_is_zero():
    # the documented default (``omnifc simulate --adapter NAME --seed``, default 0)
    default = run_example("client2vec")
    assert default == run_example("client2vec", seed=0)
    assert default != run_example("client2vec", seed=1)    # the seed matters here


def test_client2vec_example_protects_by_organization_and_reports_a_gap(monkeypatch):
    from omnifc.adapters import _common
    from omnifc.adapters import client2vec as c2v

    calls = []
    real = _common.protect

    def spy(rows, **kwargs):
        calls.append(kwargs)
        return real(rows, **kwargs)

    monkeypatch.setattr(_common, "protect", spy)
    lines, ok = run_example("client2vec", seed=0)
    n = len(c2v.synthetic_domains(seed=0)[0])
    assert len(calls) == 2
    for kwargs in calls:
        assert np.array_equal(kwargs.pop("parties"), np.arange(n) % 4)
    assert calls == [{"bound": 1.0}, {"bound": c2v.protection_bound()}]
    assert ok is True
    # a secure similarity that went wrong (scaled): the gap is reported and ok is False
    real_similarity = c2v.pair_similarity
    monkeypatch.setattr(c2v, "pair_similarity", lambda d: 1.5 * real_similarity(d))
    lines, ok = run_example("client2vec", seed=0)
    gap = float(lines[2].split(": ")[1].split(" ")[0])
    assert 1e-3 < gap < 1.0 and ok is False


def test_clove_example_ok_needs_both_deltas(small_clove, monkeypatch):
    from omnifc.adapters import clove

    real = clove.run_clove
    secure_calls = []

    def spy(clients, start, **kwargs):
        run = real(clients, start, **kwargs)
        if kwargs.get("secure", True):
            secure_calls.append(kwargs)
            if len(secure_calls) == 1:                        # only delta = 1.0 goes wrong
                run.assignments[-1] = (run.assignments[-1] + 1) % 5
        return run

    monkeypatch.setattr(clove, "run_clove", spy)
    lines, ok = run_example("clove", seed=0)
    assert len(secure_calls) == 2
    assert "(identical: False)" in lines[1] and "(identical: True)" in lines[2]
    assert ok is False


def test_flux_example_ok_needs_every_shift(monkeypatch):
    from omnifc.adapters import flux

    real = flux.split_block_distances
    secure_calls = []

    def wrong_once(desc, splits, **kwargs):
        d = real(desc, splits, **kwargs)
        if kwargs.get("secure", True):
            secure_calls.append(1)                       # the D the example compares
            if len(secure_calls) == 1:                   # only the first shift goes wrong
                d = d.copy()
                d[0, 1] = d[1, 0] = d[0, 1] + 1.0
        return d

    monkeypatch.setattr(flux, "split_block_distances", wrong_once)
    lines, ok = run_example("flux", seed=0)
    assert len(secure_calls) == len(flux.SHIFTS)
    assert ok is False and "bit for bit: False;" in lines[-1]
