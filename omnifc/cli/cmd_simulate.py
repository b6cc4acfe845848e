"""``omnifc simulate``: the whole protocol in one process on a built-in data set."""

from __future__ import annotations

import argparse

import numpy as np

from protocols import add_parameter_options

from ..experiments import DATASETS, load_dataset, split_non_iid  # light: no sklearn model


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "simulate", help="run secure distance reconstruction in one process",
        description="Split a built-in data set across parties, reconstruct the pairwise "
                    "squared distances on Lagrange shares, and check them against plaintext.")
    add_session_arguments(parser)
    parser.add_argument("--adapter", choices=("raw", "clove", "client2vec", "flux", "fmcl"),
                        default=None,
                        help="instead, run one adapter's synthetic example (client embeddings "
                             "of a clustered-FL paper through secure reconstruction) and print "
                             "the paper's claim next to the plaintext and secure results")
    parser.add_argument("--seed", type=int, default=0, help="seed of the --adapter example")
    parser.set_defaults(handler=run)


def run_adapter(args) -> int:
    """``--adapter NAME``: run that adapter's example; exit 1 if secure != plaintext."""
    from ..adapters import run_example

    lines, ok = run_example(args.adapter, seed=args.seed)
    print(f"adapter          {args.adapter} (seed {args.seed})")
    print("\n".join(lines))
    return 0 if ok else 1


#: The session parameters of ``simulate`` and ``demo`` (from the parameter table).
DATASET_PARAMETERS = ("scale_bits", "segments", "noise_segments", "mask_degree")


def add_session_arguments(parser: argparse.ArgumentParser, *, parties: int = 3) -> None:
    """Options shared by the commands that run a session on a built-in data set."""
    parser.add_argument("--dataset", choices=DATASETS, default="iris",
                        help="built-in data set")
    parser.add_argument("--parties", type=int, default=parties, help="number of parties m")
    # the session parameters these commands take (d, R and the sign come from the data)
    add_parameter_options(parser, DATASET_PARAMETERS)
    parser.add_argument("--non-iid", type=float, default=0.5, metavar="P",
                        help="non-IID level p in [0, 1] of the split")


def run(args) -> int:
    from .._secure import secure_distance_matrix  # here: the protocol loads numba

    if getattr(args, "adapter", None):
        return run_adapter(args)
    data = load_dataset(args.dataset)
    parts = split_non_iid(data.labels, args.parties, args.non_iid)
    parties = {f"party-{i}": data.features[idx] for i, idx in enumerate(parts)}
    result = secure_distance_matrix(parties, bound=data.bound, nonnegative=data.nonnegative,
                                    scale_bits=args.scale_bits, segments=args.segments,
                                    noise_segments=args.noise_segments,
                                    mask_degree=args.mask_degree)
    features = np.concatenate([data.features[idx] for idx in parts])
    is_exact = exact(result, features)
    print(report(result, features, args.dataset, is_exact))
    return 0 if is_exact else 1


def plaintext_integer_distances(result, features: np.ndarray) -> np.ndarray:
    """The reference: squared distances of the quantized rows, computed in the clear."""
    from .._plaintext import plaintext_sq_distances

    params = result.parameters
    return plaintext_sq_distances(features, bound=params["bound"],
                                  scale_bits=params["scale_bits"],
                                  nonnegative=params["nonnegative"])


def exact(result, features: np.ndarray) -> bool:
    return bool(np.array_equal(result.integer_distances,
                               plaintext_integer_distances(result, features)))


def report(result, features: np.ndarray, dataset: str, is_exact: bool) -> str:
    from scipy.spatial.distance import pdist, squareform

    from finite_field import Quantizer

    params = result.parameters
    n = result.integer_distances.shape[0]
    float_distances = squareform(pdist(features, "sqeuclidean"))
    error = float(np.abs(result.distances - float_distances).max())
    quantizer = Quantizer(params["scale_bits"], params["bound"], params["nonnegative"])
    lines = [
        f"data set      {dataset}: {n} rows x {params['dim']} features across "
        f"{params['parties']} parties ({', '.join(str((result.owners == i).sum()) for i in range(len(result.party_names)))} rows)",
        f"parameters    l={params['segments']} t={params['noise_segments']} "
        f"q={params['scale_bits']} R={params['bound']} primes={params['primes']} "
        f"(headroom {params['headroom_bits']:.1f} bits)",
        f"exact         {'yes' if is_exact else 'NO'}: integer distances equal "
        "the plaintext quantized squared distances bit for bit",
        f"max error     {error:.3e} against float distances (bound "
        f"{quantizer.error_bound(params['dim']):.3e})",
        "timings       " + ", ".join(f"{phase} {s.seconds:.3f}s/{s.bytes_sent / 1e6:.2f}MB"
                                     for phase, s in result.stats.items()),
    ]
    return "\n".join(lines)
