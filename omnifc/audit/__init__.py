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

from finite_field import lazy_exports

# Loaded on first use (PEP 562): ``omnifc audit --help`` needs the parameters, not the
# checks (scipy.stats, galois, a recorded session).
__getattr__, __dir__ = lazy_exports(__name__, {
    "._run": ["CHECKS", "run_audit"],
    "._active": ["check_active_coordinator"],
    "._advice": ["advice_rows", "check_parameter_advice"],
    "._integrity": ["check_integrity"],
    "._known_sample": ["attack_errors", "check_known_sample_attack", "known_sample_attack"],
    "._leakage": ["check_coordinator_view", "coordinator_matrices", "interpolate_segments",
                  "recover_coordinates", "run_recorded_session"],
    "._model": ["FAIL", "INFO", "PASS", "WARN", "Check"],
    "._numerics": ["check_numerics"],
    "._params": ["DEMO_DEFAULTS", "AuditParameters", "audit_plan", "encoding_matrix"],
    "._privacy_algebraic": ["check_algebraic_privacy", "noise_block_ranks", "point_problems"],
    "._privacy_empirical": ["check_empirical_privacy", "reconstruct_rows"],
    "._report": ["AuditReport"],
    "._simulations": ["simulated_sessions"],
    "._transport": ["aead_self_test", "check_transport", "read_session_config"],
})

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
