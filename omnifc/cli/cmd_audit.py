"""``omnifc audit``: check the privacy guarantee on a session's actual parameters.

Runs the eight checks of :mod:`omnifc.audit` and writes report.md, report.json and PNG
figures with ``--out``. Exits 1 when any check fails, 0 otherwise.
"""

from __future__ import annotations

import sys

from protocols import add_parameter_options, values_from_options

# --help needs only the parameter table: the checks (scipy, galois) load in run().
from ..audit._params import AUDIT_FIELDS, DEMO_DEFAULTS, AuditParameters

#: The options generated from the parameter table (``--nonnegative`` / ``--signed`` are
#: written out below: the audit defaults to signed features without --config).
OPTIONS = [f.name for f in AUDIT_FIELDS if f.name != "nonnegative"]


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
    # every audited parameter of the table (none defaults here: the flags given override
    # the config, and AuditParameters holds the demo's defaults); the sign: below
    add_parameter_options(session, OPTIONS, no_defaults=True,
                          defaults={f.name: getattr(AuditParameters, f.name)
                                    for f in AUDIT_FIELDS},
                          help={"dim": "d", "alphas": "interpolation points (l+t; default "
                                "1..l+t)", "betas": "party points (m; default l+t+1..l+t+m)"})
    session.add_argument("--parties", type=int, help=f"m (default {DEMO_DEFAULTS['parties']})")
    sign = session.add_mutually_exclusive_group()
    sign.add_argument("--nonnegative", dest="nonnegative", action="store_true", default=None,
                      help="features lie in [0, R] (the demo's iris data: add it to audit "
                           "exactly the demo's session)")
    sign.add_argument("--signed", dest="nonnegative", action="store_false",
                      help="features lie in [-R, R] (default without --config, as in "
                           "`omnifc certs` and the Python API)")
    session.add_argument("--rows", type=int,
                         help=f"n, total rows, for the advice (default {DEMO_DEFAULTS['rows']})")
    parser.add_argument("--checks", metavar="1,2,...",
                        help="run only these checks (numbers 1-9 or names); all by default")
    parser.add_argument("--seed", type=int, default=0,
                        help="seed of the synthetic data sets (share noise always comes from "
                             "the OS CSPRNG)")
    parser.set_defaults(handler=run)


def parameters_from_args(args) -> AuditParameters:
    values = {**values_from_options(args, [f.name for f in AUDIT_FIELDS]),
              "parties": args.parties, "rows": args.rows}
    if args.config:
        from .cmd_session import load_config
        load_config(args.config)  # validated completely at load, clustering request included
        return AuditParameters.from_config(args.config, **values)
    given = {k: v for k, v in values.items() if v is not None}
    source = "defaults (the demo's session, signed)" if not given else "command-line flags"
    given.setdefault("nonnegative", False)  # signed: the default of `omnifc certs` and the API
    return AuditParameters(**given, source=source, rows_assumed=args.rows is None)


def run(args) -> int:
    from ..audit import CHECKS, run_audit

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
