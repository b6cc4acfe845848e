"""FMCL in simulation: the federated loop, baselines and synthetic data."""

from __future__ import annotations

import math

import numpy as np

from finite_field import ParameterError

from ..._clustering import kmeans_from_distances
from ._one_cluster import DEFAULT_RULE
from ._paper import check_level_counts, class_counts, fmcl_server, signature
from ._secure import exact_fmcl_distances, secure_thermometer_distances

__all__ = ["SHIFTS", "fixed_encoder", "kmeans_on_mean_embeddings", "run_federated_fmcl",
           "synthetic_domains"]


def kmeans_on_mean_embeddings(mean_embeddings, n_clusters: int, *, random_state: int = 0):
    """The baseline FMCL compares against: k-means on each client's mean embedding."""
    x = np.asarray(mean_embeddings, dtype=np.float64)
    diff = x[:, None, :] - x[None, :, :]
    return kmeans_from_distances(np.einsum("ijk,ijk->ij", diff, diff), n_clusters,
                                 random_state=random_state)

def _rotation(dim, angle_scale, rng):
    from scipy.linalg import expm
    a = rng.standard_normal((dim, dim))
    skew = (a - a.T) / math.sqrt(2 * dim)
    return expm(angle_scale * skew)

#: Domain shifts of :func:`synthetic_domains`: a rotation plus offset of all class means
#: (P(X|Y), the default), an independent offset per class (P(X|Y)), a permutation of the
#: class means (P(Y|X) concept shift: domain k's class c looks like class pi_k(c)).
SHIFTS = ("rotation", "offset", "permutation")

def synthetic_domains(*, n_domains: int = 3, clients_per_domain: int = 30, n_classes: int = 10,
                      dim: int = 8, samples: int = 1000, alpha: float = 0.1,
                      rotation: float = 3.0, shift: str = "rotation", seed: int = 0):
    """Frozen-encoder embeddings of clients from several domains with Dirichlet labels.

    Class means are shared across domains up to the domain ``shift`` (see :data:`SHIFTS`);
    client labels follow Dirichlet(alpha), so client *mean* embeddings are dominated by the
    label mix. Every client has ``samples`` samples. Returns ``(clients, domains)`` with
    clients a list of ``(embeddings, labels)``.
    """
    if shift not in SHIFTS:
        raise ParameterError(f"shift must be one of {SHIFTS}, got {shift!r}")
    rng = np.random.Generator(np.random.PCG64(seed))
    class_means = 3.0 * rng.standard_normal((n_classes, dim))
    if shift == "rotation":
        rotations = [_rotation(dim, rotation, rng) for _ in range(n_domains)]
        offsets = rng.standard_normal((n_domains, dim))
        domain_means = [(class_means + offsets[k]) @ rotations[k].T for k in range(n_domains)]
    elif shift == "offset":
        domain_means = [class_means + 3.0 * rng.standard_normal((n_classes, dim))
                        for _ in range(n_domains)]
    else:
        domain_means = [class_means[rng.permutation(n_classes)] if k else class_means
                        for k in range(n_domains)]
    clients, domains = [], []
    for k in range(n_domains):
        for _ in range(clients_per_domain):
            p = rng.dirichlet(alpha * np.ones(n_classes))
            y = rng.choice(n_classes, size=samples, p=p)
            x = domain_means[k][y] + rng.standard_normal((samples, dim))
            clients.append((x, y))
            domains.append(k)
    return clients, np.array(domains)

def fixed_encoder(n_features: int, dim: int = 16, *, seed: int = 0):
    """A frozen, data-independent encoder ``phi(x) = relu(x W + b)`` (omnifc's stand-in).

    FMCL uses a frozen foundation model (CHIEF, USFM, ViT-Tiny); offline we use a random
    ReLU feature map with a public seed: the same for every client, never trained, so it
    plays the same role (a fixed embedding in which class-conditional means are compared).
    """
    rng = np.random.Generator(np.random.PCG64(seed))
    w = rng.standard_normal((int(n_features), int(dim))) / math.sqrt(n_features)
    b = 0.1 * rng.standard_normal(int(dim))

    def encode(x):
        return np.maximum(np.asarray(x, dtype=np.float64) @ w + b, 0.0)
    return encode

def run_federated_fmcl(data, *, rounds: int = 10, encoder_dim: int = 16, secure: bool = True,
                       parties=None, model=None, trainer=None, rule: str = DEFAULT_RULE,
                       seed: int = 0, resolution=None, **protect_options) -> dict:
    """FMCL end to end: signatures from a fixed encoder -> auto-K -> per-cluster FedAvg.

    Parameters
    ----------
    data : omnifc.fl.FederatedDataset
    rounds : int
        FedAvg rounds per cluster (all clusters train in the same loop).
    secure : bool
        Distances through the protocol (True) or the plaintext path of the same quantized
        signatures (False); the two give bit-identical distances, hence identical clusters
        and identical models.
    parties : sequence, optional
        Party label per client (organizations); default three organizations (i mod 3).
    resolution : int, optional
        None (default): the class weights are carried exactly whatever the sample counts
        (:func:`exact_fmcl_distances`: the level-set code, grouped when the counts' lcm is
        too large for one code); an int q: the rounded
        thermometer on the grid 1/q (lossy unless every ``q n_ic / n_i`` is an integer;
        only when asked for, never as a silent fallback).
    model, trainer
        Default: :class:`omnifc.fl.SoftmaxRegression` and ``sgd_trainer(epochs=2,
        batch_size=20, learning_rate=0.5)`` (omnifc's choice).

    Returns
    -------
    dict with ``labels`` (cluster per client), ``n_clusters``, ``distances``, ``resolution``,
    ``resolution`` (the common denominator L of the exact weights, or q),
    ``run`` (the :class:`omnifc.fl.FederatedRun`) and ``accuracy`` (final pooled test
    accuracy of each client's cluster model).
    """
    from ... import fl

    if rule == "additive_mix":           # refused before any secure session, with the reason
        raise ParameterError("rule='additive_mix' needs the class overlap, which "
                             "run_federated_fmcl does not pass; use fmcl_server(d, "
                             "rule='additive_mix', overlap=...)")
    encode = fixed_encoder(data.n_features, encoder_dim, seed=seed)
    sig = [signature(encode(c.x_train), c.y_train, data.n_classes) for c in data.clients]
    means = np.stack([s[0] for s in sig])
    owners = np.arange(len(data.clients)) % 3 if parties is None else parties
    if resolution is None:
        counts = np.stack([class_counts(c.y_train, data.n_classes) for c in data.clients])
        q = check_level_counts(counts.sum(axis=1), lcm_limit=False)[1]
        d = exact_fmcl_distances(means, counts, secure=secure, parties=owners,
                                 **protect_options)
    else:
        q = int(resolution)
        weights = np.stack([s[1] for s in sig])
        d = secure_thermometer_distances(means, weights, resolution=q, secure=secure,
                                         parties=owners, **protect_options)
    server = fmcl_server(d, rule=rule)
    model = model or fl.SoftmaxRegression(data.n_features, data.n_classes)
    trainer = trainer or fl.sgd_trainer(model, epochs=2, batch_size=20, learning_rate=0.5)
    start = [model.init(seed) for _ in range(server.n_clusters)]
    run = fl.run_federated(data.clients, start, rounds=rounds, local_train=trainer,
                           assign=fl.fixed_assign(server.labels),
                           evaluate=fl.accuracy_evaluator(model), seed=seed)
    return {"labels": server.labels, "n_clusters": server.n_clusters, "distances": d,
            "resolution": q, "run": run, "accuracy": run.history[-1].metrics["accuracy"],
            "server": server}
