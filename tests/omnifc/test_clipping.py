"""omnifc._clipping: a refusal says "would be clipped" and no warning says "clipped"
first; an accepted clipping is warned about once per party, after every party passed."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from finite_field import InputError
from omnifc._clipping import check_clipping, clip_report


def test_a_refusal_warns_nothing_and_says_would_be_clipped(caplog):
    report = clip_report({"a": np.array([[0.5, 0.5]]), "b": np.array([[5.0, 0.0]])},
                         bound=1.0, nonnegative=False)
    with caplog.at_level(logging.WARNING, logger="omnifc"):
        with pytest.raises(InputError, match=r"^party 'b': 1 of 2 entries \(50\.0%\) lie "
                                             r"outside the public bound \[-1, 1\] and would "
                                             r"be clipped"):
            check_clipping(report, bound=1.0, nonnegative=False)
    assert [r.getMessage() for r in caplog.records] == []


def test_an_accepted_clipping_is_said_once_in_the_present(caplog):
    report = clip_report({"a": np.array([[5.0, 0.0]]), "b": np.array([[0.0, 0.0]])},
                         bound=1.0, nonnegative=False)
    with caplog.at_level(logging.WARNING, logger="omnifc"):
        check_clipping(report, bound=1.0, nonnegative=False, max_clipped=1.0)
    assert [r.getMessage() for r in caplog.records] == [
        "party 'a': 1 of 2 entries (50.0%) lie outside the public bound [-1, 1] and are "
        "clipped to it"]


def test_no_party_is_warned_about_when_a_later_one_is_refused(caplog):
    report = clip_report({"a": np.array([[5.0] + [0.0] * 199]), "b": np.array([[9.0, 9.0]])},
                         bound=1.0, nonnegative=False)
    with caplog.at_level(logging.WARNING, logger="omnifc"):
        with pytest.raises(InputError, match="party 'b'"):
            check_clipping(report, bound=1.0, nonnegative=False)
    assert caplog.records == []
