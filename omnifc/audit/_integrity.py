"""Check 9: integrity: what deviating parties can do to D with these parameters.

With m parties all responding and K = 2l+2t-1 needed to decode, the r = m - K redundant
evaluations are Reed-Solomon parity checks (docs/integrity.md, docs/protocol.md). The
session declares A, the most parties that may deviate together ("detect": A <= r,
"correct": A <= floor(r/2)); against any A of them it returns exactly D or ends with a
DeviationError (P1), and never names or excludes a party outside them (P2).

The check states these numbers and then runs the worst cases at exactly A against real
in-memory parties (:mod:`protocols._faults`): a codeword forged by A colluders to look
like errors at honest parties, A parties framing an honest one, located errors beside
unlocatable ones, shares off the polynomial to every honest party, and independent lies.
Any run that returns a D other than the plaintext one, or names, excludes or reports a
party outside the coalition, fails the check.

* r = 0 (m = K), ``integrity = "off"`` or A = 0 (best effort): nothing is guaranteed
  against a deviating party; a wrong upload is shown corrupting D (warn).
* otherwise: pass when every worst-case coalition at A is caught.
"""

from __future__ import annotations

import numpy as np

from finite_field import (DeviationError, OmniFCError, ParameterError, check_adversaries,
                          decoding_radius, tolerance)

from ._model import PASS, WARN, Check
from ._params import AuditParameters

__all__ = ["check_integrity", "run_deviation", "WORST_CASES"]

#: The coalition patterns run at exactly A (see :mod:`protocols._faults`).
WORST_CASES = ("codeword", "framing", "mixed", "bad-shares", "random")


def run_deviation(params: AuditParameters, *, integrity: str, fault=None,
                  rows_per_party: int = 2, seed: int = 0) -> dict:
    """One in-memory session with the audit's parameters and ``fault``: a test-fault
    string for the second party, or a dict {party: fault}. P1 and P2 are judged against
    the deviating parties (those with a fault)."""
    from dataclasses import replace

    from protocols import run_memory_session

    from ._active import _session_parameters

    m = params.parties
    names = [f"party-{j + 1}" for j in range(m)]
    session = replace(_session_parameters(params, params.mode), integrity=integrity,
                      adversaries=None if integrity == "off" else params.adversaries)
    rng = np.random.default_rng(seed)
    q = params.quantizer
    data = {name: rng.uniform(q.lower, params.bound, (rows_per_party, params.dim))
            for name in names}
    quantized = np.concatenate([q.quantize(x).values for x in data.values()]).astype(object)
    truth = np.array([[int(sum((a - b) ** 2 for a, b in zip(u, v))) for v in quantized]
                      for u in quantized], dtype=np.int64)
    faults = fault if isinstance(fault, dict) else ({names[1]: fault} if fault else {})
    deviating = set(faults)
    try:
        outcome, _ = run_memory_session(data, session, faults=faults)
    except DeviationError as error:
        return {"returned": False, "error": str(error), "named": list(error.named),
                "suspects": [list(s) for s in error.suspects],
                "innocent_named": sorted(set(error.named) - deviating)}
    except OmniFCError as error:
        return {"returned": False, "error": str(error), "named": [], "suspects": [],
                "innocent_named": []}
    excluded = set(names) - set(outcome.responders) - set(outcome.lost)
    named = {x for d in outcome.deviations for x in d["named"]}
    return {"returned": True, "exact": bool(np.array_equal(outcome.integer, truth)),
            "wrong_entries": int(np.count_nonzero(outcome.integer != truth)),
            "deviations": outcome.deviations, "integrity": outcome.integrity,
            "culprit": names[1], "innocent_named": sorted((named | excluded) - deviating)}


def check_integrity(params: AuditParameters, *, seed: int = 0) -> Check:
    """Check 9: the declared bound A, attacked at exactly A by the worst coalitions.

    Examples
    --------
    >>> from omnifc.audit import AuditParameters, check_integrity
    >>> check_integrity(AuditParameters(parties=3)).evidence["detect"]    # m = K
    0
    >>> check = check_integrity(AuditParameters(parties=5))                # m = K + 2
    >>> check.verdict, check.evidence["adversaries"], check.evidence["radius"]
    ('pass', 2, 0)
    >>> sorted(check.evidence["attacks"]) == sorted(WORST_CASES)
    True
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
    try:
        a = check_adversaries(m, params.segments, params.noise_segments, params.adversaries,
                              params.integrity)
    except ParameterError as error:
        check.fail(f"the declared bound cannot hold: {error}")
        check.finding = str(error)
        return check
    radius = decoding_radius(r, a) if a else (r // 2 if r else 0)
    check.evidence.update(adversaries=a, radius=radius)
    description = tolerance(m, params.segments, params.noise_segments).describe()
    honest = run_deviation(params, integrity=params.integrity, fault=None, seed=seed)
    check.evidence["honest"] = honest
    if not honest.get("returned") or not honest.get("exact") or honest.get("deviations"):
        check.fail(f"an honest session did not return the exact D unflagged: {honest}")
    if params.integrity == "off" or r == 0 or a == 0:
        shown = run_deviation(params, integrity=params.integrity if r else "off",
                              fault="corrupt-upload", seed=seed)
        check.evidence["deviating"] = shown
        check.verdict = WARN if not check.failed else check.verdict
        why = ('integrity = "off"' if params.integrity == "off" else
               f"m = K = {k}: no redundant evaluation" if r == 0 else
               "adversaries = 0: best effort")
        what = (f"corrupts D silently ({shown.get('wrong_entries', '?')} wrong entries in "
                "the demonstration)" if shown.get("returned") else
                "was caught here, but nothing is promised")
        check.finding = (f"nothing is guaranteed against a deviating party ({why}): a party "
                         f"that uploads wrong values {what}")
        check.reasons.append(check.finding)
        if r > 0 and params.integrity == "off":
            check.finding += f"; integrity = \"detect\" would detect up to {r}"
        return check
    policy = ("every deviation of up to A parties ends the session (detected, never "
              "located)" if radius == 0 else
              f"errors at up to {radius} evaluators per entry are located; named parties are"
              f" {'corrected' if params.integrity == 'correct' else 'excluded and the round rerun'}")
    check.details.append(
        f"{description}. integrity = \"{params.integrity}\" with A = {a} declared: {policy}; "
        f"A = {a} is the most parties the guarantee covers (more than {a} together can "
        "forge a wrong D; docs/integrity.md, 'Declared adversaries'). Shown below with real "
        f"in-memory parties: {a} of them deviate together in each worst case "
        f"({', '.join(WORST_CASES)}).")
    names = [f"party-{j + 1}" for j in range(m)]
    members = names[1:1 + a]
    attacks = {}
    for pattern in WORST_CASES:
        spec = f"coalition:{pattern}:{','.join(members)}"
        shown = run_deviation(params, integrity=params.integrity,
                              fault={x: spec for x in members}, seed=seed)
        attacks[pattern] = {key: shown.get(key) for key in
                            ("returned", "exact", "wrong_entries", "named", "suspects",
                             "innocent_named", "error")}
        if shown["returned"] and not shown["exact"]:
            check.fail(f"{pattern}: {a} colluding parties made the session return a wrong D "
                       f"({shown['wrong_entries']} entries)")
        if shown["innocent_named"]:
            check.fail(f"{pattern}: parties outside the coalition {members} were named or "
                       f"excluded: {shown['innocent_named']}")
    check.evidence["attacks"] = attacks
    check.evidence["coalition"] = members
    if not check.failed:
        outcomes = sorted({"corrected" if v["returned"] else "aborted"
                           for v in attacks.values()})
        check.finding = (f"A = {a} of r = {r}: every worst-case coalition of {a} parties was "
                         f"{' or '.join(outcomes)}; D was never wrong and nobody outside the "
                         "coalition was named")
    return check
