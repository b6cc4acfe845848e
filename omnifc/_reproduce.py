"""Reproduction of the OmniFC paper's evaluation on the data sets available offline.

For every data set (iris, wine, breast-cancer, digits from scikit-learn), every non-IID
level p in {0, 0.25, 0.5, 0.75, 1} and every clustering method, three pipelines are scored
against the true classes with the paper's Kappa (Hungarian-matched Cohen's kappa), NMI
and ARI:

- **federated** (OmniFC): the parties' rows go through :func:`secure_distance_matrix`
  (Lagrange shares, l = t = 1, q = 16 fractional bits, public bound R of the data set);
  the method runs on the reconstructed D;
- **centralized**: the same method on the squared distances of the pooled *plaintext*
  (unquantized) rows;
- **k-FED** (proxy aggregation): local k-means centres only, k' = floor(sqrt(k)) and k' = k.

:func:`run_reproduction` writes ``reproduction.md`` (tables, parameters, every choice the
paper does not fix) and ``reproduction_kappa.png`` (kappa against p).
"""

from __future__ import annotations

import logging
import math
import platform
import time
from pathlib import Path

import numpy as np

from finite_field import ParameterError

from ._clustering import METHODS, cluster
from ._datasets import load_dataset
from ._kfed import KFed
from ._metrics import clustering_scores
from ._mufc import federated_mufc
from ._secure import secure_distance_matrix
from ._splits import split_non_iid

__all__ = ["run_reproduction", "LEVELS", "REPRO_DATASETS", "METHOD_OPTIONS"]

logger = logging.getLogger("omnifc.reproduce")

LEVELS = (0.0, 0.25, 0.5, 0.75, 1.0)
REPRO_DATASETS = ("iris", "iris_l2", "wine", "breast_cancer", "digits")
QUICK_DATASETS = ("iris", "iris_l2", "wine")
SEED = 0
SCALE_BITS = 16
SEGMENTS = 1
NOISE_SEGMENTS = 1
#: Options passed to omnifc.cluster for each method (everything else is the default).
METHOD_OPTIONS = {
    "kmeans": {"n_init": 5},
    "kmeans-rows": {"n_init": 5},
    "spectral": {},
    "fcm": {},
    "nmf": {},
    "dbscan": {},
    "hierarchical": {"linkage": "ward"},
    "kmedoids": {},
}
METHOD_LABELS = {
    "kmeans": "KM (exact, MDS)", "kmeans-rows": "KM (rows of D, paper)", "spectral": "SC",
    "fcm": "FCM", "nmf": "NMF", "dbscan": "DBSCAN", "hierarchical": "HC (Ward)",
    "kmedoids": "K-medoids",
}
KFED_LABELS = {"kfed-sqrt": "k-FED (k'=floor(sqrt k))", "kfed-k": "k-FED (k'=k)"}
#: Federated baselines that run offline (one score each; they never see the distances).
BASELINE_LABELS = {"kfed-sqrt": "k-FED (k'=floor(sqrt k))", "kfed-k": "k-FED (k'=k)",
                   "ffcm": "FFCM (federated FCM)", "fedsc": "FedSC-style (RFF)",
                   "mufc": "MUFC (clustering part)"}
#: Data sets of the reproduction: scikit-learn's, plus iris with rows L2-normalized.
ROW_NORMALIZED = "iris_l2"


def _load(name):
    """A reproduction data set; ``iris_l2``: iris with every row divided by its L2 norm.

    Row normalization is local to each row (no pooled statistic), and the public bound
    becomes 1. It closes the iris gap to the paper (see the notes in the report).
    """
    if name != ROW_NORMALIZED:
        return load_dataset(name)
    from ._datasets import Dataset
    base = load_dataset("iris")
    x = base.features / np.linalg.norm(base.features, axis=1, keepdims=True)
    return Dataset(ROW_NORMALIZED, x, base.labels, bound=1.0, nonnegative=True)


def federated_fcm(parts, n_clusters: int, *, fuzzifier: float = 2.0, rounds: int = 100,
                  tol: float = 1e-6, seed: int = 0) -> np.ndarray:
    """FFCM baseline (Stallmann & Wilbik 2022, the federated-averaging variant).

    The server broadcasts c centres; every party computes its memberships and returns, per
    centre, ``sum_i u_ik^m x_i`` and ``sum_i u_ik^m``; the server divides the totals. Seeds:
    c distinct rows of the parties drawn with ``seed``. Returns the labels of the stacked
    rows (largest membership). The server learns per-party, per-cluster weighted sums.
    """
    from ._clustering._fcm import fcm_memberships

    x = np.concatenate(parts)
    rng = np.random.default_rng(seed)
    centers = x[rng.choice(x.shape[0], size=n_clusters, replace=False)].copy()
    for _ in range(int(rounds)):
        num = np.zeros_like(centers)
        den = np.zeros(n_clusters)
        for part in parts:
            u = fcm_memberships(part, centers, fuzzifier) ** fuzzifier
            num += u.T @ part
            den += u.sum(axis=0)
        new = num / np.maximum(den, 1e-300)[:, None]
        moved = float(np.abs(new - centers).max())
        centers = new
        if moved < tol:
            break
    return np.argmax(fcm_memberships(x, centers, fuzzifier), axis=1)


def fedsc_style(parts, n_clusters: int, *, features: int = 500, scale: float = 1.0,
                seed: int = 0) -> np.ndarray:
    """A FedSC-style baseline (omnifc's simplification of Qiao et al., NeurIPS 2023).

    Every party maps its rows to shared random Fourier features of the Gaussian kernel
    ``exp(-||x - y||^2 / (2 sigma^2))`` (``features`` of them, public seed) and uploads them;
    the server forms the approximate kernel ``Z Z^T`` and runs normalized spectral
    clustering. ``sigma = scale x`` the mean of the parties' local mean pairwise distances
    (each party reports one number; FedSC's bandwidth rule uses the pooled mean). No
    privacy noise is added, so this is the baseline's best case.
    """
    from scipy.spatial.distance import pdist
    from sklearn.cluster import SpectralClustering

    local = [pdist(p).mean() for p in parts if p.shape[0] > 1]
    sigma = scale * float(np.mean(local))
    rng = np.random.default_rng(seed)
    d = parts[0].shape[1]
    w = rng.standard_normal((d, int(features))) / sigma
    b = rng.uniform(0, 2 * np.pi, int(features))
    z = np.concatenate([np.sqrt(2.0 / features) * np.cos(p @ w + b) for p in parts])
    affinity = np.clip(z @ z.T, 0.0, None)
    model = SpectralClustering(n_clusters=n_clusters, affinity="precomputed",
                               random_state=seed, n_init=10)
    return model.fit_predict(affinity)


def _parties_for(dataset) -> int:
    """Paper: one party per class; at least 2l + 2t - 1 = 3 for l = t = 1 (and 4 for 2 classes)."""
    k = dataset.n_classes
    needed = 2 * SEGMENTS + 2 * NOISE_SEGMENTS - 1
    if k >= needed:
        return k
    return k * math.ceil(needed / k)


def _evaluate(dataset, level: float, methods) -> list[dict]:
    from scipy.spatial.distance import cdist

    k = dataset.n_classes
    m = _parties_for(dataset)
    parts = split_non_iid(dataset.labels, m, level)
    rows = np.concatenate(parts)
    truth = dataset.labels[rows]
    plain = dataset.features[rows]
    start = time.perf_counter()
    result = secure_distance_matrix([dataset.features[i] for i in parts], bound=dataset.bound,
                                    nonnegative=dataset.nonnegative, scale_bits=SCALE_BITS,
                                    segments=SEGMENTS, noise_segments=NOISE_SEGMENTS)
    secure_seconds = time.perf_counter() - start
    central = cdist(plain, plain, "sqeuclidean")
    records = []
    base = {"dataset": dataset.name, "p": level, "parties": m, "n": int(rows.size),
            "secure_seconds": secure_seconds}
    for method in methods:
        k_arg = None if method == "dbscan" else k
        timings, labels = {}, {}
        for pipeline, distances in (("federated", result.distances), ("centralized", central)):
            start = time.perf_counter()
            labels[pipeline] = cluster(distances, method, k_arg, random_state=SEED,
                                       **METHOD_OPTIONS[method])
            timings[pipeline] = time.perf_counter() - start
        same = bool(clustering_scores(labels["federated"], labels["centralized"])["ari"] == 1.0)
        for pipeline in ("federated", "centralized"):
            records.append(base | {"method": method, "pipeline": pipeline,
                                   "seconds": timings[pipeline],
                                   "clusters": len(set(labels[pipeline].tolist()) - {-1}),
                                   "same_as_centralized": same}
                           | clustering_scores(truth, labels[pipeline]))
    for name, local in (("kfed-sqrt", None), ("kfed-k", k)):
        start = time.perf_counter()
        model = KFed(n_clusters=k, local_clusters=local, random_state=SEED)
        predicted = model.fit([dataset.features[i] for i in parts]).labels_global_
        records.append(base | {"method": name, "pipeline": "k-FED",
                               "seconds": time.perf_counter() - start,
                               "clusters": len(set(predicted.tolist())),
                               "same_as_centralized": None}
                       | clustering_scores(truth, predicted))
    local_parts = [dataset.features[i] for i in parts]
    for name, run in (("ffcm", lambda: federated_fcm(local_parts, k, seed=SEED)),
                      ("fedsc", lambda: fedsc_style(local_parts, k, seed=SEED)),
                      ("mufc", lambda: federated_mufc(local_parts, k, seed=SEED))):
        start = time.perf_counter()
        predicted = run()
        records.append(base | {"method": name, "pipeline": "baseline",
                               "seconds": time.perf_counter() - start,
                               "clusters": len(set(predicted.tolist())),
                               "same_as_centralized": None}
                       | clustering_scores(truth, predicted))
    return records


def _cell(records, dataset, method, level, metric) -> str:
    by = {r["pipeline"]: r for r in records
          if r["dataset"] == dataset and r["method"] == method and r["p"] == level}
    if "k-FED" in by:
        return f"{by['k-FED'][metric]:.3f}"
    if "baseline" in by:
        return f"{by['baseline'][metric]:.3f}"
    fed, cen = by["federated"], by["centralized"]
    mark = "" if fed["same_as_centralized"] else "*"
    return f"{fed[metric]:.3f} / {cen[metric]:.3f}{mark}"


def _table(records, datasets, levels, methods, metric) -> list[str]:
    header = "| data set | method | " + " | ".join(f"p = {p:g}" for p in levels) + " |"
    lines = [header, "|" + "---|" * (2 + len(levels))]
    for dataset in datasets:
        for method in list(methods) + list(BASELINE_LABELS):
            label = METHOD_LABELS.get(method) or BASELINE_LABELS[method]
            cells = [_cell(records, dataset, method, p, metric) for p in levels]
            lines.append(f"| {dataset} | {label} | " + " | ".join(cells) + " |")
    return lines


def _plot(records, datasets, levels, methods, path: Path) -> None:
    try:
        import matplotlib
    except ImportError as error:  # pragma: no cover - depends on the environment
        raise ParameterError("the reproduction plot needs matplotlib: pip install "
                             "'omnifc[plots]'") from error
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D

    # An Agg figure without pyplot: no global backend or figure state is touched.
    fig = Figure(figsize=(4.2 * len(datasets), 4.6))
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, len(datasets), sharey=True, squeeze=False)
    colors = matplotlib.colormaps["tab10"]
    baseline_styles = {"kfed-sqrt": ("--s", "black"), "kfed-k": ("--^", "black"),
                       "ffcm": ("-.v", "darkred"), "fedsc": ("-.P", "darkgreen"),
                       "mufc": ("-.D", "darkorange")}
    for ax, dataset in zip(axes[0], datasets):
        for i, method in enumerate(methods):
            for pipeline in ("federated", "centralized"):
                ys = [next(r["kappa"] for r in records if r["dataset"] == dataset and
                           r["method"] == method and r["p"] == p and r["pipeline"] == pipeline)
                      for p in levels]
                if pipeline == "federated":   # wide and light, drawn first
                    ax.plot(levels, ys, "-", color=colors(i), linewidth=6, alpha=0.3,
                            label=METHOD_LABELS[method])
                else:                          # thin and dark, drawn on top: never hidden
                    ax.plot(levels, ys, ":x", color=colors(i), linewidth=1.3, markersize=5)
        for method, (style, color) in baseline_styles.items():
            ys = [next((r["kappa"] for r in records if r["dataset"] == dataset and
                        r["method"] == method and r["p"] == p), np.nan) for p in levels]
            ax.plot(levels, ys, style, color=color, markersize=6, linewidth=1.4, zorder=5,
                    label=BASELINE_LABELS[method])
        ax.set_title(dataset)
        ax.set_xlabel("non-IID level p")
        ax.set_xticks(levels)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("Kappa (Hungarian-matched Cohen's kappa)")
    handles, names = axes[0][0].get_legend_handles_labels()
    handles += [Line2D([], [], color="gray", linewidth=6, alpha=0.3),
                Line2D([], [], color="gray", linestyle=":", marker="x", linewidth=1.3)]
    names += ["federated (OmniFC, secure D): wide light line",
              "centralized (plaintext): thin dotted line on top"]
    fig.legend(handles, names, loc="lower center", ncol=5, fontsize=8, frameon=False)
    fig.suptitle("OmniFC federated vs centralized (same colour per method; identical where "
                 "the dotted line runs inside the wide one) vs federated baselines (dark, "
                 "dashed)")
    fig.tight_layout(rect=(0, 0.16, 1, 0.95))
    fig.savefig(path, dpi=110)


def _observations(records, datasets, levels) -> list[str]:
    """Short, data-driven remarks on the tables."""
    def pick(dataset, method, level):
        return next(r for r in records if r["dataset"] == dataset and r["method"] == method
                    and r["p"] == level and r["pipeline"] in ("federated", "k-FED"))

    fed = [r for r in records if r["pipeline"] == "federated"]
    lines = [f"- Federated (OmniFC) and centralized partitions are identical in "
             f"{sum(r['same_as_centralized'] for r in fed)} of {len(fed)} (data set, p, "
             "method) cases: the reconstruction is exact up to the 2^-16 quantization, and "
             "every method works on the distances alone. Scores change with p only through "
             "which rows the split uses (N mod m rows are left out when p < 1)."]
    low, high = levels[0], levels[-1]
    kfed = ", ".join(f"{d} {pick(d, 'kfed-sqrt', low)['kappa']:.2f} -> "
                     f"{pick(d, 'kfed-sqrt', high)['kappa']:.2f}" for d in datasets)
    lines.append(f"- k-FED with k' = floor(sqrt(k)) depends on the split (kappa at p = {low:g} "
                 f"-> p = {high:g}: {kfed}): a local centre stands for all of a party's "
                 "points, so mixed parties collapse; with k' = k it does better at low p "
                 "and can degrade as p grows. OmniFC does not depend on p.")
    if any(r["method"] == "dbscan" for r in records):
        found = ", ".join(
            f"{d} {sorted({pick(d, 'dbscan', p)['clusters'] for p in levels})}"
            for d in datasets)
        lines.append(f"- DBSCAN with the automatic eps finds these numbers of clusters: "
                     f"{found}. One cluster (kappa near 0) means a single global density "
                     "threshold at the k-distance knee does not separate those classes; the "
                     "paper does not publish its eps.")
    if "iris" in datasets and ROW_NORMALIZED in datasets:
        def fed_kappas(dataset):
            values = [r["kappa"] for r in records if r["dataset"] == dataset
                      and r["pipeline"] == "federated" and r["method"] != "dbscan"]
            return min(values), max(values)
        raw, l2 = fed_kappas("iris"), fed_kappas(ROW_NORMALIZED)
        lines.append(f"- **The iris gap** (paper: kappa 0.94-0.95). On raw features our "
                     f"methods score kappa {raw[0]:.2f}-{raw[1]:.2f} (DBSCAN aside), which is "
                     "what k-means on raw iris gives anywhere (accuracy 0.893). Dividing "
                     "every row by its L2 norm (`iris_l2`, a per-row operation that needs no "
                     f"pooled statistic) gives {l2[0]:.2f}-{l2[1]:.2f}, the paper's range; "
                     "standardizing the columns makes it worse (0.72-0.79 centrally, "
                     "measured), min-max scaling changes little (0.79-0.85). The paper's "
                     "preprocessing is not published, so this is the measured explanation, "
                     "not a confirmed one.")
    if any(r["method"] == "kfed-sqrt" for r in records) and 1.0 in levels:
        lines.append("- **k-FED at p = 1 is trivial** when k <= 3 (iris, wine, breast-cancer): "
                     "each party holds exactly one class, k' = floor(sqrt(k)) = 1 local "
                     "centre per party is that class's mean, and every point inherits its "
                     "party's label, so kappa = 1.00 by construction (the split reveals the "
                     "classes); it says nothing about clustering quality. At p = 0 the same "
                     "method scores near 0. With k = 10 (digits) k' = 3 centres per party "
                     "split each class, so p = 1 is not trivial there.")
    if any(r["method"] == "ffcm" for r in records):
        lines.append("- **FFCM** (federated-averaging fuzzy c-means) iterates exact sums: it "
                     "is centralized FCM on the raw rows (from its own seeds) and does not "
                     "depend on p; "
                     "it reveals per-party, per-cluster weighted sums to the server. "
                     "**FedSC-style** is our simplification (shared random Fourier features, "
                     "no privacy noise: its best case); the paper's FedSC adds noise and "
                     "reconstructs the kernel by low-rank completion.")
    if any(r["method"] == "mufc" for r in records):
        def mufc_kappa(dataset, level):
            return next(r["kappa"] for r in records if r["dataset"] == dataset
                        and r["method"] == "mufc" and r["p"] == level)
        trend = ", ".join(f"{d} {mufc_kappa(d, low):.2f} -> {mufc_kappa(d, high):.2f}"
                          for d in datasets)
        lines.append("- **MUFC** (clustering part only: client K-means++ seeds with k' = k "
                     "and no Lloyd step, seeds quantized to the grid 1/sqrt(N), bin counts "
                     "aggregated, server K-means on one point drawn in each point's bin, as "
                     f"the authors' code runs it) depends on the split (kappa at p = {low:g} "
                     f"-> p = {high:g}: {trend}): every point takes the label of its party's "
                     "nearest seed, and seeds drawn by K-means++ from a party that mixes "
                     "classes have Voronoi cells that straddle classes. Its unlearning "
                     "mechanism and the secure aggregation (SCMA) are not run (the multiset "
                     "is summed in the clear; the server sees the same multiset).")
    if "digits" in datasets and any(r["method"] == "fcm" for r in records):
        lines.append("- FCM with the usual fuzzifier m = 2 does poorly on digits (64 "
                     "dimensions): memberships flatten and centres drift together, a known "
                     "high-dimensional effect; the same happens centrally.")
    return lines


def _markdown(records, datasets, levels, methods, seconds, quick, image_name) -> str:
    identical = [r for r in records if r["pipeline"] == "federated"]
    n_same = sum(r["same_as_centralized"] for r in identical)
    secure = {}
    for r in records:
        secure.setdefault((r["dataset"], r["p"]), r["secure_seconds"])
    lines = [
        "# Reproduction of OmniFC's evaluation" + (" (quick run)" if quick else ""),
        "",
        "Generated by `omnifc reproduce --paper omnifc" + (" --quick" if quick else "")
        + "` (also `python benchmarks/reproduce.py`). Do not edit by hand.",
        "",
        f"Total run time {seconds:.0f} s on {platform.machine()} "
        f"(Python {platform.python_version()}).",
        "",
        "Each cell: **federated / centralized**. Federated = OmniFC: the parties' rows go "
        "through `secure_distance_matrix` and the method runs on the reconstructed squared "
        "distances. Centralized = the same method on the pooled plaintext (unquantized) "
        "rows. A `*` marks a cell where the two partitions differ (ARI between them < 1); "
        f"the partitions are identical in {n_same} of {len(identical)} cases. Baseline rows "
        "(k-FED, FFCM, FedSC-style, MUFC) have one value: they are federated methods of their own "
        "and never see the distances.",
        "",
        f"![Kappa against p]({image_name})",
        "",
        "## Kappa",
        "",
        *_table(records, datasets, levels, methods, "kappa"),
        "",
        "## NMI",
        "",
        *_table(records, datasets, levels, methods, "nmi"),
        "",
        "## ARI",
        "",
        *_table(records, datasets, levels, methods, "ari"),
        "",
        "## Observations",
        "",
        *_observations(records, datasets, levels),
        "",
        "## Set-up",
        "",
        "| data set | N used | classes | parties m | public bound R | secure D seconds per p |",
        "|---|---|---|---|---|---|",
    ]
    for dataset in datasets:
        data = _load(dataset)
        per = [r for r in records if r["dataset"] == dataset and r["method"] == methods[0]
               and r["pipeline"] == "federated"]
        n_used = "/".join(str(r["n"]) for r in per)
        times = ", ".join(f"{secure[(dataset, p)]:.1f}" for p in levels)
        lines.append(f"| {dataset} | {n_used} | {data.n_classes} | {per[0]['parties']} | "
                     f"{data.bound:g}{' (features / documented max)' if data.bound == 1.0 else ''}"
                     f" | {times} |")
    lines += [
        "",
        f"- Secure reconstruction: `secure_distance_matrix(parties, bound=R, "
        f"nonnegative=True, scale_bits={SCALE_BITS}, segments={SEGMENTS}, "
        f"noise_segments={NOISE_SEGMENTS})` (l = t = 1, default masked mode, in-memory "
        "transport). The reconstructed matrix is the exact squared-distance matrix of the "
        "rows quantized to multiples of 2^-16.",
        f"- Random seed {SEED} for every method (`random_state=0`) and for k-FED; split "
        "shuffle seed 20 (the paper's).",
        "- Method options: " + "; ".join(
            f"{METHOD_LABELS[m]}: {METHOD_OPTIONS[m] or 'defaults'}" for m in methods) + ".",
        "",
        "## Choices the paper does not fix",
        "",
        "- **Data sets.** The paper's image/RNA data sets (MNIST, COIL, 10x_73k, ...) are "
        "not available offline; scikit-learn's iris, wine, breast-cancer and digits are "
        "used. Features are used raw (iris, digits) or divided by their documented maxima "
        "(wine, breast-cancer), so R is public and never computed from pooled data.",
        "- **Parties.** One party per class as in the paper, except breast-cancer: 2 classes "
        "give m = 2 < 3 = 2l + 2t - 1 parties, so it uses m = 4 with party i tied to class "
        "i mod 2.",
        "- **Split** (`split_non_iid`): the authors' `construct_workers`; p = 1 gives each "
        "party all of its class; p < 1 gives n = N // m samples per party (the first "
        "round(n p) of its class, the rest from a pool shuffled with seed 20), so N mod m "
        "samples are unused and N differs between p = 1 and p < 1 (column N used). numpy's "
        "PCG64 replaces torch.randperm (same rule, different permutation).",
        "- **Kappa**: Hungarian matching maximising the overlap (scipy), zero-padded when the "
        "numbers of clusters and classes differ, then scikit-learn's cohen_kappa_score. "
        "The authors' code minimises |A|+|B|-2|A and B| instead, which is the same matching "
        "when the numbers agree and can differ for DBSCAN; DBSCAN noise counts as one more "
        "cluster.",
        "- **KM**: two variants. *exact*: classical MDS of D then Lloyd from k-means++ seeds "
        "chosen on D (provably the k-means of the plaintext rows); *rows of D*: the paper's "
        "surrogate (rows of D as feature vectors). Best inertia of 5 seedings each.",
        "- **SC**: Gaussian affinity exp(-D / (2 sigma^2)) with FedSC's bandwidth rule "
        "sigma = mean pairwise Euclidean distance; scikit-learn SpectralClustering "
        "(precomputed affinity, k-means label assignment, 10 restarts).",
        "- **FCM**: Bezdek's fuzzy c-means (m = 2, tol 1e-6 on memberships) on the "
        "classical-MDS embedding (exact, like KM), k-means++ seeds on D; label = largest "
        "membership. The paper runs FCM on rows of D.",
        "- **NMF**: scikit-learn NMF (nndsvda) of the Gaussian affinity with sigma = 0.5 x "
        "the mean pairwise distance; label = largest coefficient. (Scale 0.5 chosen after "
        "trying 1, 0.5, 0.25 on these data sets: at 1 the affinity is too flat.) The paper "
        "runs NMF on rows of D.",
        "- **DBSCAN**: on sqrt(D), min_samples = 5, eps at the knee (kneed) of the sorted "
        "4th-nearest-neighbour distances, moved to the midpoint to the next distinct "
        "distance; n_clusters is not used.",
        "- **HC**: scipy Ward linkage on condensed sqrt(D), tree cut at k clusters.",
        "- **K-medoids**: PAM (BUILD + SWAP) on sqrt(D); deterministic.",
        "- **Row order**: every method clusters the rows in a canonical order computed from "
        "D alone and maps labels back, so results do not depend on how rows are split "
        "across parties.",
        "- **k-FED**: local scikit-learn k-means (10 restarts) with k' = floor(sqrt(k)) (the "
        "k-FED paper's k' <= sqrt(k)) and with k' = k; server farthest-point seeding from "
        "one random party's centres, one Lloyd step over all uploaded centres, points "
        "inherit their local centre's label. Run on the plaintext rows (it never sees "
        "distances between points).",
        "- **MUFC** (`omnifc._mufc.federated_mufc`, Pan et al., ICLR 2023, as the authors' "
        "code `thupchnsky/mufc` runs it with `--client_kpp_only`): each party picks k' = k "
        "K-means++ seeds among its rows (no Lloyd iterations) and assigns its rows to them; "
        "seeds are rounded to the grid eps = 1/sqrt(N); the server gets the multiset of bins "
        "with their point counts (SCMA in the paper; summed in the clear here), draws one "
        "point uniformly in each point's bin and runs scikit-learn KMeans (10 restarts, 300 "
        "iterations); every row takes its surrogate's label. Seed 0. Not run: unlearning, "
        "SCMA's Reed-Solomon protocol.",
    ]
    return "\n".join(lines) + "\n"


def run_reproduction(out_dir="docs/reproduction", *, quick: bool = False, datasets=None,
                     levels=None, methods=None, progress=None, stem: str | None = None) -> dict:
    """Run the evaluation and write the Markdown table and the kappa plot.

    Parameters
    ----------
    out_dir : str or Path
        Where ``<stem>.md`` and ``<stem>_kappa.png`` go.
    quick : bool
        Only iris, iris_l2 and wine, p in {0, 0.5, 1} (well under a minute).
    stem : str, optional
        File name stem; default ``reproduction`` (``reproduction_quick`` with ``quick``).
    datasets, levels, methods : sequences, optional
        Override the defaults.
    progress : callable, optional
        Called with a short string after each (data set, p).

    Returns
    -------
    dict with ``records`` (one dict per data set x p x method x pipeline), ``markdown``
    and ``plot`` (paths) and ``seconds``.
    """
    datasets = tuple(datasets or (QUICK_DATASETS if quick else REPRO_DATASETS))
    levels = tuple(levels or ((0.0, 0.5, 1.0) if quick else LEVELS))
    methods = tuple(methods or METHODS)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    from threadpoolctl import threadpool_limits  # a scikit-learn dependency

    start = time.perf_counter()
    records = []
    for name in datasets:
        data = _load(name)
        for level in levels:
            step = time.perf_counter()
            # One BLAS thread: on a shared machine oversubscribed BLAS threads made the
            # eigendecompositions several times slower; the results do not change.
            with threadpool_limits(limits=1):
                records += _evaluate(data, level, methods)
            message = f"{name} p={level:g}: {time.perf_counter() - step:.1f} s"
            logger.info(message)
            if progress:
                progress(message)
    seconds = time.perf_counter() - start
    stem = stem or ("reproduction_quick" if quick else "reproduction")
    plot = out / f"{stem}_kappa.png"
    markdown = out / f"{stem}.md"
    _plot(records, datasets, levels, methods, plot)
    markdown.write_text(_markdown(records, datasets, levels, methods, seconds, quick,
                                  plot.name))
    return {"records": records, "markdown": markdown, "plot": plot, "seconds": seconds}
