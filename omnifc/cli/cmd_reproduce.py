"""``omnifc reproduce``: the OmniFC paper's evaluation on the offline data sets."""

from __future__ import annotations


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "reproduce", help="federated vs centralized vs k-FED clustering, kappa against p",
        description="Split iris, wine, breast-cancer and digits across parties at non-IID "
                    "levels p in {0, .25, .5, .75, 1}, cluster with all methods on the "
                    "securely reconstructed distances, on plaintext, and with k-FED, and "
                    "write a Markdown table and a kappa plot.")
    parser.add_argument("--out", default="docs",
                        help="output folder for reproduction.md and reproduction_kappa.png "
                             "(default: docs)")
    parser.add_argument("--quick", action="store_true",
                        help="iris, wine and breast-cancer at p in {0, .5, 1} only (under a "
                             "minute); writes reproduction_quick.md and "
                             "reproduction_quick_kappa.png")
    parser.set_defaults(handler=run)


def run(args) -> int:
    from tqdm import tqdm

    from .._reproduce import LEVELS, REPRO_DATASETS, run_reproduction

    total = 3 * 3 if args.quick else len(REPRO_DATASETS) * len(LEVELS)
    with tqdm(total=total, unit="run", desc="reproduce") as bar:
        def progress(message: str) -> None:
            bar.set_postfix_str(message)
            bar.update(1)

        outcome = run_reproduction(args.out, quick=args.quick, progress=progress)
    fed = [r for r in outcome["records"] if r["pipeline"] == "federated"]
    same = sum(r["same_as_centralized"] for r in fed)
    print(f"wrote {outcome['markdown']} and {outcome['plot']} in {outcome['seconds']:.0f} s")
    print(f"federated and centralized partitions identical in {same} of {len(fed)} cases")
    return 0
