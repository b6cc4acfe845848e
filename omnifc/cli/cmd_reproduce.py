"""``omnifc reproduce``: each paper's headline claim, our plaintext and our secure result."""

from __future__ import annotations

# Not the tracked docs/reproduction/: a user's run must never overwrite the published
# reports (regenerate those on purpose with --out docs/reproduction).
DEFAULT_OUT = "omnifc-reproduce"


def register(subparsers) -> None:
    from ..experiments.reproduce import PAPERS

    parser = subparsers.add_parser(
        "reproduce", help="reproduce a paper's claim: plaintext and secure, table and plot "
                          "(needs the plots extra: pip install \"omnifc[plots]\")",
        description="Run one paper's experiment offline and write <OUT>/<paper>.md (the "
                    "headline claim, our plaintext result, our secure result, whether the "
                    "two are bit-identical) and <OUT>/<paper>.png. --paper omnifc runs the "
                    "OmniFC evaluation (iris, iris_l2, wine, breast-cancer, digits at "
                    "non-IID levels p, every method federated vs centralized, plus k-FED, "
                    "FFCM, FedSC-style and MUFC baselines). Needs matplotlib: "
                    "pip install \"omnifc[plots]\".")
    parser.add_argument("--paper", choices=(*PAPERS, "all"), default="omnifc",
                        help="which paper to reproduce, or all (default: omnifc)")
    parser.add_argument("--out", default=DEFAULT_OUT,
                        help=f"output folder, created if needed; the command prints the files "
                             f"it wrote (default: ./{DEFAULT_OUT}; the published reports are "
                             f"regenerated with --out docs/reproduction)")
    parser.add_argument("--quick", action="store_true",
                        help="fewer seeds, settings and rounds (seconds to a minute per "
                             "paper); the files say '(quick run)' (default: off)")
    parser.set_defaults(handler=run)


def run(args) -> int:
    import logging
    from pathlib import Path

    from ..experiments import reproduce
    from ..experiments.reproduce import PAPERS, reproduce_paper
    from ..experiments.reproduce._report import require_plots

    require_plots()                      # the plotting extra, before any work or output
    logging.getLogger(reproduce.__name__).setLevel(logging.INFO)
    papers = PAPERS if args.paper == "all" else (args.paper,)
    out = Path(args.out).resolve()
    print(f"writing to {out}", flush=True)
    for paper in papers:
        outcome = reproduce_paper(paper, out, quick=args.quick)
        print(f"{paper}: wrote {outcome['markdown']} and {outcome['plot']} in "
              f"{outcome['seconds']:.0f} s", flush=True)
        if paper == "omnifc":
            fed = [r for r in outcome["records"] if r["pipeline"] == "federated"]
            same = sum(r["same_as_centralized"] for r in fed)
            print(f"omnifc: federated and centralized partitions identical in {same} of "
                  f"{len(fed)} cases")
        else:
            differs = [row[0] for row in outcome["rows"] if "differs" in row[4]]
            if differs:
                print(f"{paper}: secure and plaintext differ in: {'; '.join(differs)}")
    return 0
