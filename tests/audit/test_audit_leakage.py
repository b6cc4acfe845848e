"""Check 3 (what the coordinator learns) and check 4 (what D itself reveals)."""

from __future__ import annotations

import numpy as np
import pytest

from omnifc.audit import (AuditParameters, check_coordinator_view, check_known_sample_attack,
                          coordinator_matrices, interpolate_segments, known_sample_attack,
                          recover_coordinates, run_recorded_session, attack_errors)


def _quantized_coordinate_differences(rows):
    return [(rows[:, k, None] - rows[None, :, k]) ** 2 for k in range(rows.shape[1])]


def test_transparent_transcript_reveals_every_coordinate_when_l_equals_d():
    # Small example: d = l = 2, t = 1, m = 5; the attack uses only the recorded messages.
    params = AuditParameters(dim=2, bound=4.0, scale_bits=6, segments=2, noise_segments=1,
                             parties=5, nonnegative=False, mode="transparent")
    rng = np.random.default_rng(11)
    data = rng.uniform(-4, 4, size=(15, 2))
    names = [f"p{j}" for j in range(5)]
    parts = dict(zip(names, np.array_split(data, 5)))
    outcome, transcript = run_recorded_session(params, parts, "transparent")
    primes = params.session_primes()
    assert len(primes) == 1
    p = primes[0]
    matrices = coordinator_matrices(transcript, 15, primes)
    evaluations = [matrices[(name, 0)] for name in names]
    _, betas = params.raw_points()
    segments = interpolate_segments(evaluations, list(betas), [1, 2], p)
    quantized = params.quantizer.quantize(data).values
    truth = _quantized_coordinate_differences(quantized)
    for recovered, expected in zip(segments, truth):
        assert np.array_equal(recovered, expected)          # per-coordinate squared gaps
    coordinates = recover_coordinates(segments)
    for k in range(2):
        column = quantized[:, k]
        assert (np.array_equal(coordinates[:, k], column - column.min())
                or np.array_equal(coordinates[:, k], column.max() - column))


def test_transparent_mode_with_l_above_one_is_reported_as_a_leak():
    params = AuditParameters(dim=4, segments=2, parties=5, mode="transparent")
    check = check_coordinator_view(params, rows=30,
                                   noise_source=np.random.Generator(np.random.PCG64(12)))
    assert check.verdict == "fail"
    assert "recovered all 2 per-segment distance matrices" in check.reasons[0]
    assert check.evidence["transparent"]["segments_recovered_exactly"] == 2
    # The same tests that pass on masked uploads flag the transparent transcript.
    assert check.evidence["masked"]["control_transparent_flagged"]


def test_masked_transcript_check_passes_on_defaults():
    # Seeded noise and ephemeral keys (hence masks): the family-wise false-positive rate of
    # 1e-3 is fixed for this run, not redrawn each time.
    seeded = np.random.Generator(np.random.PCG64(11))
    check = check_coordinator_view(AuditParameters(), rows=40, noise_source=seeded)
    assert check.verdict == "pass", check.reasons
    masked = check.evidence["masked"]
    assert masked["sum_of_uploads_equals_D"] and masked["outcome_equals_D"]
    assert not any(t["flagged"] for t in masked["tests"])
    assert {"hello", "share", "tile"} <= set(masked["message_kinds"])
    assert check.evidence["transparent_l_equals_d_example"]["coordinates_recovered"] == 3


def test_masked_uploads_do_not_give_per_segment_matrices():
    check = check_coordinator_view(AuditParameters(dim=4, segments=2, parties=5), rows=30,
                                   noise_source=np.random.Generator(np.random.PCG64(13)))
    assert check.verdict == "pass", check.reasons
    assert max(check.evidence["masked"]["interpolation_match_fraction"]) < 0.01


def test_known_sample_attack_is_exact_with_d_plus_one_records():
    rng = np.random.default_rng(2)
    x = rng.normal(size=(50, 4))
    D = ((x[:, None] - x[None]) ** 2).sum(-1)
    estimate = known_sample_attack(D, np.arange(5), x[:5])
    np.testing.assert_allclose(estimate, x, atol=1e-9)


def test_known_sample_error_drops_to_quantization_level_at_d_plus_one():
    d, scale = 3, 2.0**10
    rng = np.random.default_rng(9)
    data = rng.uniform(0, 5, size=(60, d))
    quantized = np.floor(data * scale + 0.5).astype(np.int64)
    norms = (quantized**2).sum(1)
    D = (norms[:, None] + norms[None] - 2 * quantized @ quantized.T) / scale**2
    errors = {e["k"]: e for e in attack_errors(D, quantized, scale, [1, d + 1], true_rows=data,
                                               repeats=3)}
    step = np.sqrt(d) / scale  # one quantization step in every coordinate
    exact = errors[d + 1]
    assert exact["rows_exact_on_grid"] == 1.0 and exact["draws_all_exact"] == 3
    assert exact["max_error"] < 1e-9                      # equal to the quantized rows
    assert exact["max_error_vs_data"] <= step / 2 + 1e-12  # rounding error only
    assert errors[1]["rms_error_vs_data"] > 1000 * step and errors[1]["rows_exact_on_grid"] == 0


def test_known_sample_check_reports_exactness_from_d_plus_one():
    check = check_known_sample_attack(AuditParameters(), rows=40, repeats=3)
    assert check.verdict == "info"
    assert check.evidence["exact_from_k"] <= 5
    first = check.evidence["errors"][0]
    assert first["k"] == 1 and first["rms_error"] > 1.0
    assert "Inherent to revealing D" in check.finding
    assert len(check.evidence["mitigations"]) >= 3


@pytest.mark.slow
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

