"""Checks 5-7: transport from a session config, numerics, parameter advice."""

from __future__ import annotations

import pytest

from omnifc.audit import (AuditParameters, aead_self_test, check_numerics,
                          check_parameter_advice, check_transport)
from protocols import ConfigParameters, generate_certificates


@pytest.fixture(scope="module")
def session_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("session")
    generate_certificates(out, ["a", "b", "c"],
                          parameters=ConfigParameters(dim=4, nonnegative=True))
    return out


def test_aead_self_test():
    result = aead_self_test()
    assert result["ok"] and result["overhead_bytes"] == 16 and result["key_bytes"] == 32


def test_no_config_reports_defaults_as_assumed():
    check = check_transport(AuditParameters())
    assert check.verdict == "info"
    hows = {row[0]: row[2] for row in check.evidence["items"]}
    assert hows["TLS"].startswith("assumed") and hows["AEAD"].startswith("checked")


def test_generated_config_passes(session_dir):
    params = AuditParameters.from_config(session_dir / "session.toml")
    assert (params.dim, params.parties, params.mode) == (4, 3, "masked")
    check = check_transport(params)
    assert check.verdict == "pass", check.reasons


def _edit(session_dir, tmp_path, old, new):
    text = (session_dir / "session.toml").read_text()
    assert old in text
    path = tmp_path / "session.toml"
    text = text.replace(old, new)
    # Keep file paths pointing at the generated folder.
    for name in ("ca.pem", "coordinator.pem", "coordinator.key"):
        text = text.replace(f'"{name}"', f'"{session_dir / name}"')
    for party in "abc":
        for suffix in (".pem", ".key", ".identity.pem"):
            text = text.replace(f'"{party}{suffix}"', f'"{session_dir / (party + suffix)}"')
    path.write_text(text)
    return path


def test_tls_off_fails(session_dir, tmp_path):
    path = _edit(session_dir, tmp_path, "enabled = true", "enabled = false")
    check = check_transport(AuditParameters.from_config(path))
    assert check.verdict == "fail"
    assert any("TLS is disabled" in r for r in check.reasons)


def test_certificate_not_matching_its_pin_fails(session_dir, tmp_path):
    text = (session_dir / "session.toml").read_text()
    pin = text.split('certificate_sha256 = "')[1][:64]
    path = _edit(session_dir, tmp_path, pin, "00" * 32)
    check = check_transport(AuditParameters.from_config(path))
    assert check.verdict == "fail"
    assert any("does not match the pinned certificate_sha256" in r for r in check.reasons)


def test_config_with_too_few_parties_is_still_audited(session_dir, tmp_path):
    path = _edit(session_dir, tmp_path, "noise_segments = 1", "noise_segments = 2")
    params = AuditParameters.from_config(path)
    assert params.noise_segments == 2
    check = check_transport(params)
    assert any("does not load" in r for r in check.reasons)
    assert check_parameter_advice(params).verdict == "fail"


def test_numerics_default_and_too_small_primes():
    check = check_numerics(AuditParameters(), rows=20)
    assert check.verdict == "pass" and check.evidence["exact"]
    assert check.evidence["largest_is_bound"]
    assert check.evidence["headroom_bits"] > 0
    bad = check_numerics(AuditParameters(primes=(65521,)), rows=20)
    assert bad.verdict == "fail" and "wrap" in bad.reasons[0]


def test_advice_lists_admissible_segments():
    check = check_parameter_advice(AuditParameters(parties=9, rows=100))
    assert check.verdict == "pass"
    assert check.evidence["admissible_segments"] == [1, 2, 3, 4]
    options = {o["segments"]: o for o in check.evidence["options"]}
    assert options[4]["min_parties"] == 9 and options[4]["segment_length"] == 1
    assert options[2]["compute_relative"] == 0.5
    assert options[1]["upload_bytes_per_party"] == 100 * 101 // 2 * 4 * 2  # two primes
    too_many = check_parameter_advice(AuditParameters(noise_segments=2))
    assert too_many.verdict == "fail" and "t too large for m" in too_many.reasons[0]
