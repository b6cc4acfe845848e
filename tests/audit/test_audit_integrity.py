"""Audit check 9: the integrity row for m = K, K+1, K+2 (l = t = 1: K = 3), with real parties."""

from __future__ import annotations

import pytest

from omnifc.audit import AuditParameters, check_integrity, run_audit

pytestmark = pytest.mark.timeout(600)


def test_m_equal_k_detects_nothing_and_shows_the_silent_corruption():
    check = check_integrity(AuditParameters(parties=3))
    assert check.verdict == "warn"
    assert (check.evidence["detect"], check.evidence["locate"]) == (0, 0)
    shown = check.evidence["deviating"]
    assert shown["returned"] and not shown["exact"] and shown["wrong_entries"] > 0
    assert shown["deviations"] == []  # returned unflagged: exactly what r = 0 allows
    assert "nothing is checked" in check.finding and "m = K = 3" in check.finding


def test_m_equal_k_plus_one_detects_one_and_returns_nothing():
    check = check_integrity(AuditParameters(parties=4))
    assert check.verdict == "pass"
    assert (check.evidence["detect"], check.evidence["locate"]) == (1, 0)
    assert check.evidence["honest"]["exact"] and check.evidence["honest"]["deviations"] == []
    shown = check.evidence["deviating"]
    assert not shown["returned"] and shown["named"] == []
    assert "could not be located" in shown["error"]


@pytest.mark.parametrize("integrity, action", [("correct", "corrected"),
                                                ("detect", "excluded")])
def test_m_equal_k_plus_two_locates_one(integrity, action):
    check = check_integrity(AuditParameters(parties=5, integrity=integrity))
    assert check.verdict == "pass"
    assert (check.evidence["detect"], check.evidence["locate"]) == (2, 1)
    shown = check.evidence["deviating"]
    assert shown["returned"] and shown["exact"]
    assert shown["deviations"][0]["named"] == ["party-2"]
    assert shown["deviations"][0]["action"] == action


def test_integrity_off_warns_even_with_redundancy():
    check = check_integrity(AuditParameters(parties=5, integrity="off"))
    assert check.verdict == "warn" and 'integrity = "off"' in check.finding
    assert not check.evidence["deviating"]["exact"]


def test_the_audit_runs_check_9_by_number_and_name():
    report = run_audit(AuditParameters(parties=5), checks=[9, "integrity"])
    assert [c.key for c in report.checks] == ["integrity"] and report.passed
