"""Audit check 8: the actively malicious coordinator, run against real parties."""

from __future__ import annotations

import hashlib
import hmac

import pytest

import protocols._crypto as crypto
from omnifc.audit import AuditParameters, check_active_coordinator, run_audit
from protocols._crypto import transcript

SESSION = AuditParameters(dim=4, bound=1.0, scale_bits=6, segments=2, noise_segments=1,
                          parties=10, rows=20, nonnegative=False)


def test_the_protocol_passes_the_active_coordinator_check():
    check = check_active_coordinator(SESSION)
    assert check.verdict == "pass", check.reasons
    attack = check.evidence["equivocation"]
    # m = 10, l = 2, t = 1: the strict-subset rule leaves 6 rounds, enough to determine g;
    # the parties took part in all of them, and still nothing beyond D came out
    assert attack["schedule"] == "shrinking" and attack["rounds_completed"] == 6
    assert attack["segments_determined"] and attack["segments_recovered_exactly"] == 0
    assert attack["unmasked_rounds"] == 0
    assert check.evidence["roster"] == {"reordered_roster_refused": True,
                                        "replayed_hello_refused": True}


def test_the_check_fails_when_masks_ignore_the_responding_set(monkeypatch):
    # Masks keyed by (pair, round, prime, tile) only, as before view binding: the same
    # attack now recovers both per-segment matrices and the check must fail.
    def unbound(mask_key, view, prime, tile_index):
        info = transcript("mask-stream", view.session_id, view.round, int(prime),
                          int(tile_index))
        return hmac.new(bytes(mask_key), info + b"\x01", hashlib.sha256).digest()
    monkeypatch.setattr(crypto, "view_mask_key", unbound)
    check = check_active_coordinator(SESSION)
    assert check.verdict == "fail"
    attack = check.evidence["equivocation"]
    assert attack["segments_recovered_exactly"] == 2 and attack["unmasked_rounds"] == 5
    assert any("per-segment distance matrices exactly" in r for r in check.reasons)


def test_the_check_is_registered_as_number_8():
    report = run_audit(SESSION, checks=["active_coordinator"])
    assert [c.number for c in report.checks] == [8] and report.passed


@pytest.mark.parametrize("parties, applicable", [(3, False), (4, True)])
def test_small_sessions(parties, applicable):
    params = AuditParameters(dim=3, bound=1.0, scale_bits=6, parties=parties, rows=12)
    check = check_active_coordinator(params)
    assert check.verdict == "pass"
    assert check.evidence["equivocation"]["applicable"] is applicable


def test_the_check_also_attacks_the_integrity_masks():
    check = check_active_coordinator(SESSION)  # integrity = "detect" by default
    checked = check.evidence["equivocation_integrity"]
    # the group seeds are bound to the view: the first equivocated round is refused
    assert checked["rounds_completed"] == 1 and checked["refused"]
    assert checked["segments_recovered_exactly"] == 0 and checked["unmasked_rounds"] == 0
    off = check_active_coordinator(AuditParameters(**{**SESSION.__dict__, "integrity": "off"}))
    assert "equivocation_integrity" not in off.evidence and off.verdict == "pass"
