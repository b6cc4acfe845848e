"""The audit runner: the numbered checks and :func:`run_audit` (re-exported by the package)."""

from __future__ import annotations

import contextlib
import logging
import time

from ._active import check_active_coordinator
from ._advice import check_parameter_advice
from ._integrity import check_integrity
from ._known_sample import check_known_sample_attack
from ._leakage import check_coordinator_view
from ._numerics import check_numerics
from ._params import AuditParameters
from ._privacy_algebraic import check_algebraic_privacy
from ._privacy_empirical import check_empirical_privacy
from ._report import AuditReport
from ._simulations import simulated_sessions
from ._transport import check_transport

__all__ = ["CHECKS", "run_audit"]

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
