"""A FedSC-style baseline: shared random Fourier features, spectral clustering on the server."""

from __future__ import annotations

import numpy as np

__all__ = ["fedsc_style"]


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

