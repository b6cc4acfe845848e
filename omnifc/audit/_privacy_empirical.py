"""Check 2: t-privacy of the encoding, empirically, and its tightness.

The real encoder (:func:`finite_field.encode_rows`) encodes two very different data sets;
a chi-square homogeneity test compares a t-coalition's views. Then the coalition gets one
more party: t+1 parties hold a noise-free linear combination of the data (the views become
distinguishable), and l+t parties (t+1 when l = 1) interpolate every row exactly. The bound
is tight. Check 1, the algebraic side, is :mod:`omnifc.audit._privacy_algebraic`.
"""

from __future__ import annotations

import itertools
import math

import galois
import numpy as np

from finite_field import ParameterError, encode_rows, lagrange_basis_at

from ._model import PASS, Check
from ._params import AuditParameters, audit_plan, encoding_matrix, smallest_prime_above
from ._privacy_algebraic import _coalitions, noise_block_ranks, point_problems
from ._stats import FAMILY_ALPHA, chi2_homogeneity

__all__ = ["check_empirical_privacy", "reconstruct_rows"]


def reconstruct_rows(shares, coalition, params: AuditParameters, prime: int) -> np.ndarray:
    """What ``coalition`` (l+t party indices) learns: every row, by interpolating f.

    ``shares`` is the per-party list of (n, s) share arrays for ``prime``. Returns the
    signed quantized rows (n, d). Raises :class:`ParameterError` when the coalition has
    fewer than l+t distinct points.
    """
    l, t = params.segments, params.noise_segments
    alphas, betas = params.raw_points()
    points = [int(betas[j]) % prime for j in coalition]
    if len(set(points)) < l + t or len(coalition) < l + t:
        raise ParameterError(f"interpolating a degree-{l + t - 1} polynomial needs l+t = {l + t} "
                             f"distinct points, the coalition has {len(set(points))}")
    coalition, points = list(coalition)[: l + t], points[: l + t]
    stack = np.stack([np.asarray(shares[j], dtype=np.int64) for j in coalition])  # (l+t, n, s)
    segments = []
    for o in range(l):
        weights = lagrange_basis_at(points, int(alphas[o]) % prime, prime)
        acc = np.zeros(stack.shape[1:], dtype=np.int64)
        for w, share in zip(weights, stack):
            acc = (acc + w * share) % prime
        segments.append(acc)
    rows = np.concatenate(segments, axis=1)[:, : params.dim]
    return np.where(rows > prime // 2, rows - prime, rows)


def _test_prime(params: AuditParameters, samples: int) -> tuple[int, str]:
    """A small prime whose elements can each be a histogram cell, and how views are binned."""
    t = params.noise_segments
    alphas, betas = params.raw_points()
    floor_ = max([abs(int(x)) for x in alphas + betas] + [params.segments + t + params.parties, 10])
    budget = max(samples // 20, 16)  # >= 20 expected counts per cell in each sample
    target = int(budget ** (1.0 / t))
    if target > floor_:
        p = target
        while p > floor_ and not galois.is_prime(p):
            p -= 1
        if p > floor_:
            return p, "joint"
    p = smallest_prime_above(floor_)
    return p, ("joint" if p**t <= budget else "members and a random combination")


def _views_to_cells(views: np.ndarray, p: int, how: str, rng) -> list[tuple[str, np.ndarray]]:
    """views: (k, n, s) field elements of k parties -> named cell-index samples in [0, p^...)."""
    k = views.shape[0]
    if how == "joint":
        cells = np.zeros(views.shape[1:], dtype=np.int64)
        for i in range(k):
            cells = cells * p + views[i]
        return [("joint view", cells)]
    out = [(f"member {i + 1}", views[i]) for i in range(k)]
    coeffs = rng.integers(1, p, size=k)
    out.append(("random combination", (np.tensordot(coeffs, views, axes=1)) % p))
    return out


def _binned(values: np.ndarray, p: int, bins: int) -> np.ndarray:
    return (values.astype(np.float64) * bins / p).astype(np.int64).clip(0, bins - 1)


def check_empirical_privacy(params: AuditParameters, *, rows_per_set: int = 2_000,
                            seed: int = 0, noise_source=None, max_coalitions_tested: int = 6,
                            bins: int = 64) -> Check:
    """Check 2: a t-coalition cannot tell two data sets apart; t+1 (l+t) parties can.

    Parameters
    ----------
    params : AuditParameters
    rows_per_set : int
        Rows in each of the two data sets.
    seed : int
        Seed of the *data sets* and coalition sampling (the encoder's noise comes from
        ``noise_source``: the OS CSPRNG by default, exactly as in a session).
    noise_source : ByteSource, optional
        Inject another noise source (tests use it to show a broken one is caught).
    max_coalitions_tested : int
        How many t-coalitions are tested (all when there are at most this many).
    bins : int
        Equal-width bins of GF(p) for the test at the session prime.

    Examples
    --------
    >>> import numpy as np
    >>> from omnifc.audit import AuditParameters, check_empirical_privacy
    >>> noise = np.random.default_rng(0)   # seeded noise: a reproducible verdict (docs only)
    >>> check = check_empirical_privacy(AuditParameters(), rows_per_set=500,
    ...                                 noise_source=noise)
    >>> check.verdict, check.evidence["tightness"]["rows_recovered_exactly"]   # t+1 recover
    ('pass', 500)
    >>> round(check.evidence["min_p_value"], 4)   # the smallest p-value over coalitions
    0.2447
    """
    l, t, m = params.segments, params.noise_segments, params.parties
    check = Check("empirical_privacy", 2, "Empirical t-privacy and its tightness (t+1 parties)",
                  verdict=PASS)
    check.reproduce = (f"omnifc audit {params.cli_arguments()} --checks 2\n\n"
                       "from omnifc.audit import AuditParameters, check_empirical_privacy\n"
                       f"check_empirical_privacy({params.python_arguments()})")
    alphas, betas = params.raw_points()
    try:
        session_primes = params.session_primes()
        small_prime, how = _test_prime(params, rows_per_set * params.segment_length)
        # Constructing the matrices validates the interpolation points.
        encoding_matrix(alphas, betas, small_prime)
        encoding_matrix(alphas, betas, session_primes[0])
    except ParameterError as error:
        check.fail(f"not run: {error}")
        check.finding = check.reasons[0]
        return check
    if len(alphas) != l + t or len(betas) != m or t >= m:
        check.fail(f"not run: the parameters define no valid coalition structure (l={l}, t={t}, "
                   f"m={m}, {len(alphas)} alphas, {len(betas)} betas)")
        check.finding = check.reasons[0]
        return check

    rng = np.random.default_rng(seed)
    quantizer = params.quantizer
    n, d, s = rows_per_set, params.dim, params.segment_length
    data_a = np.zeros((n, d), dtype=np.int64)
    data_b = quantizer.quantize(rng.uniform(quantizer.lower, params.bound, size=(n, d))).values
    check.details.append(
        f"Data set A: {n} rows of zeros (every feature at the bottom of its range). Data set B: "
        f"{n} rows drawn uniformly in [{quantizer.lower:g}, {params.bound:g}]^{d} (seed {seed}), "
        f"quantized with q = {params.scale_bits}. Both are encoded by the real encoder "
        "(`finite_field.encode_rows`) with the session's points; noise comes from "
        + ("the OS CSPRNG, exactly as in a session." if noise_source is None
           else f"an injected source ({type(noise_source).__name__})."))

    plan_small = audit_plan(params, primes=[small_prime])
    plan_session = audit_plan(params, primes=[session_primes[0]])
    shares = {}
    for name, data in (("A", data_a), ("B", data_b)):
        shares[("small", name)] = encode_rows(plan_small, data, noise_source)[0]
        shares[("session", name)] = encode_rows(plan_session, data, noise_source)[0]

    # Coalitions: those with a singular noise block at the test prime first (worst case).
    matrix_small = encoding_matrix(alphas, betas, small_prime)
    all_coalitions = math.comb(m, t)
    if all_coalitions <= max_coalitions_tested:
        coalitions = list(itertools.combinations(range(m), t))
    else:
        coalitions = _coalitions(m, t, 0, max_coalitions_tested, seed)[0]
        singular = []
        if point_problems(alphas, betas, l, small_prime):
            # Distinct points make every block invertible (Cauchy); otherwise find the bad ones.
            singular = [c for c in itertools.islice(itertools.combinations(range(m), t), 20_000)
                        if noise_block_ranks(matrix_small, l, small_prime, [c])[0] < t]
        coalitions = (singular[:max_coalitions_tested] + coalitions)[:max_coalitions_tested]

    tests = []
    for coalition in coalitions:
        views = {k: np.stack([shares[(k[0], k[1])][j] for j in coalition])
                 for k in [("small", "A"), ("small", "B"), ("session", "A"), ("session", "B")]}
        view_rng = np.random.default_rng([seed, *coalition])
        cells_a = _views_to_cells(views[("small", "A")], small_prime, how, view_rng)
        view_rng = np.random.default_rng([seed, *coalition])
        cells_b = _views_to_cells(views[("small", "B")], small_prime, how, view_rng)
        n_cells = small_prime ** t if how == "joint" else small_prime
        for (label, a), (_, b) in zip(cells_a, cells_b):
            result = chi2_homogeneity(a, b, n_cells)
            tests.append({"coalition": [j + 1 for j in coalition], "field": f"GF({small_prime})",
                          "statistic_of": label, "binning": "one cell per element"
                          if how == "joint" else "one cell per element", **result})
        for i, j in enumerate(coalition):
            result = chi2_homogeneity(_binned(views[("session", "A")][i], session_primes[0], bins),
                                      _binned(views[("session", "B")][i], session_primes[0], bins),
                                      bins)
            tests.append({"coalition": [x + 1 for x in coalition],
                          "field": f"GF({session_primes[0]})",
                          "statistic_of": f"member {i + 1} (party {j + 1})",
                          "binning": f"{bins} equal-width bins", **result})
    threshold = FAMILY_ALPHA / len(tests)
    flagged = [x for x in tests if x["p_value"] < threshold]
    check.evidence.update(
        test="Pearson chi-square homogeneity test (2 x cells contingency table), data set A "
             "views vs data set B views",
        rows_per_set=n, elements_per_row=s, small_prime=small_prime, cells_mode=how,
        session_prime=session_primes[0], family_false_positive_rate=FAMILY_ALPHA,
        tests=len(tests), per_test_threshold=threshold,
        coalitions_tested=[[j + 1 for j in c] for c in coalitions],
        coalitions_total=all_coalitions, min_p_value=min(x["p_value"] for x in tests),
        results=tests)
    check.details.append(
        f"Test: Pearson chi-square homogeneity of the coalition's views of A against those of B, "
        f"{n} rows × {s} elements = {n * s} field elements per sample. Over the small prime "
        f"GF({small_prime}) (same points, same encoder) each "
        + ("joint value of the coalition's t shares" if how == "joint"
           else "member's share and a random linear combination of the members' shares")
        + f" is one cell; over the session prime GF({session_primes[0]}) each member's share is "
        f"binned into {bins} equal-width bins. {len(tests)} tests over {len(coalitions)} of "
        f"{all_coalitions} coalitions; Bonferroni: each test rejects at p < {threshold:.2g}, so "
        f"the family-wise false-positive rate is {FAMILY_ALPHA:g}.")
    check.tables.append((
        "t-coalition views, data set A vs data set B",
        ["coalition (parties)", "field", "statistic of", "cells", "chi²", "dof", "p-value",
         "flagged"],
        [[", ".join(map(str, x["coalition"])), x["field"], x["statistic_of"], x["cells"],
          f"{x['statistic']:.1f}", x["dof"], f"{x['p_value']:.3g}",
          "YES" if x["p_value"] < threshold else "no"] for x in tests]))
    for x in flagged[:5]:
        check.fail(f"coalition {x['coalition']} ({x['field']}, {x['statistic_of']}): the views of "
                   f"the two data sets differ (chi² = {x['statistic']:.1f}, "
                   f"p = {x['p_value']:.3g} "
                   f"< {threshold:.2g}): the shares are not independent of the data")

    # Tightness: one more party.
    base = list(coalitions[0])
    extra = _extend(base, t + 1, betas, alphas, session_primes[0])
    tight = _tightness(params, base, extra, matrix_small, small_prime, shares, data_a, data_b,
                       session_primes[0], check)
    combination_values = tight.pop("combination_values", None)
    check.evidence["tightness"] = tight
    check.plots.append(("privacy_views.png",
                        lambda path: _plot_views(
                            path, shares, base, tight, combination_values, small_prime, t,
                            p_left=min((x["p_value"] for x in tests
                                        if x["coalition"] == [j + 1 for j in base]
                                        and x["field"] == f"GF({small_prime})"), default=None),
                            p_right=tight.get("noise_free_combination", {}).get("p_value"))))
    check.figures.append("privacy_views.png")
    if check.verdict == PASS:
        check.finding = (f"no t-coalition ({len(coalitions)} tested, t = {t}) tells the two data "
                         f"sets apart (min p = {check.evidence['min_p_value']:.3g}, family "
                         f"false-positive rate {FAMILY_ALPHA:g}); " + tight["summary"])
    else:
        check.finding = check.reasons[0]
    return check


def _extend(base, size, betas, alphas, prime):
    """base plus the lowest-index parties whose points keep the coalition's points distinct."""
    out = list(base)
    used = {int(betas[j]) % prime for j in out}
    for j in range(len(betas)):
        if len(out) >= size:
            break
        point = int(betas[j]) % prime
        if j not in out and point not in used:
            out.append(j)
            used.add(point)
    return out


def _tightness(params, base, bigger, matrix_small, small_prime, shares, data_a, data_b,
               session_prime, check) -> dict:
    l, t = params.segments, params.noise_segments
    out = {"coalition": [j + 1 for j in base], "plus_one": [j + 1 for j in bigger]}
    # (a) t+1 parties: a left-null combination of their noise block cancels the noise.
    if len(bigger) == t + 1:
        field = galois.GF(small_prime)
        block = field(matrix_small[l:, bigger] % small_prime)
        null = block.null_space()
        if null.shape[0]:
            w = np.asarray(null[0], dtype=np.int64)
            comb = {k: np.tensordot(w, np.stack([shares[("small", k)][j] for j in bigger]),
                                    axes=1) % small_prime for k in ("A", "B")}
            result = chi2_homogeneity(comb["A"], comb["B"], small_prime)
            out["noise_free_combination"] = {"weights": w.tolist(), **result}
            out["combination_values"] = comb
    # (b) l+t parties interpolate every row exactly (l = 1: that is the t+1 coalition).
    recon = _extend(base, l + t, params.raw_points()[1], params.raw_points()[0], session_prime)
    out["reconstructing_coalition"] = [j + 1 for j in recon]
    try:
        rows = reconstruct_rows(shares[("session", "B")], recon, params, session_prime)
        exact = int(np.all(rows == data_b, axis=1).sum())
        out.update(rows=int(data_b.shape[0]), rows_recovered_exactly=exact,
                   max_abs_error=int(np.abs(rows - data_b).max()))
    except ParameterError as error:
        out.update(rows=int(data_b.shape[0]), rows_recovered_exactly=0, error=str(error))
    all_exact = out["rows_recovered_exactly"] == out["rows"]
    p_comb = out.get("noise_free_combination", {}).get("p_value")
    if l == 1:
        out["summary"] = (f"t+1 = {t + 1} colluding parties {out['reconstructing_coalition']} "
                          f"reconstruct {out['rows_recovered_exactly']} of {out['rows']} rows of "
                          "the others exactly: the bound is tight")
    else:
        out["summary"] = (f"t+1 = {t + 1} parties hold a noise-free combination of the data "
                          f"(A vs B p = {p_comb:.3g}); l+t = {l + t} parties reconstruct "
                          f"{out['rows_recovered_exactly']} of {out['rows']} rows exactly: the "
                          "bound is tight")
    check.details.append(
        f"Tightness. Coalition {out['coalition']} gets one more party: {out['plus_one']}. The "
        f"t × (t+1) noise block of t+1 parties always has a left null vector w, so w·(their "
        "shares) is a linear function of the data alone"
        + (f" — its A-vs-B chi-square p-value is {p_comb:.3g} (distinguishable)"
           if p_comb is not None else "")
        + f". Exact reconstruction of a row needs l+t = {l + t} shares of the degree-"
        f"(l+t-1) polynomial f (in general: any l+t parties with distinct points); "
        + ("with l = 1 that is exactly t+1 parties. " if l == 1 else
           f"with l = {l} the t+1 parties learn linear relations, and l+t parties learn "
           "everything. ")
        + f"Parties {out['reconstructing_coalition']} interpolated f at α_1..α_l over "
        f"GF({session_prime}) and recovered {out['rows_recovered_exactly']} of {out['rows']} "
        "quantized rows bit for bit.")
    check.tables.append((
        "Tightness: the coalition plus one party",
        ["what", "parties", "result"],
        [["noise-free combination (t+1 parties)", ", ".join(map(str, out["plus_one"])),
          "—" if p_comb is None else f"A vs B p = {p_comb:.3g} (distinguishable)"],
         [f"interpolation of f (l+t = {l + t} parties)",
          ", ".join(map(str, out["reconstructing_coalition"])),
          f"{out['rows_recovered_exactly']} of {out['rows']} rows exact"]]))
    if not all_exact and not out.get("error"):
        check.fail("the l+t-party reconstruction did not return the quantized rows: the encoder "
                   "is not the Lagrange code the parameters describe")
    return out


def _plot_views(path, shares, coalition, tight, values, p, t, p_left=None,
                p_right=None, bins=20) -> list:
    """Two panels of binned frequencies (A, B and the uniform reference with its ±2σ band)."""
    from ._figures import pyplot, save_figure

    plt = pyplot()

    edges = np.linspace(0, p, bins + 1)

    def panel(ax, samples, title, p_value, legend):
        total = None
        for name, color, marker in (("A", "tab:blue", "o"), ("B", "tab:orange", "s")):
            x = np.asarray(samples[name]).ravel()
            counts, _ = np.histogram(x, bins=edges)
            total = x.size
            ax.plot((edges[:-1] + edges[1:]) / 2, counts / x.size, marker=marker, ms=4, lw=1,
                    color=color, label=f"data set {name}")
        width = np.diff(edges) / p                      # uniform probability of each bin
        sigma = np.sqrt(width * (1 - width) / total)
        low, high = width - 2 * sigma, width + 2 * sigma
        ax.fill_between(edges, np.append(low, low[-1]),
                        np.append(high, high[-1]), step="post", color="gray", alpha=0.25,
                        label="uniform ± 2σ")
        ax.step(edges, np.append(width, width[-1]), where="post", color="black",
                lw=0.8, label="uniform")
        ax.set_xlabel(f"field element of GF({p}), in {bins} equal bins")
        ax.set_ylabel("fraction of values")
        verdict = "" if p_value is None else (
            f"\nA vs B: p = {p_value:.3g} " + ("(no difference found)" if p_value >= 1e-3
                                              else "(told apart)"))
        ax.set_title(title + verdict, fontsize=10)
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=8, loc=legend, ncol=2)

    member = coalition[0]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    panel(axes[0], {name: shares[("small", name)][member] for name in ("A", "B")},
          f"party {member + 1}'s shares (a t = {t} coalition)", p_left,
          "lower center")
    if values is not None:
        panel(axes[1], values, f"noise-free combination of t+1 parties {tight['plus_one']}",
              p_right, "center right")
    else:
        axes[1].axis("off")
    return save_figure(fig, path)  # what a reader sees, for tests
