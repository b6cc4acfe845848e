"""Check 7: parameter advice: which l fit d, n, m and the required t, and at what cost.

For each l (1 <= l <= d): the minimum party count 2l+2t-1, the per-party compute
(proportional to n²·d/l: every pair, s = ceil(d/l) features per share), the bytes each
party sends (its shares to every other party, and its upper-triangle evaluation to the
coordinator), and what each mode leaks.
"""

from __future__ import annotations

from finite_field import OmniFCError

from ._model import PASS, Check
from ._params import AuditParameters

__all__ = ["check_parameter_advice", "advice_rows"]

ELEMENT_BYTES = 4


def _leak(l: int, d: int) -> str:
    if l == 1:
        return ("D (plus each party's raw evaluation, which reveals essentially nothing "
                "beyond D)")
    if l == d:
        return "every coordinate up to shift and reflection"
    return f"{l} per-segment distance matrices ({-(-d // l)} features each)"


def advice_rows(params: AuditParameters) -> list:
    """One dict per l = 1..d with its cost and admissibility for m and t."""
    d, n, m, t = params.dim, params.rows, params.parties, params.noise_segments
    try:
        primes = len(params.session_primes())
    except OmniFCError:
        primes = 1
    rows_per_party = -(-n // m)
    out = []
    for l in range(1, d + 1):
        s = -(-d // l)
        minimum = 2 * l + 2 * t - 1
        out.append({
            "segments": l, "segment_length": s, "min_parties": minimum,
            "admissible": minimum <= m, "compute_relative": s / d,
            "multiply_adds_per_party": n * (n + 1) // 2 * s * primes,
            "share_bytes_per_party": rows_per_party * s * (m - 1) * ELEMENT_BYTES * primes,
            "upload_bytes_per_party": n * (n + 1) // 2 * ELEMENT_BYTES * primes,
            "masked_leak": "D only",
            "transparent_leak": _leak(l, d)})
    return out


def _size(b: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if b < 1000 or unit == "TB":
            return f"{b:.0f} {unit}" if unit == "B" else f"{b:.1f} {unit}"
        b /= 1000
    return f"{b:.1f} TB"  # pragma: no cover


def check_parameter_advice(params: AuditParameters) -> Check:
    """Check 7: admissible l values for (d, n, m, t) with cost and leakage per mode.

    Examples
    --------
    >>> from omnifc.audit import AuditParameters, check_parameter_advice
    >>> check = check_parameter_advice(AuditParameters(noise_segments=2))
    >>> check.verdict, check.evidence["admissible_segments"]
    ('fail', [])
    """
    d, n, m, t, l = params.dim, params.rows, params.parties, params.noise_segments, params.segments
    check = Check("parameter_advice", 7, "Parameter advice", verdict=PASS)
    check.reproduce = f"omnifc audit {params.cli_arguments()} --checks 7"
    rows = advice_rows(params)
    try:
        primes = len(params.session_primes())
    except OmniFCError:
        primes = 1
    admissible = [r["segments"] for r in rows if r["admissible"]]
    check.evidence.update(dim=d, rows=n, parties=m, noise_segments=t, chosen_segments=l,
                          admissible_segments=admissible, options=rows)
    if l > d:
        check.fail(f"l = {l} segments exceed d = {d} features")
    if t >= m:
        check.fail(f"t = {t} must be smaller than m = {m}")
    if not admissible:
        check.fail(f"no l works: t = {t} needs m >= 2l+2t-1 = {2 * t + 1} parties even with "
                   f"l = 1, and there are m = {m} (t too large for m; with m = {m} the largest "
                   f"t is {max((m - 1) // 2, 0)})")
    elif l not in admissible and l <= d:
        check.fail(f"the chosen l = {l} needs m >= {2 * l + 2 * t - 1} parties, there are {m}; "
                   f"admissible: l in {admissible}")
    shown = [r for r in rows if r["segments"] <= 8 or r["segments"] in (d, max(admissible or [1]))]
    check.tables.append((
        f"Options for d = {d}, n = {n}, m = {m}, t = {t} (per party; 4-byte field elements, "
        f"{primes} prime(s))",
        ["l", "min parties 2l+2t-1", "admissible", "compute (∝ n²·d/l) vs l=1",
         "shares sent", "upload to coordinator", "transparent mode leaks", "masked mode leaks"],
        [[r["segments"] if r["segments"] != l else f"**{r['segments']}** (chosen)",
          r["min_parties"], "yes" if r["admissible"] else "no",
          f"{r['compute_relative']:.2f}×", _size(r["share_bytes_per_party"]),
          _size(r["upload_bytes_per_party"]), r["transparent_leak"], r["masked_leak"]]
         for r in shown]))
    check.details.append(
        "Larger l divides each party's compute and share bytes by about l (shares carry "
        "ceil(d/l) features) but needs 2l+2t-1 parties, and in transparent mode leaks l "
        "per-segment distance matrices instead of D. The upload to the coordinator is one "
        "upper-triangle matrix per prime whatever l is. Masked mode reveals D only, for "
        "every l. Any t colluding parties learn nothing; t+1 with l = 1 (l+t in general) "
        "read everything (check 2).")
    if check.verdict == PASS:
        best = max(admissible)
        check.finding = (f"l = {l} is admissible (m = {m} ≥ {2 * l + 2 * t - 1}); admissible l "
                         f"for t = {t}: {admissible if len(admissible) <= 8 else f'1..{best}'}"
                         + (f"; l = {best} would cut per-party compute "
                            f"{-(-d // l) / -(-d // best):.3g}×" if best > l else ""))
    else:
        check.finding = check.reasons[0]
    return check
