"""What a user gets from ``check_estimator`` and a default-constructed FederatedClustering:
the README's exact call passes, and the default's refusal shows that call."""

from __future__ import annotations

import pathlib
import re

import numpy as np
import pytest
from sklearn.utils.estimator_checks import check_estimator

import omnifc
from omnifc._federated import CHECK_ESTIMATOR_CALL

README = (pathlib.Path(__file__).resolve().parents[2] / "README.md").read_text()


def _readme_call() -> str:
    calls = re.findall(r"`(check_estimator\(omnifc\.FederatedClustering\([^`]*\)\))`", README)
    assert len(calls) == 1, calls
    return calls[0]


def test_readme_states_the_exact_call_and_the_error_quotes_it():
    assert _readme_call() == CHECK_ESTIMATOR_CALL


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_readme_call_passes_as_written():
    # as a user pastes it: no expected failures declared, no warnings filtered
    results = eval(_readme_call(), {"check_estimator": check_estimator, "omnifc": omnifc})
    assert results is None or all(r["status"] != "failed" for r in results)


def test_default_constructed_estimator_says_what_to_pass():
    parties = [np.zeros((3, 2)), np.ones((3, 2)), np.full((3, 2), 2.0)]
    with pytest.raises(omnifc.ParameterError) as error:
        omnifc.FederatedClustering().fit(parties)
    text = str(error.value)
    assert "bound" in text and "bound=10.0" in text
    assert CHECK_ESTIMATOR_CALL in text


@pytest.mark.timeout(120)
def test_check_estimator_on_the_default_names_the_call_that_passes():
    with pytest.raises(omnifc.ParameterError, match=re.escape(CHECK_ESTIMATOR_CALL)):
        check_estimator(omnifc.FederatedClustering())
