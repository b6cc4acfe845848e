"""Client2Vec in simulation: the federated loop, baselines and synthetic data."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from finite_field import ParameterError

from ._paper import (DEFAULT_GAMMA, DEFAULT_LAMBDA, DEFAULT_TAU, client_index, mwu_weights,
                     pair_similarity, protected_vector, protection_bound, sample_clients,
                     sampling_probabilities)

__all__ = ["DEFAULT_LAMBDA_KD", "DEFAULT_LAMBDA_ORTH", "DEFAULT_MWU", "DEFAULT_REGULARIZER",
           "DEFAULT_SAMPLING", "USES", "IndexNetwork", "resolve_uses", "fit_index_network",
           "label_embeddings", "network_index", "regularized_loss_and_gradient",
           "regularized_trainer", "run_federated_client2vec", "synthetic_domains"]


def synthetic_domains(*, n_domains: int = 4, clients_per_domain: int = 5, n_classes: int = 10,
                      feature_dim: int = 64, label_dim: int = 32, samples: int = 200,
                      alpha: float = 0.3, seed: int = 0):
    """Per-sample feature/label embeddings of clients from distinct domains with label skew.

    Feature embedding = domain vector + per-sample noise (label-free, as DSA-IGN's u^f is
    meant to be); label embedding = fixed class vector + small noise; each client's labels
    follow Dirichlet(alpha). Returns ``(clients, domains)`` with clients a list of
    ``(feature_embeddings, label_embeddings)``.
    """
    rng = np.random.Generator(np.random.PCG64(seed))
    domain_vectors = rng.standard_normal((n_domains, feature_dim))
    class_vectors = rng.standard_normal((n_classes, label_dim))
    clients, domains = [], []
    for k in range(n_domains):
        for _ in range(clients_per_domain):
            labels = rng.choice(n_classes, size=samples, p=rng.dirichlet(alpha * np.ones(n_classes)))
            f = domain_vectors[k] + 0.5 * rng.standard_normal((samples, feature_dim))
            lab = class_vectors[labels] + 0.05 * rng.standard_normal((samples, label_dim))
            clients.append((f, lab))
            domains.append(k)
    return clients, np.array(domains)

def label_embeddings(n_classes: int, dim: int = 16, *, seed: int = 0) -> np.ndarray:
    """Fixed unit class vectors: omnifc's stand-in for CLIP's text embedding of each label."""
    rng = np.random.Generator(np.random.PCG64(seed))
    v = rng.standard_normal((int(n_classes), int(dim)))
    return v / np.linalg.norm(v, axis=1, keepdims=True)

@dataclass
class IndexNetwork:
    """A linear DSA-IGN: ``u^f = e A`` (label-free), ``z = e B`` (label-related), decoder W.

    The paper's DSA-IGN is a 3-layer Transformer encoder on CLIP image embeddings; this is
    the smallest network with the same four losses that numpy trains in a second (omnifc's
    choice). ``losses`` holds the training curve ``(total, div, sim, orth, recon)``.
    """

    a: np.ndarray
    b: np.ndarray
    w: np.ndarray
    losses: list
    center: np.ndarray

    def encode(self, embeddings, center=None):
        """Per-sample ``(u^f, z)`` for embeddings ``(N, d_e)``, centred by ``center``.

        ``center`` defaults to the proxy set's mean; the federated loop passes the
        federation's mean embedding (a secure sum of the clients' means).
        """
        c = self.center if center is None else np.asarray(center, dtype=np.float64)
        e = np.asarray(embeddings, dtype=np.float64) - c
        return e @ self.a, e @ self.b

    def feature_direction(self, feature_index) -> np.ndarray:
        """The embedding-space direction a feature index decodes to (``u^f W_u``), unit norm."""
        k = self.a.shape[1]
        v = np.asarray(feature_index, dtype=np.float64) @ self.w[:k]
        norm = np.linalg.norm(v)
        return v / norm if norm > 0 else v

def _index_losses(params, e, y, label_vectors, noise, temperature):
    """The four equally weighted DSA-IGN losses and their gradients (linear network)."""
    a, b, w = params
    n = e.shape[0]
    k = a.shape[1]
    u, z = e @ a, e @ b
    target = label_vectors[y]
    # L_sim: z aligned with the label embedding (mean squared error)
    rz = z - target
    l_sim = float((rz ** 2).sum(axis=1).mean())
    g_z = 2.0 * rz / n
    # L_orth: u^f orthogonal to z, per sample
    dot = (u * z).sum(axis=1)
    l_orth = float((dot ** 2).mean())
    g_u = 2.0 * dot[:, None] * z / n
    g_z = g_z + 2.0 * dot[:, None] * u / n
    # L_recon: [u^f; z] W reconstructs the embedding
    h = np.concatenate([u, z], axis=1)
    rr = h @ w - e
    l_recon = float((rr ** 2).sum(axis=1).mean())
    g_w = h.T @ (2.0 * rr / n)
    g_h = (2.0 * rr / n) @ w.T
    g_u = g_u + g_h[:, :k]
    g_z = g_z + g_h[:, k:]
    g_a = e.T @ g_u
    g_b = e.T @ g_z
    # L_div: SimCLR-style InfoNCE on normalized u^f of two noisy views (other samples are
    # the negatives)
    views = [e + noise[0], e + noise[1]]
    us = [v @ a for v in views]
    norms = [np.linalg.norm(x, axis=1, keepdims=True) + 1e-12 for x in us]
    unit = [x / m for x, m in zip(us, norms)]
    logits = unit[0] @ unit[1].T / temperature
    logits -= logits.max(axis=1, keepdims=True)
    p = np.exp(logits)
    p /= p.sum(axis=1, keepdims=True)
    l_div = float(-np.log(p[np.arange(n), np.arange(n)] + 1e-300).mean())
    d_s = (p - np.eye(n)) / n / temperature
    g_unit = [d_s @ unit[1], d_s.T @ unit[0]]
    for view, un, nm, gn in zip(views, unit, norms, g_unit):
        g_raw = (gn - un * (un * gn).sum(axis=1, keepdims=True)) / nm
        g_a = g_a + view.T @ g_raw
    total = l_div + l_sim + l_orth + l_recon
    return (total, l_div, l_sim, l_orth, l_recon), (g_a, g_b, g_w)

def fit_index_network(embeddings, labels, label_vectors, *, feature_dim: int | None = None,
                      steps: int = 300, batch_size: int = 128, learning_rate: float = 0.01,
                      noise: float = 0.1, temperature: float = 0.5,
                      seed: int = 0) -> IndexNetwork:
    """Train the index network with Adam on ``L_div + L_sim + L_orth + L_recon``.

    Where DSA-IGN is trained is not in the paper's summary; omnifc trains it once on a
    public labelled proxy set and ships it frozen to the clients. ``feature_dim`` defaults
    to the label embedding's width (per-sample orthogonality needs equal widths).
    Augmentations for ``L_div`` are Gaussian noise of scale ``noise`` on the embedding
    (omnifc's choice; the paper augments images). Embeddings are centred by the proxy set's
    mean (a public statistic; omnifc's choice: without it the mean of the nonnegative
    encoder features dominates every client's index and all cosines are near 1).
    """
    e = np.asarray(embeddings, dtype=np.float64)
    center = e.mean(axis=0)
    e = e - center
    y = np.asarray(labels, dtype=np.int64)
    lv = np.asarray(label_vectors, dtype=np.float64)
    k = lv.shape[1] if feature_dim is None else int(feature_dim)
    if k != lv.shape[1]:
        raise ParameterError(f"feature_dim must equal the label embedding width {lv.shape[1]}"
                             f" (u^f and z are compared per sample), got {k}")
    rng = np.random.Generator(np.random.PCG64(seed))
    d = e.shape[1]
    params = [rng.standard_normal((d, k)) / np.sqrt(d), rng.standard_normal((d, k)) / np.sqrt(d),
              rng.standard_normal((2 * k, d)) / np.sqrt(2 * k)]
    moments = [[np.zeros_like(p), np.zeros_like(p)] for p in params]
    beta1, beta2 = 0.9, 0.999
    history = []
    for step in range(1, int(steps) + 1):
        idx = rng.choice(e.shape[0], size=min(int(batch_size), e.shape[0]), replace=False)
        batch = e[idx]
        views = noise * rng.standard_normal((2,) + batch.shape)
        values, grads = _index_losses(params, batch, y[idx], lv, views, temperature)
        history.append(values)
        for p, g, m in zip(params, grads, moments):
            m[0] = beta1 * m[0] + (1 - beta1) * g
            m[1] = beta2 * m[1] + (1 - beta2) * g * g
            p -= learning_rate * (m[0] / (1 - beta1 ** step)) / (
                np.sqrt(m[1] / (1 - beta2 ** step)) + 1e-8)
    return IndexNetwork(a=params[0], b=params[1], w=params[2], losses=history, center=center)

def network_index(network: IndexNetwork, embeddings, labels, label_vectors, center=None):
    """Client side: ``beta_i = mean over samples of [u^f; u^l]`` with ``u^l`` the label vector."""
    u, _ = network.encode(embeddings, center)
    return client_index(u, np.asarray(label_vectors)[np.asarray(labels, dtype=np.int64)])

#: Which uses of the index :func:`run_federated_client2vec` runs by default (issue 24: "do
#: not default to a use that hurts"): none. Each use alone and together against FedAvg,
#: pooled test accuracy, digits, 3 domains x 4 clients, seeds 310-317 (docs/adapters.md):
#: under label shift every use is worse than FedAvg (regularizer -0.023, sampling -0.023,
#: MWU -0.051, all three -0.169); under feature rotation the regularizer alone ties
#: (+0.006) and the rest tie or lose. The paper's configuration (all three) is
#: ``uses="paper"``.
DEFAULT_SAMPLING = False
DEFAULT_MWU = False
DEFAULT_REGULARIZER = False

#: Named configurations of the three uses for ``run_federated_client2vec(uses=...)``:
#: ``(sampling, mwu, regularizer)``. "paper" = Client2Vec as published; "fedavg" = none
#: (uniform sampling, data-size FedAvg, plain SGD): the defaults.
USES = {"paper": (True, True, True), "fedavg": (False, False, False)}


def resolve_uses(uses=None, *, sampling=None, mwu=None, regularizer=None):
    """``(sampling, mwu, regularizer)`` from a named configuration and explicit flags.

    Start from ``USES[uses]`` (or the module's defaults when ``uses`` is None); a flag that
    is not None overrides its use.

    Examples
    --------
    >>> resolve_uses()
    (False, False, False)
    >>> resolve_uses("paper")
    (True, True, True)
    >>> resolve_uses("paper", regularizer=False)
    (True, True, False)
    """
    if uses is None:
        base = (DEFAULT_SAMPLING, DEFAULT_MWU, DEFAULT_REGULARIZER)
    elif uses in USES:
        base = USES[uses]
    else:
        raise ParameterError(f"uses must be one of {sorted(USES)} or None, got {uses!r}")
    return tuple(bool(b if f is None else f) for b, f in zip(base, (sampling, mwu, regularizer)))


#: Local regularizer weights (omnifc's choice, see :func:`regularized_trainer`).
DEFAULT_LAMBDA_ORTH = 0.05

DEFAULT_LAMBDA_KD = 0.1     # was 1.0; chosen on seeds 0-4, reported on 100-104 (docs)

def regularized_trainer(model, directions, *, lambda_orth: float = DEFAULT_LAMBDA_ORTH,
                        lambda_kd: float = DEFAULT_LAMBDA_KD, epochs: int = 2,
                        batch_size: int = 20, learning_rate: float = 0.5):
    """Client2Vec's local training for a softmax regression on frozen embeddings.

    Loss = cross-entropy + ``lambda_orth ||v_i^T W||_1`` + ``lambda_kd KL(p_global || p)``,
    where ``v_i`` is the client's feature index decoded to the embedding space
    (:meth:`IndexNetwork.feature_direction`) and ``W`` the model's weights: the paper's
    orthogonality loss ``||z_P B^f||_1`` (the model's features kept orthogonal to the
    client's label-free domain index) plus distillation from the round's global model.
    The paper's form of the projection and its weights are not in the summary; this
    reading and the weights are omnifc's choice. ``directions`` maps ``id(client)`` to
    ``v_i``. Plain minibatch SGD otherwise (same batches as :func:`omnifc.fl.sgd`).
    """
    from ...fl import SoftmaxRegression

    if not isinstance(model, SoftmaxRegression):
        raise ParameterError("the Client2Vec regularizer is implemented for "
                             "omnifc.fl.SoftmaxRegression")

    def local_train(params, client, rng):
        w = np.array(params, dtype=np.float64, copy=True)
        start = w.copy()
        v = np.asarray(directions[id(client)], dtype=np.float64)
        x, y = client.x_train, client.y_train
        n = y.size
        for _ in range(int(epochs)):
            order = rng.permutation(n)
            for s in range(0, n, int(batch_size)):
                idx = order[s:s + int(batch_size)]
                _, grad = regularized_loss_and_gradient(
                    model, w, x[idx], y[idx], v, start, lambda_orth=lambda_orth,
                    lambda_kd=lambda_kd)
                w -= learning_rate * grad
        return w
    return local_train

def regularized_loss_and_gradient(model, params, x, y, direction, teacher, *,
                                  lambda_orth: float = DEFAULT_LAMBDA_ORTH,
                                  lambda_kd: float = DEFAULT_LAMBDA_KD):
    """The local objective of :func:`regularized_trainer` on one batch, and its gradient.

    ``mean CE + lambda_orth sum_c |v . W_c| + lambda_kd mean_i KL(p_teacher,i || p_i)`` for a
    :class:`omnifc.fl.SoftmaxRegression` with parameters ``[W.ravel(), b]`` (W is
    ``(features, classes)``); ``teacher`` are the round's global parameters. At a point where
    ``v . W_c = 0`` the L1 term's subgradient 0 is used.
    """
    f, c = model.n_features, model.n_classes
    w = np.asarray(params, dtype=np.float64)
    v = np.asarray(direction, dtype=np.float64)
    x = np.asarray(x, dtype=np.float64)
    loss, grad = model.loss_and_gradient(w, x, y)
    if lambda_kd:
        teacher_p = _softmax_rows(model.logits(teacher, x))
        student_logits = model.logits(w, x)
        student_p = _softmax_rows(student_logits)
        log_student = student_logits - student_logits.max(axis=1, keepdims=True)
        log_student -= np.log(np.exp(log_student).sum(axis=1, keepdims=True))
        with np.errstate(divide="ignore", invalid="ignore"):
            log_teacher = np.where(teacher_p > 0, np.log(teacher_p), 0.0)
        kl = (teacher_p * (log_teacher - log_student)).sum(axis=1).mean()
        loss += lambda_kd * float(kl)
        delta = lambda_kd * (student_p - teacher_p) / x.shape[0]
        grad = grad + np.concatenate([(x.T @ delta).ravel(), delta.sum(0)])
    if lambda_orth:
        weights = w[:f * c].reshape(f, c)
        projection = v @ weights
        loss += lambda_orth * float(np.abs(projection).sum())
        g_w = lambda_orth * np.outer(v, np.sign(projection))
        grad = grad + np.concatenate([g_w.ravel(), np.zeros(c)])
    return loss, grad

def _softmax_rows(logits):
    z = logits - logits.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)

def run_federated_client2vec(clients, *, n_features: int, n_classes: int, rounds: int = 20,
                             per_round: int = 4, uses: str | None = None,
                             sampling: bool | None = None, mwu: bool | None = None,
                             regularizer: bool | None = None, secure: bool = True,
                             parties=None,
                             tau: float = DEFAULT_TAU, lambda_1: float = DEFAULT_LAMBDA,
                             gamma: float = DEFAULT_GAMMA, encoder_dim: int = 32,
                             index_dim: int = 16, proxy_rows: int = 500,
                             learning_rate: float = 0.5, lambda_orth: float = DEFAULT_LAMBDA_ORTH,
                             lambda_kd: float = DEFAULT_LAMBDA_KD, seed: int = 0) -> dict:
    """Client2Vec end to end against FedAvg: index network -> protected indices -> FL.

    Pipeline: a frozen encoder (:func:`omnifc.adapters.fmcl.fixed_encoder`) embeds every
    input; the index network is trained on a public proxy set (``proxy_rows`` unshifted
    digits drawn with the seed); each client computes ``beta_i`` and protects
    :func:`protected_vector`; the server gets D (secure or the plaintext path of the same
    quantized rows: bit-identical) and ``s(i, j)``. Each round ``per_round`` clients are
    sampled (similarity-driven if ``sampling``, else uniformly), train locally (with the
    Client2Vec regularizer if ``regularizer``) a softmax regression on the embeddings, and
    the server aggregates with MWU weights (``mwu``) or the data-size weights (FedAvg).

    **Defaults: none of the three uses** (:data:`DEFAULT_SAMPLING`, :data:`DEFAULT_MWU`,
    :data:`DEFAULT_REGULARIZER` are False: FedAvg with uniform partial participation; the
    index and D are still computed and returned). ``uses="paper"`` runs Client2Vec as
    published (all three); ``sampling``, ``mwu``, ``regularizer`` set one use each and
    override ``uses`` (:func:`resolve_uses`).

    Where each use helps and where it hurts (pooled test accuracy of the global model
    against FedAvg on digits, docs/adapters.md and docs/reproduction/client2vec.md):

    - **Regularizer**: a tie at best under feature rotation (+0.006, better on 5/8 seeds
      310-317), **worse under label shift** (-0.023, 0/8).
    - **Similarity sampling, MWU**: they move the global model toward the majority
      population. With 7 clients of one domain and 3 of another they raise the majority's
      accuracy (+0.03 to +0.05) and lower the pooled accuracy over all clients; with 3
      balanced domains each is a tie or worse under feature rotation and **worse under
      label shift** (sampling -0.023, MWU -0.051); all three together are worse under both
      shifts (-0.042, -0.169). Turn sampling and MWU on when the typical client's accuracy
      is what counts, not every client's.

    Examples
    --------
    >>> from omnifc import fl
    >>> data = fl.make_federated("digits", shift="feature", n_groups=2, clients_per_group=2,
    ...                          train_samples=20, test_samples=10, seed=0)
    >>> out = run_federated_client2vec(data.clients, n_features=64, n_classes=10, rounds=2,
    ...                                per_round=2, secure=False, uses="paper",
    ...                                encoder_dim=8, index_dim=4, proxy_rows=60)
    >>> len(out["sampled"]), out["distances"].shape
    (2, (4, 4))

    Returns a dict with ``run`` (:class:`omnifc.fl.FederatedRun`), ``accuracy`` (final
    pooled test accuracy of the global model over all clients), ``similarity``,
    ``distances``, ``network`` and ``sampled`` (the sets per round).
    """
    from ... import fl
    from ..fmcl import fixed_encoder

    sampling, mwu, regularizer = resolve_uses(uses, sampling=sampling, mwu=mwu,
                                              regularizer=regularizer)
    encode = fixed_encoder(n_features, encoder_dim, seed=seed)
    proxy_x, proxy_y = fl.load_pool("digits")
    pick = np.random.Generator(np.random.PCG64(seed + 1)).choice(proxy_y.size, proxy_rows,
                                                                 replace=False)
    label_vectors = label_embeddings(n_classes, index_dim, seed=seed)
    network = fit_index_network(encode(proxy_x[pick]), proxy_y[pick], label_vectors, seed=seed)
    embedded = [fl.Client(x_train=encode(c.x_train), y_train=c.y_train,
                          x_test=encode(c.x_test), y_test=c.y_test, group=c.group)
                for c in clients]
    from .._common import plaintext_distances, protect, quantize_rows, secure_group_sums

    # The federation's mean embedding centres the index (omnifc's choice): a masked secure
    # sum of the clients' mean embeddings (encoder outputs lie in [0, encoder_bound]).
    n = len(clients)
    owners = np.arange(n) % 3 if parties is None else parties
    client_means = np.stack([c.x_train.mean(axis=0) for c in embedded])
    bound = float(max(1.0, np.ceil(np.abs(client_means).max())))
    if secure:
        total = secure_group_sums(client_means, np.zeros(n, dtype=np.int64), bound=bound,
                                  nonnegative=True, parties=owners).totals[0]
    else:
        total = quantize_rows(client_means, bound=bound, nonnegative=True).sum(axis=0)
    center = total / n
    indices = [network_index(network, c.x_train, c.y_train, label_vectors, center)
               for c in embedded]
    rows = np.stack([protected_vector(i) for i in indices])
    if secure:
        distances = protect(rows, bound=protection_bound(), parties=owners).distances
    else:
        distances = plaintext_distances(quantize_rows(rows, bound=protection_bound()))
    similarity = pair_similarity(distances)
    sizes = np.array([c.n_train for c in clients], dtype=np.float64)
    sampled: list = []

    def participation(round_index, rng):
        if sampling and sampled:
            p = sampling_probabilities(similarity, sampled[-1], tau=tau)
        else:
            p = np.full(n, 1.0 / n)
        chosen = sample_clients(p, per_round, rng)
        sampled.append(chosen)
        return chosen

    def aggregate(params_list, weights):
        if not mwu:
            return fl.fedavg(params_list, weights)
        members = sampled[-1]     # one global model: every participant, in index order
        w = mwu_weights(similarity, sampled, data_weights=sizes, among=members,
                        lambda_1=lambda_1, gamma=gamma)[members]
        return fl.fedavg(params_list, w)

    model = fl.SoftmaxRegression(encoder_dim, n_classes)
    if regularizer:
        directions = {id(c): network.feature_direction(i[0]) for c, i in zip(embedded, indices)}
        train = regularized_trainer(model, directions, learning_rate=learning_rate,
                                    lambda_orth=lambda_orth, lambda_kd=lambda_kd)
    else:
        train = fl.sgd_trainer(model, epochs=2, batch_size=20, learning_rate=learning_rate)
    run = fl.run_federated(embedded, [model.init(seed)], rounds=rounds, local_train=train,
                           aggregate=aggregate, participation=participation,
                           evaluate=fl.accuracy_evaluator(model), seed=seed)
    return {"run": run, "accuracy": run.history[-1].metrics["accuracy"],
            "similarity": similarity, "distances": distances, "network": network,
            "sampled": sampled, "curve": [r.metrics["accuracy"] for r in run.history]}
