"""Check 6: numerics: the no-wrap headroom of the primes and the quantization error.

Squared distances of quantized rows are at most 4·d·M² (d·M² for features in [0, R]),
M = round(2^q R). The session's primes (their product, with several primes recombined by
CRT) must exceed that bound, or results wrap around silently. The dequantized distances
then differ from the real ones by at most 2·||x-y||·sqrt(d)·2^-q + d·4^-q
(omnifc_math.md §4). The check measures both on a sample that includes the two opposite
corners of the data box (the largest possible distance).
"""

from __future__ import annotations

import math

import numpy as np

from finite_field import OmniFCError

from ._model import PASS, Check
from ._params import AuditParameters

__all__ = ["check_numerics"]


def check_numerics(params: AuditParameters, *, rows: int = 60, seed: int = 0) -> Check:
    """Check 6: headroom bits of the primes and observed vs bound quantization error.

    Examples
    --------
    >>> from omnifc.audit import AuditParameters, check_numerics
    >>> check = check_numerics(AuditParameters(), rows=20)
    >>> check.verdict, check.evidence["exact"]
    ('pass', True)
    """
    d = params.dim
    check = Check("numerics", 6, "Numerics: no-wrap headroom and quantization error",
                  verdict=PASS)
    check.reproduce = (f"omnifc audit {params.cli_arguments()} --checks 6\n\n"
                       "from omnifc.audit import AuditParameters, check_numerics\n"
                       f"check_numerics({params.python_arguments()})")
    q = params.quantizer
    bound = q.distance_bound(d)
    try:
        primes = params.session_primes()
    except OmniFCError as error:
        check.fail(f"no primes can hold every squared distance: {error}")
        check.finding = check.reasons[0]
        return check
    product_bits = math.log2(math.prod(primes))
    need_bits = math.log2(bound + 1)
    headroom = product_bits - need_bits
    check.evidence.update(
        max_magnitude=q.max_magnitude, distance_bound=bound, bits_needed=round(need_bits, 3),
        primes=list(primes), bits_available=round(product_bits, 3),
        headroom_bits=round(headroom, 3), int64_margin_bits=round(63 - need_bits, 3),
        prime_bits=[round(math.log2(p), 3) for p in primes])
    if headroom <= 0:
        check.fail(f"the primes hold {product_bits:.1f} bits but distances need {need_bits:.1f}: "
                   "results would wrap around")

    rng = np.random.default_rng(seed)
    data = rng.uniform(q.lower, params.bound, size=(rows, d))
    data[0], data[1] = q.lower, params.bound  # opposite corners: the largest distance
    quantized = q.quantize(data).values
    norms = (quantized * quantized).sum(axis=1)
    reference = norms[:, None] + norms[None, :] - 2 * (quantized @ quantized.T)
    how = "secure_distance_matrix (the real pipeline)"
    try:
        from .._secure import secure_distance_matrix

        result = secure_distance_matrix(np.array_split(data, params.parties), bound=params.bound,
                                        scale_bits=params.scale_bits, segments=params.segments,
                                        noise_segments=params.noise_segments,
                                        nonnegative=params.nonnegative, primes=params.primes)
        integer = result.integer_distances
    except OmniFCError as error:
        how = f"not run: the session refuses these parameters ({error})"
        check.fail(f"the pipeline cannot run with these parameters: {error}")
        integer = None
    diff = data[:, None, :] - data[None, :, :]
    true_sq = np.einsum("ijk,ijk->ij", diff, diff)
    exact = integer is not None and bool(np.array_equal(integer, reference))
    check.evidence.update(rows=rows, computed_by=how, exact=exact,
                          largest_distance_in_sample=int(reference.max()),
                          largest_is_bound=bool(reference.max() == bound))
    if integer is not None:
        observed = np.abs(q.dequantize_distances(integer) - true_sq)
        per_pair = np.vectorize(lambda r: q.error_bound(d, distance=r))(np.sqrt(true_sq))
        worst_ratio = float((observed / per_pair).max())
        check.evidence.update(max_observed_error=float(observed.max()),
                              worst_case_bound=q.error_bound(d),
                              max_ratio_to_pair_bound=worst_ratio)
        if not exact:
            check.fail("the reconstructed integer distances differ from the plaintext "
                       "quantized distances")
        if worst_ratio > 1.0:
            check.fail(f"an observed error exceeds its bound (ratio {worst_ratio:.3g})")
    check.details.append(
        f"M = round(2^q R) = {q.max_magnitude}; the largest squared distance of quantized rows "
        f"is {'d·M²' if params.nonnegative else '4·d·M²'} = {bound} ({need_bits:.1f} bits). "
        f"Primes {list(primes)} give {product_bits:.1f} bits"
        + (" (recombined by CRT)" if len(primes) > 1 else "")
        + f": {headroom:.1f} bits of headroom; the int64 result type leaves "
        f"{63 - need_bits:.1f} bits.")
    check.details.append(
        f"Sample: {rows} rows uniform in the box plus its two opposite corners, computed by "
        f"{how}. The integer distances equal the plaintext quantized distances bit for bit: "
        f"{'yes' if exact else 'NO'}"
        + (f" (the sample's largest distance is the bound itself: "
           f"{'yes' if reference.max() == bound else 'no'})." if integer is not None else ".")
        + (f" Quantization error: largest observed |D̂ − D| = "
           f"{check.evidence['max_observed_error']:.3g}, worst-case bound over the box "
           f"{check.evidence['worst_case_bound']:.3g}; every pair is "
           f"within its own bound 2‖x−y‖√d·2^-q + d·4^-q (largest ratio "
           f"{check.evidence['max_ratio_to_pair_bound']:.3g})." if integer is not None else ""))
    check.tables.append((
        "No-wrap margin and quantization error", ["quantity", "value"],
        [["distance bound", f"{bound} ({need_bits:.1f} bits)"],
         ["primes", ", ".join(f"{p} ({math.log2(p):.1f} bits)" for p in primes)],
         ["headroom", f"{headroom:.1f} bits"],
         ["exact on sample (bit for bit)", "yes" if exact else "NO"],
         ["max observed error (squared distance)",
          f"{check.evidence.get('max_observed_error', float('nan')):.3g}"],
         ["worst-case error bound", f"{q.error_bound(d):.3g}"]]))
    if check.verdict == PASS:
        check.finding = (f"{headroom:.1f} bits of headroom over {len(primes)} prime(s); exact on "
                         f"the sample incl. the largest possible distance; max error "
                         f"{check.evidence['max_observed_error']:.2g} ≤ bound "
                         f"{q.error_bound(d):.2g}")
    else:
        check.finding = check.reasons[0]
    return check
