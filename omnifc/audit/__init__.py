"""Privacy audit: make every row of the threat model checkable on actual parameters.

``run_audit`` takes a session's public parameters (d, R, q, l, t, m, primes, points, mode;
from arguments or from the session config ``serve``/``join`` use) and runs nine checks,
each with a verdict (pass / fail / warn / info), its evidence and how to reproduce it:

1. algebraic t-privacy (exact ranks of every t-coalition's noise block over GF(p));
2. empirical t-privacy (a stated two-sample test on the real encoder) and its tightness
   (t+1 parties reconstruct the others' rows);
3. what the coordinator learns (attacks on its recorded transcript, both modes);
4. what the distance matrix itself reveals (known-sample attack: MDS + Procrustes);
5. transport (TLS, client authentication, identity pinning, AEAD, mode);
6. numerics (no-wrap headroom, quantization error observed vs bound);
7. parameter advice (admissible l with cost and leakage per mode);
8. an actively malicious coordinator (responder-set equivocation, reordered roster,
   replayed hello) against real parties: anything beyond D recovered?
9. integrity: how many wrong parties the session detects and corrects (r = m - (2l+2t-1)
   checks), shown with a real party that corrupts its upload.

``omnifc audit`` is the command-line front end; it writes report.md, report.json and
PNG figures, and exits non-zero when a check fails.

Examples
--------
>>> from omnifc.audit import AuditParameters, run_audit
>>> report = run_audit(AuditParameters(), checks=[1, 7])
>>> report.passed, [c.verdict for c in report.checks]
(True, ['pass', 'pass'])
>>> run_audit(AuditParameters(betas=(1, 4, 5, 6)), checks=[1]).passed   # beta_1 = alpha_1
False
"""

from __future__ import annotations

import contextlib
import logging
import time

from ._active import check_active_coordinator
from ._advice import advice_rows, check_parameter_advice
from ._integrity import check_integrity
from ._known_sample import attack_errors, check_known_sample_attack, known_sample_attack
from ._leakage import (check_coordinator_view, coordinator_matrices, interpolate_segments,
                       recover_coordinates, run_recorded_session)
from ._model import FAIL, INFO, PASS, WARN, Check
from ._numerics import check_numerics
from ._params import DEMO_DEFAULTS, AuditParameters, audit_plan, encoding_matrix
from ._privacy import (check_algebraic_privacy, check_empirical_privacy, noise_block_ranks,
                       point_problems, reconstruct_rows)
from ._report import AuditReport
from ._simulations import simulated_sessions
from ._transport import aead_self_test, check_transport, read_session_config

__all__ = [
    "run_audit", "AuditReport", "AuditParameters", "Check", "CHECKS", "DEMO_DEFAULTS",
    "PASS", "FAIL", "WARN", "INFO",
    "check_algebraic_privacy", "check_empirical_privacy", "check_coordinator_view",
    "check_known_sample_attack", "check_transport", "check_numerics", "check_parameter_advice",
    "check_active_coordinator", "check_integrity",
    "encoding_matrix", "audit_plan", "point_problems", "noise_block_ranks", "reconstruct_rows",
    "run_recorded_session", "coordinator_matrices", "interpolate_segments",
    "recover_coordinates", "known_sample_attack", "attack_errors", "aead_self_test",
    "read_session_config", "advice_rows",
]

logger = logging.getLogger(__name__)

#: Check number -> (key, function).
CHECKS = {
    1: ("algebraic_privacy", check_algebraic_privacy),
    2: ("empirical_privacy", check_empirical_privacy),
    3: ("coordinator_view", check_coordinator_view),
    4: ("known_sample_attack", check_known_sample_attack),
    5: ("transport", check_transport),
    6: ("numerics", check_numerics),
    7: ("parameter_advice", check_parameter_advice),
    8: ("active_coordinator", check_active_coordinator),
    9: ("integrity", check_integrity),
}


def run_audit(parameters: AuditParameters | None = None, *, checks=None, out=None,
              seed: int = 0, noise_source=None, progress=None) -> AuditReport:
    """Run the audit checks on a session's parameters.

    Parameters
    ----------
    parameters : AuditParameters, optional
        The session under audit; the demo's session by default. Use
        ``AuditParameters.from_config(path)`` for a session config.
    checks : iterable of int or str, optional
        Which checks to run (numbers 1-9 or keys); all by default.
    out : path, optional
        Write report.md, report.json and the figures into this folder.
    seed : int
        Seed of the synthetic data sets the checks use (not of any share noise).
    noise_source : ByteSource, optional
        Replace the encoder's noise source in check 2 (to show a broken one is caught).
    progress : callable, optional
        ``progress(number, title)`` called before each check (the CLI prints it).

    Returns
    -------
    AuditReport
    """
    params = AuditParameters() if parameters is None else parameters
    wanted = _select(checks)
    start = time.perf_counter()
    results = []
    with _single_threaded_blas(), simulated_sessions():
        _run_checks(params, wanted, results, seed, noise_source, progress)
    report = AuditReport(parameters=params, checks=results,
                         seconds=time.perf_counter() - start)
    if out is not None:
        report.write(out)
    return report


def _single_threaded_blas():
    """The audit's samples are small: one BLAS thread avoids oversubscribing busy machines."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover - scikit-learn depends on threadpoolctl
        return contextlib.nullcontext()
    return threadpool_limits(limits=1, user_api="blas")


def _run_checks(params, wanted, results, seed, noise_source, progress) -> None:
    for number in wanted:
        key, function = CHECKS[number]
        if progress is not None:
            progress(number, key)
        logger.info("audit check %d (%s)", number, key)
        if number in (2, 3):
            results.append(function(params, seed=seed, noise_source=noise_source))
        elif number in (4, 6, 8, 9):
            results.append(function(params, seed=seed))
        else:
            results.append(function(params))


def _select(checks) -> list:
    if checks is None:
        return sorted(CHECKS)
    keys = {key: number for number, (key, _) in CHECKS.items()}
    out = []
    for c in checks:
        if isinstance(c, str) and c.strip().isdigit():
            c = int(c)
        if isinstance(c, str):
            if c not in keys:
                from finite_field import ParameterError
                raise ParameterError(f"unknown check {c!r}; choose from {sorted(keys)} or 1-9")
            c = keys[c]
        if c not in CHECKS:
            from finite_field import ParameterError
            raise ParameterError(f"check numbers are 1-9, got {c}")
        out.append(int(c))
    return sorted(set(out))
