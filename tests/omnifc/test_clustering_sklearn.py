"""scikit-learn's estimator checks: the one conformance run of the estimators.

The seven ``Distance*`` estimators with ``metric="euclidean"`` run every check as its own
test (``parametrize_with_checks``). The default ``metric="precomputed"`` ones and the
k-FED baseline run ``check_estimator`` with their declared failures
(``expected_failed_checks``), each of which must really fail. FederatedClustering's run is
README's exact call, in test_estimator_defaults.py.

The generic checks feed feature matrices (e.g. 50 x 2) and expect feature-matrix behaviour
(NaN refusal messages, ``n_features_in_``, negative values accepted), so they do not
apply to ``metric="precomputed"`` squared-distance input: that path runs the same fit code
after computing D, and is covered by test_clustering.py / test_clustering_units.py.
"""

from __future__ import annotations

import warnings

import pytest
from sklearn.utils.estimator_checks import parametrize_with_checks

import omnifc
from omnifc._estimators import expected_failed_checks

ESTIMATORS = [
    omnifc.DistanceKMeans(3, random_state=0, metric="euclidean"),
    omnifc.DistanceKMeans(3, variant="rows", random_state=0, metric="euclidean"),
    omnifc.DistanceSpectral(3, random_state=0, metric="euclidean"),
    omnifc.DistanceFuzzyCMeans(3, random_state=0, metric="euclidean"),
    omnifc.DistanceNMF(3, random_state=0, metric="euclidean"),
    omnifc.DistanceDBSCAN(metric="euclidean"),
    omnifc.DistanceHierarchical(3, metric="euclidean"),
    omnifc.DistanceKMedoids(3, metric="euclidean"),
]


# scikit-learn's array-API check only runs with SCIPY_ARRAY_API=1 (it skips itself
# otherwise); these estimators convert input to numpy, so it is left out rather than skipped.
_CHECKS = parametrize_with_checks(ESTIMATORS).mark
_PAIRS = [pair for pair in _CHECKS.args[1]
          if getattr(pair[1], "func", pair[1]).__name__ != "check_array_api_input"]


@pytest.mark.parametrize(_CHECKS.args[0], _PAIRS, **_CHECKS.kwargs)
def test_sklearn_compatible_estimator(estimator, check):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        check(estimator)


#: The estimators whose ``expected_failed_checks`` are not empty.
DECLARED = [
    omnifc.KFed(n_parties=3),
    *[cls() for cls in (omnifc.DistanceKMeans, omnifc.DistanceSpectral,
                        omnifc.DistanceFuzzyCMeans, omnifc.DistanceNMF, omnifc.DistanceDBSCAN,
                        omnifc.DistanceHierarchical, omnifc.DistanceKMedoids)],
]


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("estimator", DECLARED, ids=repr)
def test_scikit_learn_check_estimator_with_the_declared_failures(estimator):
    from sklearn.utils.estimator_checks import check_estimator

    expected = expected_failed_checks(estimator)
    assert expected
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        results = check_estimator(estimator, on_fail=None, expected_failed_checks=expected)
    bad = [(r["check_name"], str(r["exception"])[:200]) for r in results
           if r["status"] == "failed"]
    assert bad == []
    xfailed = {r["check_name"] for r in results if r["status"] == "xfail"}
    assert xfailed == set(expected)            # every declared failure really fails
    assert len(results) > 40
