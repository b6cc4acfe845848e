"""Check 1: t-privacy of the encoding, algebraically.

A coalition C of t parties sees, for every row, S U_top[:, C] + Z U_bot[:, C], where U is
the (l+t) x m encoding matrix, S the data segments and Z the uniform noise segments. The
view is uniform and independent of S if and only if the t x t noise block U_bot[:, C] is
invertible over GF(p). The check computes that rank exactly (``galois``) for every
coalition when there are few enough, otherwise verifies the sufficient condition (all
points pairwise distinct and p > l+t+m: the block is then a diagonally scaled Cauchy
matrix, omnifc_math.md section 2) plus a random sample. Check 2, the empirical side, is
:mod:`omnifc.audit._privacy_empirical`.
"""

from __future__ import annotations

import itertools
import math

import galois
import numpy as np

from finite_field import ParameterError

from ._model import PASS, Check
from ._params import AuditParameters, encoding_matrix

__all__ = ["check_algebraic_privacy", "point_problems", "noise_block_ranks"]


def point_problems(alphas, betas, segments: int, prime: int) -> list[str]:
    """Every coincidence among the evaluation points modulo ``prime``, explained."""
    l = segments
    a = [int(x) % prime for x in alphas]
    b = [int(x) % prime for x in betas]
    problems = []
    for i, j in itertools.combinations(range(len(a)), 2):
        if a[i] == a[j]:
            problems.append(
                f"interpolation points alpha_{i + 1} and alpha_{j + 1} coincide "
                f"({a[i]} mod {prime}): the Lagrange basis is undefined")
    for j, x in enumerate(b):
        for o, y in enumerate(a):
            if x == y:
                if o < l:
                    problems.append(
                        f"party {j + 1}'s point beta_{j + 1} = {x} equals the data point "
                        f"alpha_{o + 1} (mod {prime}): that party receives data segment {o + 1} "
                        "of every row in the clear")
                else:
                    problems.append(
                        f"party {j + 1}'s point beta_{j + 1} = {x} equals the noise point "
                        f"alpha_{o + 1} (mod {prime}): that party receives noise segment "
                        f"{o + 1 - l} in the clear, which cancels that noise for any coalition "
                        "it joins, and its share is useless for decoding")
    for i, j in itertools.combinations(range(len(b)), 2):
        if b[i] == b[j]:
            problems.append(
                f"parties {i + 1} and {j + 1} share the point {b[i]} (mod {prime}): they receive "
                "identical shares, and decoding needs 2l+2t-1 distinct points")
    return problems


def noise_block_ranks(matrix: np.ndarray, segments: int, prime: int, coalitions) -> np.ndarray:
    """Exact rank over GF(prime) of the noise block U[l:, C] for each coalition C."""
    field = galois.GF(int(prime))
    bottom = field(np.asarray(matrix, dtype=np.int64)[segments:] % prime)
    coalitions = [list(c) for c in coalitions]
    if bottom.shape[0] == 1:  # t = 1: a 1 x 1 block has rank 1 exactly when it is nonzero
        nonzero = np.asarray(bottom[0] != 0)
        return np.array([int(nonzero[c[0]]) for c in coalitions], dtype=np.int64)
    return np.array([int(np.linalg.matrix_rank(bottom[:, c])) for c in coalitions],
                    dtype=np.int64)


def _coalitions(m: int, t: int, cap: int, sample_size: int, seed: int):
    total = math.comb(m, t)
    if total <= cap:
        return list(itertools.combinations(range(m), t)), "exhaustive", total
    rng = np.random.default_rng(seed)
    sample_size = min(sample_size, total)
    chosen = set()
    while len(chosen) < sample_size:
        chosen.add(tuple(sorted(int(x) for x in rng.choice(m, size=t, replace=False))))
    return sorted(chosen), "sampled", total


def check_algebraic_privacy(params: AuditParameters, *, max_coalitions: int = 20_000,
                            sample_size: int = 2_000, seed: int = 0) -> Check:
    """Check 1: every t-coalition's noise block is invertible over every session prime.

    Parameters
    ----------
    params : AuditParameters
    max_coalitions : int
        Check every coalition when there are at most this many; otherwise verify the
        sufficient condition and ``sample_size`` random coalitions.

    Examples
    --------
    >>> from omnifc.audit import AuditParameters, check_algebraic_privacy
    >>> check_algebraic_privacy(AuditParameters()).verdict
    'pass'
    >>> bad = AuditParameters(betas=(1, 4, 5, 6))       # beta_1 equals alpha_1
    >>> check_algebraic_privacy(bad).verdict
    'fail'
    """
    l, t, m = params.segments, params.noise_segments, params.parties
    check = Check("algebraic_privacy", 1, "Algebraic t-privacy of the encoding", verdict=PASS)
    alphas, betas = params.raw_points()
    check.evidence.update(segments=l, noise_segments=t, parties=m, alphas=list(alphas),
                          betas=list(betas), max_coalitions=max_coalitions)
    check.reproduce = (f"omnifc audit {params.cli_arguments()} --checks 1\n\n"
                       "from omnifc.audit import AuditParameters, check_algebraic_privacy\n"
                       f"check_algebraic_privacy({params.python_arguments()})")
    check.details.append(
        f"A coalition C of t = {t} parties sees, for every row, S·U_top[:, C] + Z·U_bot[:, C], "
        "where U is the (l+t) × m encoding matrix (U[a, j] = L_a(β_j)), S the data segments "
        "and Z the uniform noise segments. The view is uniform and independent of the data "
        "exactly when the t × t noise block U_bot[:, C] is invertible over GF(p). This check "
        "computes that rank exactly over each session prime with `galois`. The sufficient "
        "condition — all α and β pairwise distinct and p > l+t+m — makes every such block a "
        "diagonally scaled Cauchy matrix, hence invertible (omnifc_math.md §2).")
    if len(alphas) != l + t:
        check.fail(f"expected l+t = {l + t} interpolation points, got {len(alphas)}")
    if len(betas) != m:
        check.fail(f"expected m = {m} party points, got {len(betas)}")
    if t >= m:
        check.fail(f"t = {t} noise segments protect against coalitions of t parties, but there "
                   f"are only m = {m} parties: a coalition of all parties but the victim is "
                   f"{m - 1} < t parties, so the guarantee says nothing useful")
    if m < params.min_parties:
        largest_t = (m + 1 - 2 * l) // 2
        hint = (f"with l = {l} and m = {m} the largest usable t is {largest_t}" if largest_t >= 1
                else f"l = {l} alone needs m >= {2 * l + 1}")
        check.fail(f"t = {t} is too large for m = {m}: decoding needs at least 2l+2t-1 = "
                   f"{params.min_parties} parties ({hint})")
    if check.failed and (len(alphas) != l + t or len(betas) != m):
        check.finding = "; ".join(check.reasons)
        return check
    try:
        primes = params.session_primes()
    except ParameterError as error:
        check.fail(f"no valid session primes: {error}")
        check.finding = check.reasons[-1]
        return check

    per_prime, table_rows, singular_by_prime = [], [], {}
    for p in primes:
        entry = {"prime": p, "alphas_mod_p": [int(a) % p for a in alphas],
                 "betas_mod_p": [int(b) % p for b in betas],
                 "prime_exceeds_l_t_m": p > l + t + m}
        problems = point_problems(alphas, betas, l, p)
        entry["point_problems"] = problems
        for problem in problems:
            # The same integer coincidence shows up for every prime: report it once.
            generic = problem.replace(f" (mod {p})", "").replace(f" mod {p}", "")
            if generic not in check.reasons:
                check.fail(generic)
        if not entry["prime_exceeds_l_t_m"]:
            check.fail(f"prime {p} must exceed l+t+m = {l + t + m} to give distinct points")
        entry["sufficient_condition"] = not problems and entry["prime_exceeds_l_t_m"]
        per_prime.append(entry)
        if any("interpolation points" in x for x in problems):
            entry["method"] = "not run (Lagrange basis undefined)"
            table_rows.append([p, "not run", "NO", "yes" if entry["prime_exceeds_l_t_m"]
                               else "NO", "—", "—"])
            continue
        if t > m:
            entry["method"] = "not run (t > m)"
            continue
        matrix = encoding_matrix(alphas, betas, p)
        coalitions, method, total = _coalitions(m, t, max_coalitions, sample_size, seed)
        ranks = noise_block_ranks(matrix, l, p, coalitions)
        singular = [(c, int(r)) for c, r in zip(coalitions, ranks) if r < t]
        entry.update(method=method, coalitions_total=total, coalitions_checked=len(coalitions),
                     min_rank=int(ranks.min()), singular_count=len(singular),
                     singular_examples=[{"parties": [j + 1 for j in c], "rank": r}
                                        for c, r in singular[:20]])
        if method == "sampled" and not entry["sufficient_condition"]:
            check.fail(f"prime {p}: {total} coalitions are too many to check exhaustively and "
                       "the sufficient condition does not hold: privacy cannot be certified")
        if singular:
            singular_by_prime[p] = (singular, len(coalitions))
        table_rows.append([p, f"{method}: {len(coalitions)} of {total}",
                           "yes" if entry["sufficient_condition"] else "NO",
                           "yes" if entry["prime_exceeds_l_t_m"] else "NO",
                           f"{int(ranks.min())} (need {t})", len(singular)])
    if singular_by_prime:
        listed = ", ".join(map(str, singular_by_prime))
        singular, checked = next(iter(singular_by_prime.values()))
        c, r = singular[0]
        check.fail(
            f"{len(singular)} of {checked} coalitions of t = {t} parties have a singular noise "
            f"block over prime(s) {listed}, e.g. parties {[j + 1 for j in c]} (rank {r} < {t}): "
            "their shares are not masked by the noise")
    check.evidence["primes"] = per_prime
    check.tables.append((
        "Evaluation points used (the same integers for every prime)",
        ["point", "values"],
        [["α (interpolation: data segments 1..l, then noise)", ", ".join(map(str, alphas))],
         ["β (one per party)", ", ".join(map(str, betas))]]))
    check.tables.append((
        "Noise-block ranks per prime (exact, over GF(p))",
        ["prime p", "coalitions checked", "sufficient condition", "p > l+t+m",
         "min rank", "singular blocks"], table_rows))
    if check.verdict == PASS:
        methods = {e.get("method") for e in per_prime}
        how = ("every coalition checked" if methods == {"exhaustive"}
               else "sufficient condition verified and a random sample of coalitions checked")
        check.finding = (f"all {math.comb(m, t)} coalitions of t = {t} of m = {m} parties have an "
                         f"invertible noise block over {len(primes)} prime(s) ({how}); points "
                         "pairwise distinct, p > l+t+m")
    else:
        check.finding = check.reasons[0]
    return check
