"""Audit check 9: the integrity row for m = K, K+1, K+2 (l = t = 1: K = 3), with real parties."""

from __future__ import annotations

import pytest

from dataclasses import replace

from omnifc.audit import AuditParameters, check_integrity, run_audit
from omnifc.audit._integrity import WORST_CASES

pytestmark = pytest.mark.timeout(600)


def test_m_equal_k_detects_nothing_and_shows_the_silent_corruption():
    check = check_integrity(AuditParameters(parties=3))
    assert check.verdict == "warn"
    assert (check.evidence["detect"], check.evidence["locate"]) == (0, 0)
    assert check.evidence["adversaries"] == 0
    shown = check.evidence["deviating"]
    assert shown["returned"] and not shown["exact"] and shown["wrong_entries"] > 0
    assert shown["deviations"] == []  # returned unflagged: exactly what r = 0 allows
    assert "nothing is guaranteed" in check.finding and "m = K = 3" in check.finding


def _attacks(check):
    return check.evidence["attacks"]


def test_m_equal_k_plus_one_detects_one_and_returns_nothing_for_every_worst_case():
    check = check_integrity(AuditParameters(parties=4))
    assert check.verdict == "pass"
    assert (check.evidence["adversaries"], check.evidence["radius"]) == (1, 0)
    assert check.evidence["honest"]["exact"] and check.evidence["honest"]["deviations"] == []
    assert sorted(_attacks(check)) == sorted(WORST_CASES)
    for pattern, shown in _attacks(check).items():
        assert not shown["returned"] and shown["named"] == [], pattern
        assert "could not be located" in shown["error"]


@pytest.mark.parametrize("integrity, adversaries, returned", [
    ("correct", None, "corrected"),   # A = 1 of r = 2: radius 1, every upload lie corrected
    ("detect", None, "aborted"),      # A = r = 2: radius 0, every lie ends the session
    ("detect", 1, None),              # A = 1: located and excluded, or aborted (bad shares)
])
def test_m_equal_k_plus_two_holds_at_the_declared_bound(integrity, adversaries, returned):
    check = check_integrity(AuditParameters(parties=5, integrity=integrity,
                                            adversaries=adversaries))
    assert check.verdict == "pass", check.reasons
    a = 1 if integrity == "correct" or adversaries == 1 else 2
    assert check.evidence["adversaries"] == a and check.evidence["coalition"] == \
        [f"party-{j + 2}" for j in range(a)]
    for pattern, shown in _attacks(check).items():
        assert shown["innocent_named"] == [], pattern
        if shown["returned"]:
            assert shown["exact"], pattern
        if returned == "aborted":
            assert not shown["returned"], pattern
        if returned == "corrected" and not pattern.startswith("bad-share"):
            assert shown["returned"] and shown["exact"], pattern


def test_the_check_fails_when_a_wrong_d_or_an_innocent_gets_through(monkeypatch):
    """Check 9 bites: the decoding radius of before the declared bound (floor(s/2), which
    lets two colluders' codeword pass for an honest party's error), or a verdict that
    names the first honest party, fails it (P4)."""
    from protocols import _coordinator_deviations, _integrity as protocol_integrity

    monkeypatch.setattr(protocol_integrity, "decoding_radius", lambda s, a: s // 2)
    check = check_integrity(AuditParameters(parties=5))  # detect, A = 2
    assert check.verdict == "fail"
    assert any("return a wrong D" in reason for reason in check.reasons)
    assert any("outside the coalition" in reason for reason in check.reasons)
    monkeypatch.undo()
    import protocols._integrity as integrity

    real = integrity.verdict

    def framing(findings, names, adversaries, known=()):
        result = real(findings, names, adversaries, known=known)
        return replace(result, named=("party-1",), suspects=(("party-1",),),
                       roles={"party-1": "evaluator"}) if result.explained else result
    monkeypatch.setattr(_coordinator_deviations, "verdict", framing)
    check = check_integrity(AuditParameters(parties=5, integrity="correct"))
    assert check.verdict == "fail"
    assert any("outside the coalition" in reason for reason in check.reasons)


def test_a_bound_the_parties_cannot_carry_fails_the_check():
    check = check_integrity(AuditParameters(parties=5, integrity="correct", adversaries=2))
    assert check.verdict == "fail" and "r >= 2A = 4" in check.finding


def test_integrity_off_warns_even_with_redundancy():
    check = check_integrity(AuditParameters(parties=5, integrity="off"))
    assert check.verdict == "warn" and 'integrity = "off"' in check.finding
    assert not check.evidence["deviating"]["exact"]


def test_the_audit_runs_check_9_by_number_and_name():
    report = run_audit(AuditParameters(parties=5), checks=[9, "integrity"])
    assert [c.key for c in report.checks] == ["integrity"] and report.passed
