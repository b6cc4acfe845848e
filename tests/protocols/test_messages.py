"""protocols/_messages.py: the checks that mutation testing showed nothing else observed.

Expected values are written out from the docstrings (tile and chunk rules, the secure
sum's 2 m M + 1 residues), not computed with the module's helpers. docs/testing.md
lists the mutants these kill and the ones left as equivalent.
"""

from __future__ import annotations

import re
from dataclasses import replace

import numpy as np
import pytest

from finite_field import ParameterError, PeerError
from protocols import SessionParameters, parse_envelope
from protocols._generated import omnifc_pb2 as pb
from protocols._messages import (
    body_of,
    check_row_caps,
    chunk_rows,
    envelope,
    pack,
    packed_view,
    phase_of,
    row_tiles,
    unpack,
    vector_tiles,
)

#: run by .ci/run on the lowest and the highest protobuf too (.ci/protobuf_matrix.sh)
pytestmark = [pytest.mark.protobuf, pytest.mark.protobuf_matrix, pytest.mark.timeout(120)]


def exactly(message: str) -> str:
    return f"^{re.escape(message)}$"


# -- SessionParameters: validation -------------------------------------------------------

def test_parameter_errors_say_what_is_wrong():
    cases = [
        (dict(kind="product", dim=3), "kind must be one of ('distance', 'sum'), got 'product'"),
        (dict(kind="sum", dim=3, mode="transparent"),
         "a secure sum is always masked; transparent mode is for distance sessions only"),
        (dict(kind="sum", dim=0), "a secure sum needs the vector length (dim > 0)"),
        (dict(dim=3, chunk_bytes=4095), "chunk_bytes must be in [4096, 3 MiB], got 4095"),
        (dict(dim=3, chunk_bytes=(3 << 20) + 1),
         f"chunk_bytes must be in [4096, 3 MiB], got {(3 << 20) + 1}"),
    ]
    for arguments, message in cases:
        with pytest.raises(ParameterError, match=exactly(message)):
            SessionParameters(**{"bound": 1.0, **arguments})


def test_edges_that_are_allowed():
    for chunk in (4096, 3 << 20):
        assert SessionParameters(dim=3, bound=1.0, chunk_bytes=chunk).chunk_bytes == chunk
    assert SessionParameters(dim=0, bound=1.0).dim == 0         # distance: d from the data
    assert SessionParameters(kind="sum", dim=1, bound=1.0).dim == 1
    params = SessionParameters(dim=2, bound=1.0, primes=[np.int64(65521), 65519])
    assert params.primes == (65521, 65519) and all(type(p) is int for p in params.primes)


# -- plans: every parameter reaches the plan ---------------------------------------------

def test_distance_plan_carries_every_chosen_parameter():
    params = SessionParameters(dim=4, bound=1.0, scale_bits=4, noise_segments=2,
                               nonnegative=True, primes=(65521,), alphas=(2, 5, 7),
                               betas=(10, 11, 12, 13, 14))
    plan = params.plan(5)
    assert plan.codes[0].alphas == (2, 5, 7) and plan.codes[0].betas == (10, 11, 12, 13, 14)
    assert plan.primes == (65521,)
    assert plan.quantizer.nonnegative is True
    # noise_segments = 2 with l = 1: three interpolation points, and at least 2l+2t-1 = 5
    # parties; signed data would need more bits than 65521 offers at q = 4, d = 4.
    assert len(plan.codes[0].alphas) == 3
    with pytest.raises(ParameterError):
        params.plan(4)
    with pytest.raises(ParameterError, match="wrap"):
        SessionParameters(dim=4, bound=1.0, scale_bits=6, primes=(65521,)).plan(3)


def test_sum_plan_nonnegative_and_describe():
    signed = SessionParameters(kind="sum", dim=3, rows=2, bound=1.0, scale_bits=1).plan(3)
    positive = SessionParameters(kind="sum", dim=3, rows=2, bound=1.0, scale_bits=1,
                                 nonnegative=True).plan(3)
    assert positive.quantizer.nonnegative is True and signed.quantizer.nonnegative is False
    assert signed.describe() == {"kind": "sum", "length": 6, "parties": 3, "scale_bits": 1,
                                 "bound": 1.0, "nonnegative": False,
                                 "primes": list(signed.primes)}
    with pytest.raises(ParameterError, match=exactly("a secure sum needs at least 2 parties, "
                                                     "got 1")):
        SessionParameters(kind="sum", dim=3, bound=1.0).plan(1)


def test_sum_primes_hold_the_documented_2mM_plus_1_residues():
    # m = 3, M = round(2^1 * 1.0) = 2: sums lie in [-6, 6], 2 m M + 1 = 13 residues: the
    # prime 13 is just enough, 11 is not.
    def plan(primes):
        return SessionParameters(kind="sum", dim=2, bound=1.0, scale_bits=1,
                                 primes=primes).plan(3)

    assert plan((13,)).primes == (13,) and plan((17,)).primes == (17,)
    for too_small in ((11,), (7,)):
        with pytest.raises(ParameterError):
            plan(too_small)


def test_parameters_round_trip_through_protobuf():
    params = SessionParameters(dim=4, bound=2.5, scale_bits=4, segments=1, noise_segments=2,
                               nonnegative=True, primes=(65521,), chunk_bytes=8192,
                               alphas=(1, 2, 3), betas=(10, 11, 12, 13, 14))
    plan = params.plan(5)
    assert SessionParameters.from_proto(params.to_proto(plan)) == params.with_plan(plan)


# -- payloads ----------------------------------------------------------------------------

def test_size_errors_name_party_phase_and_expected_bytes():
    data = pack(np.arange(3))
    with pytest.raises(PeerError, match="payload holds 12 bytes, expected 20") as info:
        packed_view(data, 5, party="b", phase="evaluation")
    assert (info.value.party, info.value.phase) == ("b", "evaluation")
    with pytest.raises(PeerError, match="payload holds 12 bytes, expected 8") as info:
        unpack(data, 2, 13, party="c", phase="shares")
    assert (info.value.party, info.value.phase) == ("c", "shares")


# -- tiles and chunks, from their docstrings ---------------------------------------------

def test_vector_tiles_hold_chunk_bytes_over_4_elements():
    assert vector_tiles(2500, 4096) == [(0, 1024), (1024, 2048), (2048, 2500)]
    assert vector_tiles(3, 4) == [(0, 1), (1, 2), (2, 3)]       # one element per tile
    assert vector_tiles(1, 4096) == [(0, 1)]
    assert vector_tiles(0, 4096) == [(0, 0)]                    # one (empty) tile
    assert vector_tiles(0, 4) == [(0, 0)]


def test_chunk_rows_hold_at_most_chunk_bytes():
    assert chunk_rows(10, 300, 4096) == [(0, 3), (3, 6), (6, 9), (9, 10)]  # 3 rows = 3600 B
    assert chunk_rows(5, 1, 8) == [(0, 2), (2, 4), (4, 5)]      # 2 elements of 4 bytes
    assert chunk_rows(3, 0, 8) == [(0, 2), (2, 3)]              # width 0 counted as 1
    assert chunk_rows(3, 5000, 4096) == [(0, 1), (1, 2), (2, 3)]  # at least one row


def test_row_tiles_follow_the_upper_triangle_budget():
    # n = 6, budget 8 elements (32 bytes): row a carries 6 - a columns.
    # a=0: 8 // 6 = 1 row; a=1: 8 // 5 = 1; a=2: 8 // 4 = 2 rows (2, 3); a=4: 8 // 2 = 4
    assert row_tiles(6, 32) == [(0, 1), (1, 2), (2, 4), (4, 6)]
    assert row_tiles(3, 4) == [(0, 1), (1, 2), (2, 3)]          # budget 1: one row each
    assert row_tiles(2, 4) == [(0, 1), (1, 2)]
    assert row_tiles(4, 4096) == [(0, 4)]


# -- envelopes -----------------------------------------------------------------------------

def test_envelope_helpers():
    assert body_of(pb.Envelope()) == (None, None)
    env = envelope(ready=pb.Ready(session_id="s", party_id="a", phase="shares"))
    kind, body = body_of(env)
    assert kind == "ready" and body.party_id == "a"
    assert parse_envelope(env.SerializeToString()) == env
    assert phase_of("tile") == "evaluation" and phase_of("hello") == "join"
    assert phase_of("bogus") == "unknown" and phase_of(None) == "unknown"


# -- folded in from test_messages_bites2.py -----------------------------------------------
# protocols/_messages.py, the version-2 parameters pinned down (issue 14, mutation testing).
#
# Every expectation is written out here from the docstrings, the proto schema
# (proto/omnifc/v1/omnifc.proto: an unset proto3 field reads as 0, "" or empty) and the
# documented defaults (row caps 1,000,000 and 2,000,000, integrity "detect"), not computed
# with the module's helpers.

# -- SessionParameters: validation ---------------------------------------------------------

@pytest.mark.parametrize("arguments, message", [
    (dict(mode="open"), "mode must be one of ('masked', 'transparent'), got 'open'"),
    (dict(mode=None), "mode must be one of ('masked', 'transparent'), got None"),
    (dict(integrity="repair"),
     "integrity must be one of ('detect', 'correct', 'off'), got 'repair'"),
    (dict(integrity=""), "integrity must be one of ('detect', 'correct', 'off'), got ''"),
    (dict(kind="sum", mode="transparent", integrity="off"),
     "a secure sum is always masked; transparent mode is for distance sessions only"),
])
def test_mode_integrity_and_kind_errors_are_exact(arguments, message):
    with pytest.raises(ParameterError, match=exactly(message)):
        SessionParameters(**{"dim": 3, "bound": 1.0, **arguments})


@pytest.mark.parametrize("mode", ["masked", "transparent"])
@pytest.mark.parametrize("integrity", ["detect", "correct", "off"])
def test_every_mode_and_integrity_is_accepted_for_distances(mode, integrity):
    params = SessionParameters(dim=3, bound=1.0, mode=mode, integrity=integrity)
    assert (params.mode, params.integrity, params.kind) == (mode, integrity, "distance")


def test_a_masked_sum_is_accepted_with_any_integrity():
    for integrity in ("detect", "correct", "off"):
        params = SessionParameters(kind="sum", dim=2, bound=1.0, integrity=integrity)
        assert (params.kind, params.mode, params.integrity) == ("sum", "masked", integrity)


@pytest.mark.parametrize("name", ["max_rows_per_party", "max_rows_total"])
def test_row_caps_are_integers_in_1_to_2_to_the_40(name):
    for good in (1, 7, (1 << 40) - 1, np.int64(5), np.uint32(9), np.int8(1)):
        params = SessionParameters(dim=3, bound=1.0, **{name: good})
        assert getattr(params, name) == int(good) and type(getattr(params, name)) is int
    for bad in (0, -1, 1 << 40, (1 << 40) + 1, np.int64(0), np.int64(1 << 40)):
        with pytest.raises(ParameterError,
                           match=exactly(f"{name} must be an integer in [1, 2^40), got "
                                         f"{bad!r}")):
            SessionParameters(dim=3, bound=1.0, **{name: bad})
    for bad in (True, False, np.True_, 5.0, "5", None, 2.5):
        with pytest.raises(ParameterError,
                           match=exactly(f"{name} must be an integer in [1, 2^40), got "
                                         f"{bad!r}")):
            SessionParameters(dim=3, bound=1.0, **{name: bad})


def test_the_per_party_cap_is_checked_before_the_total():
    # both wrong: the error names max_rows_per_party (the order of the loop)
    with pytest.raises(ParameterError, match="^max_rows_per_party must"):
        SessionParameters(dim=3, bound=1.0, max_rows_per_party=0, max_rows_total=0)
    with pytest.raises(ParameterError, match="^max_rows_total must"):
        SessionParameters(dim=3, bound=1.0, max_rows_per_party=4, max_rows_total=0)


def test_primes_and_mask_degree_are_normalised_to_python_ints():
    params = SessionParameters(dim=3, bound=1.0, mask_degree=np.int64(2))
    assert params.primes is None
    assert params.mask_degree == 2 and type(params.mask_degree) is int
    params = SessionParameters(dim=3, bound=1.0, primes=np.array([65521, 65519]))
    assert params.primes == (65521, 65519) and type(params.primes) is tuple
    assert all(type(p) is int for p in params.primes)
    for bad, message in [
            (True, "mask_degree must be an integer (0 = every pair), got True"),
            (1.0, "mask_degree must be an integer (0 = every pair), got 1.0"),
            (-1, "mask_degree must be 0 (every pair masks) or k >= 1, got -1")]:
        with pytest.raises(ParameterError, match=exactly(message)):
            SessionParameters(dim=3, bound=1.0, mask_degree=bad)


def test_a_sum_needs_a_vector_length_and_a_distance_does_not():
    with pytest.raises(ParameterError, match=exactly("a secure sum needs the vector length "
                                                     "(dim > 0)")):
        SessionParameters(kind="sum", dim=0, bound=1.0)
    assert SessionParameters(kind="distance", dim=0, bound=1.0, mode="transparent").dim == 0


# -- protobuf ------------------------------------------------------------------------------

def _distinct_params():
    """Parameters where every field differs from its default (and from the others)."""
    return SessionParameters(dim=4, bound=2.5, scale_bits=4, segments=1, noise_segments=2,
                             nonnegative=True, primes=(65521,), mode="transparent",
                             rows=3, chunk_bytes=8192, max_rows_per_party=77,
                             max_rows_total=99, integrity="correct", mask_degree=3,
                             adversaries=1, alphas=(1, 2, 3),
                             betas=(10, 11, 12, 13, 14, 15, 16), reconnect_grace=7.5)


def test_to_proto_writes_every_field():
    params = _distinct_params()
    msg = params.to_proto(params.plan(7))
    assert (msg.kind, msg.mode, msg.dim, msg.segments, msg.noise_segments, msg.scale_bits,
            msg.bound, msg.nonnegative, list(msg.primes), msg.rows, msg.chunk_bytes,
            msg.max_rows_per_party, msg.max_rows_total, msg.integrity, msg.mask_degree,
            msg.adversaries, list(msg.alphas), list(msg.betas)) == (
        "distance", "transparent", 4, 1, 2, 4, 2.5, True, [65521], 3, 8192, 77, 99,
        "correct", 3, 1, [1, 2, 3], [10, 11, 12, 13, 14, 15, 16])
    # A is always written, resolved: the default of "correct" with r = 2 is floor(r/2) = 1
    default = replace(params, adversaries=None).to_proto(params.plan(7))
    assert default.HasField("adversaries") and default.adversaries == 1


def test_to_proto_of_a_sum_has_the_plans_primes_and_no_points():
    params = SessionParameters(kind="sum", dim=2, rows=5, bound=1.0, scale_bits=1,
                               primes=(13,), max_rows_per_party=8, max_rows_total=9,
                               integrity="off", mask_degree=1)
    msg = params.to_proto(params.plan(3))
    assert (msg.kind, msg.mode, msg.dim, msg.rows, list(msg.primes), list(msg.alphas),
            list(msg.betas), msg.max_rows_per_party, msg.max_rows_total, msg.integrity,
            msg.mask_degree) == ("sum", "masked", 2, 5, [13], [], [], 8, 9, "off", 1)


def test_from_proto_reads_every_field():
    msg = pb.Parameters(kind="distance", mode="transparent", dim=4, segments=1,
                        noise_segments=2, scale_bits=4, bound=2.5, nonnegative=True,
                        primes=[65521], alphas=[1, 2, 3],
                        betas=[10, 11, 12, 13, 14, 15, 16], rows=3, chunk_bytes=8192,
                        max_rows_per_party=77, max_rows_total=99, integrity="correct",
                        mask_degree=3, adversaries=1, reconnect_grace=7.5)
    params = SessionParameters.from_proto(msg)
    assert params.reconnect_grace == 7.5
    assert params == _distinct_params().with_plan(_distinct_params().plan(7))
    assert (params.kind, params.mode, params.dim, params.segments, params.noise_segments,
            params.scale_bits, params.bound, params.nonnegative, params.primes, params.rows,
            params.chunk_bytes, params.max_rows_per_party, params.max_rows_total,
            params.integrity, params.mask_degree, params.adversaries, params.alphas,
            params.betas) == (
        "distance", "transparent", 4, 1, 2, 4, 2.5, True, (65521,), 3, 8192, 77, 99,
        "correct", 3, 1, (1, 2, 3), (10, 11, 12, 13, 14, 15, 16))
    assert type(params.primes) is tuple and type(params.alphas) is tuple


def test_from_proto_fills_unset_fields_with_the_documented_defaults():
    # A message from a peer that left the caps, integrity, primes and points unset.
    msg = pb.Parameters(kind="distance", mode="masked", dim=3, segments=1, noise_segments=1,
                        scale_bits=8, bound=1.0, chunk_bytes=4096, rows=1)
    params = SessionParameters.from_proto(msg)
    assert params.max_rows_per_party == 1_000_000
    assert params.max_rows_total == 2_000_000
    assert params.integrity == "detect"
    assert params.primes is None and params.alphas is None and params.betas is None
    assert params.mask_degree == 0 and params.nonnegative is False
    assert params.adversaries is None  # unset: the default, resolved when the plan is made
    assert params == SessionParameters(dim=3, bound=1.0, scale_bits=8, chunk_bytes=4096)


def test_round_trip_of_a_sum_keeps_its_kind_and_rows():
    params = SessionParameters(kind="sum", dim=2, rows=5, bound=1.0, scale_bits=1,
                               primes=(13,), max_rows_per_party=8, max_rows_total=9,
                               integrity="off", mask_degree=1)
    back = SessionParameters.from_proto(params.to_proto(params.plan(3)))
    assert back == params.with_plan(params.plan(3)) and back.adversaries == 0
    assert back.alphas is None and back.betas is None


# -- row caps --------------------------------------------------------------------------------

def test_row_caps_allow_exactly_the_caps_and_refuse_one_more():
    params = SessionParameters(dim=3, bound=1.0, max_rows_per_party=10, max_rows_total=25)
    check_row_caps(params, {"a": 10, "b": 10, "c": 5}, blame=lambda n: n)   # at both caps
    with pytest.raises(PeerError, match=exactly(
            "party 'blamed b' in phase 'roster': "
            "'b' announces 11 rows, more than the session's max_rows_per_party = 10")) as info:
        check_row_caps(params, {"a": 1, "b": np.uint64(11)}, blame=lambda n: f"blamed {n}",
                       phase="roster")
    assert (info.value.party, info.value.phase) == ("blamed b", "roster")
    with pytest.raises(PeerError, match=exactly(
            "party 'blamed None' in phase 'join': "
            "the parties announce 26 rows in total, more than the session's "
            "max_rows_total = 25")) as info:
        check_row_caps(params, {"a": 10, "b": 10, "c": 6}, blame=lambda n: f"blamed {n}")
    assert (info.value.party, info.value.phase) == ("blamed None", "join")


# -- row tiles ---------------------------------------------------------------------------------

def test_row_tiles_small_budgets():
    # chunk_bytes // 4 elements per tile, at least one row: a budget of 0 (chunk_bytes < 4)
    # is one row per tile like a budget of 1.
    assert row_tiles(3, 0) == [(0, 1), (1, 2), (2, 3)]
    assert row_tiles(3, 3) == [(0, 1), (1, 2), (2, 3)]
    assert row_tiles(0, 4096) == []
    assert row_tiles(1, 4096) == [(0, 1)]
    # budget 3 at n = 3: rows of 3, 2, 1 columns -> (0,1), (1,2), then 3 // 1 = 3 rows capped
    assert row_tiles(3, 12) == [(0, 1), (1, 2), (2, 3)]
    # budget 4 at n = 4: 4 // 4 = 1, 4 // 3 = 1, 4 // 2 = 2 -> (2, 4)
    assert row_tiles(4, 16) == [(0, 1), (1, 2), (2, 4)]


# -- the mask degree against the number of parties ----------------------------------------------

@pytest.mark.parametrize("parties", [3, 5, 6])
def test_plan_refuses_a_mask_degree_above_m_minus_1_by_name(parties):
    for degree in (parties - 1, 2, 0):   # at most m - 1 partners (and t + 1 = 2): accepted
        SessionParameters(dim=3, bound=1.0, mask_degree=degree).plan(parties)
    for degree in (parties, parties + 1, parties + 2):
        with pytest.raises(ParameterError, match=exactly(
                f"mask_degree must be at most m - 1 = {parties - 1} (each party has "
                f"{parties - 1} possible mask partners), got {degree}")):
            SessionParameters(dim=3, bound=1.0, mask_degree=degree).plan(parties)
    with pytest.raises(ParameterError, match=exactly(
            f"mask_degree must be at most m - 1 = {parties - 1} (each party has "
            f"{parties - 1} possible mask partners), got {parties}")):
        SessionParameters(kind="sum", dim=3, bound=1.0, mask_degree=parties).plan(parties)
