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
import time
from pathlib import Path

import numpy as np

from ..._clustering import METHODS, cluster
from ..._secure import secure_distance_matrix
from .._metrics import clustering_scores
from ._report import (bootstrap_kappas, kappa_noise, omnifc_markdown, omnifc_plot,
                      require_plots)
from .._splits import split_non_iid
from ..baselines import KFed, federated_fcm, federated_mufc, fedsc_style
from ._grid import (BASELINE_REFERENCE, LEVELS, METHOD_OPTIONS, NOISE_SEGMENTS,
                    QUICK_DATASETS, REPRO_DATASETS,
                    SCALE_BITS, SEED, SEGMENTS, load_reproduction_dataset)

__all__ = ["run_reproduction", "LEVELS", "REPRO_DATASETS", "METHOD_OPTIONS"]

logger = logging.getLogger(__name__)


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
    omnifc_labels = None                 # OmniFC's representative against the baselines
    for method in methods:
        k_arg = None if method == "dbscan" else k
        timings, labels = {}, {}
        for pipeline, distances in (("federated", result.distances), ("centralized", central)):
            start = time.perf_counter()
            labels[pipeline] = cluster(distances, method, k_arg, random_state=SEED,
                                       **METHOD_OPTIONS[method])
            timings[pipeline] = time.perf_counter() - start
        same = bool(clustering_scores(labels["federated"], labels["centralized"])["ari"] == 1.0)
        if method == BASELINE_REFERENCE:
            omnifc_labels = labels["federated"]
        for pipeline in ("federated", "centralized"):
            records.append(base | {"method": method, "pipeline": pipeline,
                                   "seconds": timings[pipeline],
                                   "clusters": len(set(labels[pipeline].tolist()) - {-1}),
                                   "same_as_centralized": same}
                           | clustering_scores(truth, labels[pipeline]))
    reference = None if omnifc_labels is None else bootstrap_kappas(truth, omnifc_labels)

    def against_omnifc(predicted) -> dict:
        """OmniFC's kappa, the baseline's and the paired bootstrap noise of the difference."""
        if omnifc_labels is None:
            return {}
        return {"vs_omnifc": (clustering_scores(truth, omnifc_labels)["kappa"],
                              clustering_scores(truth, predicted)["kappa"],
                              kappa_noise(truth, omnifc_labels, predicted,
                                          ours_kappas=reference))}

    for name, local in (("kfed-sqrt", None), ("kfed-k", k)):
        start = time.perf_counter()
        model = KFed(n_clusters=k, local_clusters=local, random_state=SEED)
        predicted = model.fit([dataset.features[i] for i in parts]).labels_global_
        records.append(base | {"method": name, "pipeline": "k-FED",
                               "seconds": time.perf_counter() - start,
                               "clusters": len(set(predicted.tolist())),
                               "same_as_centralized": None}
                       | clustering_scores(truth, predicted) | against_omnifc(predicted))
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
                       | clustering_scores(truth, predicted) | against_omnifc(predicted))
    return records


def run_reproduction(out_dir="omnifc-reproduce", *, quick: bool = False, datasets=None,
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
    require_plots()                      # before any work: a missing extra writes nothing
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    from threadpoolctl import threadpool_limits  # a scikit-learn dependency

    start = time.perf_counter()
    records = []
    for name in datasets:
        data = load_reproduction_dataset(name)
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
    omnifc_plot(records, datasets, levels, methods, plot)
    markdown.write_text(omnifc_markdown(records, datasets, levels, methods, seconds, quick,
                                        plot.name))
    return {"records": records, "markdown": markdown, "plot": plot, "seconds": seconds}
