"""``omnifc audit``: check the privacy guarantee on a session's actual parameters.

Runs the eight checks of :mod:`omnifc.audit` and writes report.md, report.json and PNG
figures with ``--out``. Exits 1 when any check fails, 0 otherwise.
"""

from __future__ import annotations

import sys

from finite_field import ParameterError

from ..audit import CHECKS, DEMO_DEFAULTS, AuditParameters, run_audit


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "audit", help="audit the privacy guarantee of a session's parameters",
        description="Check every row of the threat model on actual parameters: algebraic "
                    "and empirical t-privacy (and its tightness), what the coordinator "
                    "learns in each mode, what the distance matrix itself reveals, "
                    "transport security, numerics and parameter advice. Parameters come "
                    "from the flags (defaults: the demo's session) or from a session config. "
                    "Exits 1 when any check fails.")
    parser.add_argument("--config", metavar="TOML",
                        help="the session config serve/join use; flags given explicitly "
                             "override its values")
    parser.add_argument("--out", metavar="DIR",
                        help="write report.md, report.json and PNG figures here")
    session = parser.add_argument_group(
        "session parameters (defaults: the demo's session, signed)")
    session.add_argument("--dim", type=int, help=f"d (default {DEMO_DEFAULTS['dim']})")
    session.add_argument("--bound", type=float,
                         help=f"R, the public clip bound (default {DEMO_DEFAULTS['bound']:g})")
    session.add_argument("--scale-bits", type=int,
                         help=f"q (default {DEMO_DEFAULTS['scale_bits']})")
    session.add_argument("--segments", type=int, help="l (default 1)")
    session.add_argument("--noise-segments", type=int, help="t (default 1)")
    session.add_argument("--parties", type=int, help=f"m (default {DEMO_DEFAULTS['parties']})")
    session.add_argument("--mode", choices=("masked", "transparent"),
                         help="masked (default) or transparent")
    session.add_argument("--integrity", choices=("detect", "correct", "off"),
                         help="integrity policy (default detect)")
    session.add_argument("--adversaries", type=int, metavar="A",
                         help="the most parties that may deviate together (default: the "
                              "largest the parties allow; check 9 attacks at exactly A)")
    sign = session.add_mutually_exclusive_group()
    sign.add_argument("--nonnegative", dest="nonnegative", action="store_true", default=None,
                      help="features lie in [0, R] (the demo's iris data: add it to audit "
                           "exactly the demo's session)")
    sign.add_argument("--signed", dest="nonnegative", action="store_false",
                      help="features lie in [-R, R] (default without --config, as in "
                           "`omnifc certs` and the Python API)")
    session.add_argument("--primes", metavar="P1,P2", help="explicit moduli")
    session.add_argument("--alphas", metavar="A1,A2", help="interpolation points (l+t)")
    session.add_argument("--betas", metavar="B1,B2", help="party points (m)")
    session.add_argument("--rows", type=int,
                         help=f"n, total rows, for the advice (default {DEMO_DEFAULTS['rows']})")
    parser.add_argument("--checks", metavar="1,2,...",
                        help="run only these checks (numbers 1-9 or names); all by default")
    parser.add_argument("--seed", type=int, default=0,
                        help="seed of the synthetic data sets (share noise always comes from "
                             "the OS CSPRNG)")
    parser.set_defaults(handler=run)


def _ints(text, flag):
    if text is None:
        return None
    try:
        return tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise ParameterError(f"{flag} must be comma-separated integers, got {text!r}") from None


def parameters_from_args(args) -> AuditParameters:
    values = {"dim": args.dim, "bound": args.bound, "scale_bits": args.scale_bits,
              "segments": args.segments, "noise_segments": args.noise_segments,
              "parties": args.parties, "mode": args.mode, "nonnegative": args.nonnegative,
              "integrity": args.integrity, "adversaries": args.adversaries,
              "rows": args.rows, "primes": _ints(args.primes, "--primes"),
              "alphas": _ints(args.alphas, "--alphas"), "betas": _ints(args.betas, "--betas")}
    if args.config:
        from .cmd_session import load_config
        load_config(args.config)  # validated completely at load, clustering request included
        return AuditParameters.from_config(args.config, **values)
    given = {k: v for k, v in values.items() if v is not None}
    source = "defaults (the demo's session, signed)" if not given else "command-line flags"
    given.setdefault("nonnegative", False)  # signed: the default of `omnifc certs` and the API
    return AuditParameters(**given, source=source)


def run(args) -> int:
    params = parameters_from_args(args)
    checks = None if args.checks is None else [c.strip() for c in args.checks.split(",")]

    def progress(number, key):
        print(f"[{number}/{len(CHECKS)}] {key} ...", file=sys.stderr, flush=True)

    report = run_audit(params, checks=checks, out=args.out, seed=args.seed, progress=progress)
    print(report.summary_markdown())
    print()
    print(f"overall: {report.overall()} ({report.seconds:.1f} s)")
    for c in report.failed_checks:
        for reason in c.reasons:
            print(f"  check {c.number}: {reason}")
    if args.out:
        print(f"report: {args.out}/report.md, {args.out}/report.json"
              + "".join(f", {args.out}/{f}" for c in report.checks for f in c.figures))
    return 0 if report.passed else 1
