"""Check 1 (omnifc/audit/_privacy_algebraic.py) field by field: the evidence, the table,
the finding and every reason, against ranks and Lagrange values computed here with Python
integers (fast: no empirical check, no plot)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from omnifc.audit import AuditParameters, check_algebraic_privacy, noise_block_ranks
from omnifc.audit._privacy_algebraic import _coalitions, point_problems

pytestmark = pytest.mark.timeout(120)


def _rank_mod(rows, p) -> int:
    """Rank over GF(p) by Gaussian elimination on Python integers."""
    rows = [[int(x) % p for x in row] for row in rows]
    rank, cols = 0, len(rows[0]) if rows else 0
    for c in range(cols):
        pivot = next((r for r in range(rank, len(rows)) if rows[r][c]), None)
        if pivot is None:
            continue
        rows[rank], rows[pivot] = rows[pivot], rows[rank]
        inv = pow(rows[rank][c], -1, p)
        rows[rank] = [x * inv % p for x in rows[rank]]
        for r in range(len(rows)):
            if r != rank and rows[r][c]:
                f = rows[r][c]
                rows[r] = [(x - f * y) % p for x, y in zip(rows[r], rows[rank])]
        rank += 1
    return rank


def _lagrange(alphas, a, x, p) -> int:
    """L_a(x) = prod_{b != a} (x - alpha_b) / (alpha_a - alpha_b) mod p."""
    num = den = 1
    for b, alpha in enumerate(alphas):
        if b != a:
            num, den = num * (x - alpha) % p, den * (alphas[a] - alpha) % p
    return num * pow(den, -1, p) % p


@pytest.mark.parametrize("t", [1, 2, 3])
def test_noise_block_ranks_equal_the_rank_over_gf_p(t):
    p, l, m = 11, 1, 6
    rng = np.random.default_rng(t)
    matrix = rng.integers(0, p, size=(l + t, m))
    matrix[l:, 1] = 0  # a zero column: every coalition holding party 2 is singular
    coalitions = list(itertools.combinations(range(m), t))
    expected = [_rank_mod([[matrix[l + i][j] for j in c] for i in range(t)], p)
                for c in coalitions]
    assert noise_block_ranks(matrix, l, p, coalitions).tolist() == expected
    assert min(expected) < t  # the zero column is seen


def test_coalitions_are_all_of_them_up_to_the_cap_else_a_seeded_sample():
    assert _coalitions(5, 2, 10, 3, 0) == (list(itertools.combinations(range(5), 2)),
                                           "exhaustive", 10)
    chosen, method, total = _coalitions(7, 3, 34, 12, 5)
    assert (method, total, len(chosen)) == ("sampled", 35, 12)
    assert chosen == sorted(set(chosen))
    assert all(len(c) == 3 and list(c) == sorted(c) and set(c) <= set(range(7))
               for c in chosen)
    assert _coalitions(7, 3, 34, 12, 5)[0] == chosen  # the seed fixes the sample
    assert _coalitions(4, 2, 1, 100, 0)[0] == list(itertools.combinations(range(4), 2))


def test_point_problems_explain_every_coincidence_modulo_the_prime():
    # alphas 1, 8, 3 (l = 1): alpha_1 = alpha_2 mod 7; beta_1 = 1 (data point alpha_1 and
    # noise point alpha_2), beta_2 = 10 = 3 (noise point alpha_3, noise segment 2),
    # beta_3 = 5 = 12 = beta_4
    assert point_problems([1, 8, 3], [1, 10, 5, 12], 1, 7) == [
        "interpolation points alpha_1 and alpha_2 coincide (1 mod 7): the Lagrange basis "
        "is undefined",
        "party 1's point beta_1 = 1 equals the data point alpha_1 (mod 7): that party "
        "receives data segment 1 of every row in the clear",
        "party 1's point beta_1 = 1 equals the noise point alpha_2 (mod 7): that party "
        "receives noise segment 1 in the clear, which cancels that noise for any coalition "
        "it joins, and its share is useless for decoding",
        "party 2's point beta_2 = 3 equals the noise point alpha_3 (mod 7): that party "
        "receives noise segment 2 in the clear, which cancels that noise for any coalition "
        "it joins, and its share is useless for decoding",
        "parties 3 and 4 share the point 5 (mod 7): they receive identical shares, and "
        "decoding needs 2l+2t-1 distinct points"]


def test_a_sound_configuration_passes_with_every_field_recomputed():
    params = AuditParameters()
    l, t, m = params.segments, params.noise_segments, params.parties
    alphas, betas = list(range(1, l + t + 1)), list(range(l + t + 1, l + t + m + 1))
    primes = params.session_primes()
    check = check_algebraic_privacy(params, max_coalitions=1000)
    assert check.verdict == "pass" and check.reasons == []
    assert {k: check.evidence[k] for k in ("segments", "noise_segments", "parties", "alphas",
                                           "betas", "max_coalitions")} == \
        dict(segments=l, noise_segments=t, parties=m, alphas=alphas, betas=betas,
             max_coalitions=1000)
    total = math.comb(m, t)
    for entry, p in zip(check.evidence["primes"], primes, strict=True):
        ranks = [_rank_mod([[_lagrange(alphas, l + i, betas[j], p) for j in c]
                            for i in range(t)], p)
                 for c in itertools.combinations(range(m), t)]
        assert entry == {"prime": p, "alphas_mod_p": [a % p for a in alphas],
                         "betas_mod_p": [b % p for b in betas],
                         "prime_exceeds_l_t_m": True, "point_problems": [],
                         "sufficient_condition": True, "method": "exhaustive",
                         "coalitions_total": total, "coalitions_checked": total,
                         "min_rank": min(ranks), "singular_count": 0,
                         "singular_examples": []}
    assert check.finding == (f"all {total} coalitions of t = {t} of m = {m} parties have an "
                             f"invertible noise block over {len(primes)} prime(s) (every "
                             "coalition checked); points pairwise distinct, p > l+t+m")
    (title1, head1, rows1), (title2, head2, rows2) = check.tables
    assert rows1 == [["α (interpolation: data segments 1..l, then noise)",
                      ", ".join(map(str, alphas))],
                     ["β (one per party)", ", ".join(map(str, betas))]]
    assert rows2 == [[p, f"exhaustive: {total} of {total}", "yes", "yes", f"{t} (need {t})", 0]
                     for p in primes]
    assert head2 == ["prime p", "coalitions checked", "sufficient condition", "p > l+t+m",
                     "min rank", "singular blocks"]
    assert "--checks 1" in check.reproduce and "check_algebraic_privacy(" in check.reproduce


def test_too_many_coalitions_are_sampled_when_the_sufficient_condition_holds():
    params = AuditParameters()
    check = check_algebraic_privacy(params, max_coalitions=1, sample_size=2, seed=3)
    assert check.verdict == "pass"
    total = math.comb(params.parties, params.noise_segments)
    for entry in check.evidence["primes"]:
        assert (entry["method"], entry["coalitions_total"], entry["coalitions_checked"]) == \
            ("sampled", total, 2)
    assert check.finding.endswith("(sufficient condition verified and a random sample of "
                                  "coalitions checked); points pairwise distinct, p > l+t+m")


def test_a_party_on_a_data_point_is_a_singular_coalition_with_the_example_named():
    params = AuditParameters(betas=(1, 4, 5, 6))  # l = t = 1, alphas 1, 2
    primes = params.session_primes()
    check = check_algebraic_privacy(params)
    # L_2(beta_1) = (1 - 1) / (2 - 1) = 0: party 1's noise block is singular, the others not
    assert _lagrange([1, 2], 1, 1, primes[0]) == 0
    point = ("party 1's point beta_1 = 1 equals the data point alpha_1: that party receives "
             "data segment 1 of every row in the clear")
    listed = ", ".join(map(str, primes))
    assert check.verdict == "fail" and check.finding == point
    assert check.reasons == [
        point, f"1 of 4 coalitions of t = 1 parties have a singular noise block over "
        f"prime(s) {listed}, e.g. parties [1] (rank 0 < 1): their shares are not masked by "
        "the noise"]
    for entry in check.evidence["primes"]:
        assert (entry["sufficient_condition"], entry["singular_count"],
                entry["singular_examples"], entry["min_rank"]) == \
            (False, 1, [{"parties": [1], "rank": 0}], 0)
    sampled = check_algebraic_privacy(params, max_coalitions=1)
    assert f"prime {primes[0]}: 4 coalitions are too many to check exhaustively and the " \
        "sufficient condition does not hold: privacy cannot be certified" in sampled.reasons


def test_coinciding_interpolation_points_stop_the_ranks_for_that_prime():
    params = AuditParameters(alphas=(2, 2))
    check = check_algebraic_privacy(params)
    assert check.verdict == "fail"
    for entry in check.evidence["primes"]:
        assert entry["method"] == "not run (Lagrange basis undefined)"
        assert "min_rank" not in entry
    assert check.tables[1][2] == [[p, "not run", "NO", "yes", "—", "—"]
                                  for p in params.session_primes()]


@pytest.mark.parametrize("changes, reason", [
    (dict(betas=(3, 4, 5)), "expected m = 4 party points, got 3"),
    (dict(alphas=(1,)), "expected l+t = 2 interpolation points, got 1"),
])
def test_a_wrong_number_of_points_ends_the_check_before_any_prime(changes, reason):
    check = check_algebraic_privacy(AuditParameters(**changes))
    assert check.verdict == "fail" and reason in check.reasons
    assert check.finding == "; ".join(check.reasons)
    assert "primes" not in check.evidence and check.tables == []


@pytest.mark.parametrize("changes, reason", [
    (dict(noise_segments=2), "t = 2 is too large for m = 4: decoding needs at least "
     "2l+2t-1 = 5 parties (with l = 1 and m = 4 the largest usable t is 1)"),
    (dict(segments=3), "t = 1 is too large for m = 4: decoding needs at least 2l+2t-1 = 7 "
     "parties (l = 3 alone needs m >= 7)"),
    (dict(noise_segments=4), "t = 4 noise segments protect against coalitions of t "
     "parties, but there are only m = 4 parties: a coalition of all parties but the victim "
     "is 3 < t parties, so the guarantee says nothing useful"),
])
def test_a_t_the_parties_cannot_carry_fails_with_the_arithmetic(changes, reason):
    check = check_algebraic_privacy(AuditParameters(**changes))
    assert check.verdict == "fail" and reason in check.reasons


def test_the_check_is_number_1_and_its_reproduce_snippet_gives_the_same_verdict():
    params = AuditParameters(betas=(1, 4, 5, 6))
    check = check_algebraic_privacy(params)
    assert (check.key, check.number, check.title) == \
        ("algebraic_privacy", 1, "Algebraic t-privacy of the encoding")
    command, code = check.reproduce.split("\n\n")
    assert command == f"omnifc audit {params.cli_arguments()} --checks 1"
    scope = {}
    exec(code.replace("check_algebraic_privacy(", "result = check_algebraic_privacy(", 1),
         scope)
    assert scope["result"].verdict == check.verdict == "fail"
    assert scope["result"].reasons == check.reasons
    assert [(title, head) for title, head, _ in check.tables] == [
        ("Evaluation points used (the same integers for every prime)", ["point", "values"]),
        ("Noise-block ranks per prime (exact, over GF(p))",
         ["prime p", "coalitions checked", "sufficient condition", "p > l+t+m", "min rank",
          "singular blocks"])]


@pytest.mark.parametrize("parties, exceeds", [(8, True), (9, False), (10, False)])
def test_a_prime_must_exceed_l_plus_t_plus_m(parties, exceeds):
    # p = 11, l = t = 1: 11 > 1 + 1 + 8 holds, 11 > 1 + 1 + 9 = 11 does not
    params = AuditParameters(dim=1, bound=1.0, scale_bits=1, primes=(11,), parties=parties)
    check = check_algebraic_privacy(params)
    [entry] = check.evidence["primes"]
    assert entry["prime_exceeds_l_t_m"] is exceeds
    assert entry["sufficient_condition"] is (exceeds and not entry["point_problems"])
    [row] = check.tables[1][2]
    assert row[2:4] == ["yes" if entry["sufficient_condition"] else "NO",
                        "yes" if exceeds else "NO"]
    reason = f"prime 11 must exceed l+t+m = {parties + 2} to give distinct points"
    assert (reason in check.reasons) is not exceeds


def test_coinciding_interpolation_points_under_a_small_prime_say_so_in_the_row():
    params = AuditParameters(dim=1, bound=1.0, scale_bits=1, primes=(11,), parties=9,
                             alphas=(2, 2))
    check = check_algebraic_privacy(params)
    assert check.tables[1][2] == [[11, "not run", "NO", "NO", "—", "—"]]
    assert check.reasons[0] == ("interpolation points alpha_1 and alpha_2 coincide (2): the "
                                "Lagrange basis is undefined")


def test_more_noise_segments_than_parties_run_no_ranks_for_any_prime():
    params = AuditParameters(noise_segments=5, parties=4)
    check = check_algebraic_privacy(params)
    assert check.verdict == "fail" and len(check.evidence["primes"]) == 2
    assert [e["method"] for e in check.evidence["primes"]] == ["not run (t > m)"] * 2


def test_at_most_twenty_singular_coalitions_are_listed():
    # l = 1, t = 3, m = 9 with beta_1 = alpha_1: party 1's noise column is zero, so each of
    # the C(8, 2) = 28 coalitions holding it is singular, and only those
    params = AuditParameters(noise_segments=3, parties=9, betas=(1,) + tuple(range(5, 13)))
    check = check_algebraic_privacy(params)
    for entry in check.evidence["primes"]:
        assert entry["singular_count"] == math.comb(8, 2) == 28
        examples = entry["singular_examples"]
        assert len(examples) == 20 and all(e["parties"][0] == 1 for e in examples)


def test_primes_that_cannot_hold_the_distances_fail_the_check_naming_why():
    # (the split of omnifc/audit/_privacy.py dropped this module's ParameterError import:
    # this raised NameError instead of failing the check). With t = m = 4 two reasons come
    # first; the finding is the last one, the primes'
    check = check_algebraic_privacy(AuditParameters(noise_segments=4, primes=(7,)))
    assert check.verdict == "fail" and len(check.reasons) == 3
    assert check.reasons[-1].startswith("no valid session primes: the product of the primes")
    assert check.finding == check.reasons[-1]
    assert "primes" not in check.evidence


def test_the_boundaries_of_the_party_count():
    # m = 2l+2t-1 exactly is enough; t = m still has its one coalition ranked
    assert check_algebraic_privacy(AuditParameters(parties=3)).verdict == "pass"
    check = check_algebraic_privacy(AuditParameters(noise_segments=4))
    assert {e["method"] for e in check.evidence["primes"]} == {"exhaustive"}
    assert {e["coalitions_total"] for e in check.evidence["primes"]} == {1}


@pytest.mark.parametrize("changes, largest", [
    (dict(segments=2, noise_segments=2, parties=6), "with l = 2 and m = 6 the largest usable "
     "t is 1"),
    (dict(noise_segments=4, parties=8), "with l = 1 and m = 8 the largest usable t is 3"),
])
def test_the_hint_gives_the_largest_usable_t(changes, largest):
    # 2l + 2t - 1 <= m  <=>  t <= (m + 1 - 2l) / 2
    check = check_algebraic_privacy(AuditParameters(**changes))
    assert any(r.endswith(f"({largest})") for r in check.reasons), check.reasons


def test_every_reason_of_a_wrong_point_count_is_in_the_finding():
    check = check_algebraic_privacy(AuditParameters(alphas=(1,), betas=(3, 4, 5)))
    assert check.finding == ("expected l+t = 2 interpolation points, got 1; expected m = 4 "
                             "party points, got 3")


@pytest.mark.slow  # 2,000 ranks per prime, three times
def test_past_twenty_thousand_coalitions_a_sample_of_two_thousand_seeded_by_zero():
    # m = 201, t = 2: C(201, 2) = 20,100 coalitions. Party 1 sits on the data point
    # alpha_1, so exactly the sampled coalitions holding it are singular: how many depends
    # on the sample, hence on the seed (0 by default)
    params = AuditParameters(noise_segments=2, parties=201,
                             betas=(1,) + tuple(range(5, 205)))
    default = check_algebraic_privacy(params)
    for entry in default.evidence["primes"]:
        assert (entry["method"], entry["coalitions_total"], entry["coalitions_checked"]) == \
            ("sampled", math.comb(201, 2), 2000)
        assert entry["singular_count"] >= 1
        assert all(1 in e["parties"] for e in entry["singular_examples"])
    assert default.evidence == check_algebraic_privacy(params, seed=0).evidence
    assert default.evidence != check_algebraic_privacy(params, seed=1).evidence
