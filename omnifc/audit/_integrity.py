"""Check 9: integrity: what a deviating party can do to D with these parameters.

With m parties all responding and K = 2l+2t-1 needed to decode, the r = m - K redundant
evaluations are Reed-Solomon parity checks (docs/integrity.md, docs/protocol.md): a session
detects up to r wrong parties per entry and locates (corrects, or excludes and reruns
without) up to floor(r/2). The check states these numbers and shows them with real
in-memory parties, one of which adds errors to its upload (the ``corrupt-upload`` test
fault of the party process): an honest run must have every syndrome zero, the corrupted
run must never return an unflagged D.

* r = 0 (m = K): nothing can be checked; a wrong upload silently corrupts D (warn).
* ``integrity = "off"``: the same, by choice (warn).
* r = 1: detected, not located: the session returns nothing (pass).
* r >= 2: located and named; with "correct" D is exact (pass).
"""

from __future__ import annotations

import numpy as np

from finite_field import DeviationError, OmniFCError, tolerance

from ._model import PASS, WARN, Check
from ._params import AuditParameters

__all__ = ["check_integrity", "run_deviation"]


def run_deviation(params: AuditParameters, *, integrity: str, fault: str | None,
                  rows_per_party: int = 2, seed: int = 0) -> dict:
    """One in-memory session with the audit's parameters, ``fault`` on the second party."""
    from dataclasses import replace

    from protocols import run_memory_session

    from ._active import _session_parameters

    m = params.parties
    names = [f"party-{j + 1}" for j in range(m)]
    session = replace(_session_parameters(params, params.mode), integrity=integrity)
    rng = np.random.default_rng(seed)
    q = params.quantizer
    data = {name: rng.uniform(q.lower, params.bound, (rows_per_party, params.dim))
            for name in names}
    quantized = np.concatenate([q.quantize(x).values for x in data.values()]).astype(object)
    truth = np.array([[int(sum((a - b) ** 2 for a, b in zip(u, v))) for v in quantized]
                      for u in quantized], dtype=np.int64)
    faults = {names[1]: fault} if fault else {}
    try:
        outcome, _ = run_memory_session(data, session, faults=faults)
    except DeviationError as error:
        return {"returned": False, "error": str(error), "named": list(error.named),
                "suspects": [list(s) for s in error.suspects]}
    except OmniFCError as error:
        return {"returned": False, "error": str(error), "named": [], "suspects": []}
    return {"returned": True, "exact": bool(np.array_equal(outcome.integer, truth)),
            "wrong_entries": int(np.count_nonzero(outcome.integer != truth)),
            "deviations": outcome.deviations, "integrity": outcome.integrity,
            "culprit": names[1]}


def check_integrity(params: AuditParameters, *, seed: int = 0) -> Check:
    """Check 9: detection and correction capacity, shown with a real deviating party.

    Examples
    --------
    >>> from omnifc.audit import AuditParameters, check_integrity
    >>> check_integrity(AuditParameters(parties=3)).evidence["detect"]    # m = K
    0
    >>> check = check_integrity(AuditParameters(parties=5))                # m = K + 2
    >>> check.verdict, check.evidence["locate"], check.evidence["deviating"]["named"]
    ('pass', 1, ['party-2'])
    """
    check = Check("integrity", 9, "Integrity: parties that compute or share wrongly",
                  verdict=PASS)
    check.reproduce = (f"omnifc audit {params.cli_arguments()} --checks 9\n\n"
                       "from omnifc.audit import AuditParameters, check_integrity\n"
                       f"check_integrity({params.python_arguments()})")
    m, k = params.parties, params.min_parties
    r = m - k
    check.evidence.update(parties=m, needed=k, redundancy=max(r, 0),
                          detect=max(r, 0), locate=max(r, 0) // 2,
                          integrity=params.integrity)
    if r < 0:
        check.verdict = WARN
        check.finding = f"m = {m} parties cannot decode (K = 2l+2t-1 = {k})"
        check.reasons.append(check.finding)
        return check
    description = tolerance(m, params.segments, params.noise_segments).describe()
    check.details.append(
        f"{description}. Every entry of D is checked by r = m - K = {r} Reed-Solomon parity "
        "check(s) over the uploads it is decoded from (docs/protocol.md, 'Integrity'). "
        "Shown below with real in-memory parties, the second of which adds errors to every "
        "fifth value of its upload.")
    honest = run_deviation(params, integrity=params.integrity, fault=None, seed=seed)
    check.evidence["honest"] = honest
    if not honest.get("returned") or not honest.get("exact") or honest.get("deviations"):
        check.fail(f"an honest session did not return the exact D unflagged: {honest}")
    policy = "correct" if params.integrity == "off" else params.integrity
    if params.integrity == "off" or r == 0:
        shown = run_deviation(params, integrity="off", fault="corrupt-upload", seed=seed)
        check.evidence["deviating"] = shown
        check.verdict = WARN if not check.failed else check.verdict
        why = ('integrity = "off"' if params.integrity == "off" else
               f"m = K = {k}: no redundant evaluation")
        check.finding = (f"nothing is checked ({why}): a party that uploads wrong values "
                         f"corrupts D silently ({shown.get('wrong_entries', '?')} wrong "
                         "entries in the demonstration)")
        check.reasons.append(check.finding)
        if r > 0:
            check.finding += f"; integrity = \"detect\" would detect up to {r}"
        return check
    shown = run_deviation(params, integrity=policy, fault="corrupt-upload", seed=seed)
    check.evidence["deviating"] = shown
    culprit = "party-2"
    if shown["returned"]:
        flagged = bool(shown["deviations"])
        if not flagged or not shown["exact"]:
            check.fail(f"a corrupted upload gave an {'unflagged' if not flagged else 'inexact'}"
                       " result")
        elif shown["deviations"][0]["named"] != [culprit]:
            check.fail(f"the corrupted upload of {culprit} named "
                       f"{shown['deviations'][0]['named']}")
        check.evidence["deviating"]["named"] = shown["deviations"][0]["named"] if flagged \
            else []
        action = shown["deviations"][0]["action"] if flagged else "none"
        check.finding = (f"detects up to {r} wrong parties per entry and locates up to "
                         f"{r // 2}: a corrupted upload was {action} and {culprit} named")
    else:
        if shown["named"] and shown["named"] != [culprit]:
            check.fail(f"an innocent party was named: {shown['named']}")
        check.finding = (f"detects up to {r} wrong parties per entry, locates "
                         f"{r // 2}: a corrupted upload was detected and the session "
                         "returned nothing")
        if r >= 2:
            check.fail("a single corrupted upload should have been located with r >= 2")
    return check
