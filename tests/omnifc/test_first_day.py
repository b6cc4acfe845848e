"""Issue 13, a new user's first day: API-side fixes (one array refused, clipping reported
and bounded, scikit-learn conformance)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from scipy.spatial.distance import cdist

import omnifc
from omnifc._estimators import expected_failed_checks


def three_blobs(seed=0, n=30):
    rng = np.random.Generator(np.random.PCG64(seed))
    centres = np.array([[0.0, 0.0, 0.0, 0.0], [5.0, 5.0, 0.0, 0.0], [0.0, 5.0, 5.0, 0.0]])
    y = np.repeat(np.arange(3), n // 3)
    return centres[y] + rng.normal(scale=0.3, size=(n, 4)), y


# -- item 1: one 2-D array is not "one party per row" ----------------------------------
@pytest.mark.parametrize("fit", [
    lambda x: omnifc.FederatedClustering(n_clusters=3, bound=10.0).fit(x),
    lambda x: omnifc.KFed(n_clusters=3).fit(x),
    lambda x: omnifc.secure_distance_matrix(x, bound=10.0),
    lambda x: omnifc.FederatedClustering(n_clusters=3, bound=10.0).fit(list(x)),
])
def test_one_array_is_refused_with_the_fix_in_the_message(fit):
    x, _ = three_blobs()
    with pytest.raises(omnifc.InputError, match=r"list \(or dict name -> array\)"):
        fit(x)


def test_one_array_with_owners_gives_labels_in_the_rows_order():
    x, _ = three_blobs()
    owners = np.array(["a", "b", "c"] * 10)       # interleaved: row order != party order
    model = omnifc.FederatedClustering(n_clusters=3, bound=10.0, method="hierarchical",
                                       options={"linkage": "average"}).fit(x, owners=owners)
    assert model.party_names_ == ["a", "b", "c"]
    q = np.round(x * 2**16) / 2**16
    expected = omnifc.cluster(cdist(q, q, "sqeuclidean"), "hierarchical", 3,
                              linkage="average")
    assert omnifc.adjusted_rand(expected, model.labels_) == 1.0
    assert model.labels_.shape == (30,)
    for name, labels in zip("abc", model.party_labels_):
        assert np.array_equal(labels, model.labels_[owners == name])
    kfed = omnifc.KFed(n_clusters=3, local_clusters=1, random_state=0).fit(x, owners=owners)
    for name, labels in zip("abc", kfed.party_labels_):
        assert np.array_equal(labels, kfed.labels_[owners == name])


def test_labels_is_one_array_in_global_order():
    x, y = three_blobs()
    parts = [x[:7], x[7:20], x[20:]]
    model = omnifc.FederatedClustering(n_clusters=3, bound=10.0, random_state=0).fit(parts)
    assert isinstance(model.labels_, np.ndarray) and model.labels_.shape == (30,)
    assert np.array_equal(np.concatenate(model.party_labels_), model.labels_)
    assert omnifc.adjusted_rand(y, model.labels_) == 1.0
    assert model.n_features_in_ == 4


# -- item 3: clipping is reported per party and bounded --------------------------------
def test_clipping_reported_per_party_and_refused_above_the_limit():
    x, _ = three_blobs()
    parts = {"a": x[:10], "b": x[10:20], "c": x[20:].copy()}
    parts["c"][:, 0] = 50.0                        # a quarter of party c's entries
    with pytest.raises(omnifc.InputError, match=r"party 'c'.*10 of 40 entries \(25\.0%\)"):
        omnifc.FederatedClustering(n_clusters=3, bound=10.0).fit(parts)
    with pytest.raises(omnifc.InputError, match=r"party 'c'"):
        omnifc.secure_distance_matrix(parts, bound=10.0)
    model = omnifc.FederatedClustering(n_clusters=3, bound=10.0, max_clipped=1.0).fit(parts)
    assert model.clipped_ == {"a": (0, 0.0), "b": (0, 0.0), "c": (10, 0.25)}
    result = model.distance_result_
    assert result.clipped == {"a": 0, "b": 0, "c": 10}
    assert result.clipped_fraction == {"a": 0.0, "b": 0.0, "c": 0.25}


def test_clip_error_is_reachable_from_the_estimator():
    x, _ = three_blobs()
    big = [np.vstack([p] * 20) for p in (x[:10], x[10:20], x[20:])]
    big[2][0, 0] = 10.5                            # 1 of 800 entries: under the 1% limit
    model = omnifc.FederatedClustering(n_clusters=3, bound=10.0).fit(big)
    assert model.clipped_["party-2"] == (1, 1 / 800)
    with pytest.raises(omnifc.InputError, match=r"found 10\.5 at row 0"):
        omnifc.FederatedClustering(n_clusters=3, bound=10.0, clip="error").fit(big)


# -- item 8: scikit-learn conformance --------------------------------------------------
ESTIMATORS = [
    # bound 1000: some checks fit rows around 100 (which a bound of 10 would clip wholesale)
    omnifc.FederatedClustering(n_clusters=3, bound=1000.0, scale_bits=8, n_parties=3),
    omnifc.KFed(n_parties=3),
    *[cls(**kw) for cls in (omnifc.DistanceKMeans, omnifc.DistanceSpectral,
                            omnifc.DistanceFuzzyCMeans, omnifc.DistanceNMF,
                            omnifc.DistanceDBSCAN, omnifc.DistanceHierarchical,
                            omnifc.DistanceKMedoids)
      for kw in ({}, {"metric": "euclidean"})],
]


@pytest.mark.timeout(600)
@pytest.mark.parametrize("estimator", ESTIMATORS, ids=repr)
def test_scikit_learn_check_estimator(estimator):
    from sklearn.utils.estimator_checks import check_estimator

    expected = expected_failed_checks(estimator)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        results = check_estimator(estimator, on_fail=None, expected_failed_checks=expected)
    bad = [(r["check_name"], str(r["exception"])[:200]) for r in results
           if r["status"] == "failed"]
    assert bad == []
    xfailed = {r["check_name"] for r in results if r["status"] == "xfail"}
    assert xfailed == set(expected)            # every declared failure really fails
    assert len(results) > 40


def test_predict_where_the_method_has_one():
    x, _ = three_blobs(n=30)
    model = omnifc.FederatedClustering(n_clusters=3, bound=10.0, random_state=0,
                                       scale_bits=12).fit([x[:10], x[10:20], x[20:]])
    assert np.array_equal(model.predict([x[:10], x[10:20], x[20:]]), model.labels_)
    new = np.random.Generator(np.random.PCG64(5)).uniform(-1, 6, (9, 4))
    predicted = model.predict([new[:4], new[4:]])
    # independent oracle: nearest centroid of the quantized training rows, in plaintext
    q = np.round(x * 2**12) / 2**12
    centres = np.array([q[model.labels_ == k].mean(axis=0) for k in range(3)])
    qn = np.round(new * 2**12) / 2**12
    expected = ((qn[:, None, :] - centres[None]) ** 2).sum(-1).argmin(axis=1)
    assert predicted.tolist() == expected.tolist()
    medoids = omnifc.FederatedClustering(method="kmedoids", n_clusters=3, bound=10.0,
                                         scale_bits=12).fit([x[:10], x[10:20], x[20:]])
    m = medoids.details_["medoid_indices"]
    model_free = medoids.labels_[m][((qn[:, None] - q[m][None]) ** 2).sum(-1)
                                                .argmin(axis=1)]
    assert medoids.predict([new[:4], new[4:]]).tolist() == model_free.tolist()
    assert not hasattr(omnifc.FederatedClustering(method="spectral"), "predict")


# -- item 9: plots and text a person can read ------------------------------------------
def test_known_sample_text_and_plot_say_what_was_measured(tmp_path):
    from omnifc.audit import AuditParameters, check_known_sample_attack

    params = AuditParameters(rows=569, parties=3, nonnegative=True)
    check = check_known_sample_attack(params, repeats=2)
    text = " ".join(check.details)
    assert "each party holds about 189 rows (569 rows over 3 parties" in text
    assert "about 100 rows" not in text
    exact_from = check.evidence["exact_from_k"]
    assert exact_from is not None
    (name, draw), = check.plots
    texts = draw(tmp_path / name)
    assert f"observed here: exact from k = {exact_from}" in texts
    assert any(t.startswith("k = d + 1 = 5") for t in texts)


@pytest.mark.slow
def test_known_sample_text_does_not_quote_an_assumed_row_count_as_the_sessions():
    """issue 25: `omnifc audit --config` said "~50 rows" for parties of 300-800 rows."""
    from omnifc.audit import check_known_sample_attack
    from omnifc.cli import build_parser
    from omnifc.cli.cmd_audit import parameters_from_args

    args = build_parser().parse_args(["audit", "--nonnegative", "--checks", "4"])
    assumed = parameters_from_args(args)
    assert assumed.rows_assumed and (assumed.rows, assumed.parties) == (150, 4)
    given = parameters_from_args(build_parser().parse_args(
        ["audit", "--nonnegative", "--rows", "1500", "--checks", "4"]))
    assert not given.rows_assumed
    check = check_known_sample_attack(assumed, repeats=2)
    text = " ".join(check.details) + check.finding
    assert "about 37 rows" not in text and "~37" not in text
    assert "assumed n = 150 rows over 4 parties (pass --rows" in text
    assert f"at least d + 1 = {assumed.dim + 1} rows" in text
    assert check.evidence["rows_assumed"] is True
    exact_from = check.evidence["exact_from_k"]
    assert f"any one party holding at least {exact_from} rows has enough" in check.finding
    check = check_known_sample_attack(given, repeats=2)
    assert "each party holds about 375 rows (1500 rows over 4 parties" in " ".join(check.details)


def test_privacy_views_plot_has_the_uniform_reference_and_p_values(tmp_path):
    from omnifc.audit import AuditParameters, check_empirical_privacy

    check = check_empirical_privacy(AuditParameters(), noise_source=np.random.Generator(
        np.random.PCG64(7)))
    (name, draw), = check.plots
    texts = draw(tmp_path / name)
    assert "uniform" in texts and "uniform ± 2σ" in texts
    titles = [t for t in texts if "A vs B: p = " in t]
    assert len(titles) == 2                    # both panels state their test's p-value
    assert any("in 20 equal bins" in t for t in texts)
    assert (tmp_path / name).read_bytes()[:4] == b"\x89PNG"
