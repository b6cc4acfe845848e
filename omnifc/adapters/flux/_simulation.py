"""FLUX in simulation: the federated loop, baselines and synthetic data."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from sklearn.decomposition import PCA

from finite_field import ParameterError

from ._assign import ASSIGN_RULES, GLOBAL, assign_with_evidence
from ._paper import (DEFAULT_DESCRIPTOR_FORM, DEFAULT_RECIPE, cluster_clients,
                     descriptor, descriptor_bound, flux_components, run_k_level,
                     shared_projection)
from ._secure import block_distances, prefix_distances, split_block_distances
from ._split_half import (cluster_split_clients, second_test_for, split_descriptors,
                          split_groups_for)
from ._whitening import whitening_of_clients

__all__ = ["ACTIVATION_MARGIN", "CLUSTER_ROUNDS", "FluxRun", "SHIFTS", "WARMUP_ROUNDS",
           "client_descriptors", "flux_baselines", "run_flux", "shift_scenario"]


#: (our choice) FedAvg rounds before the descriptors are taken (the paper clusters once the
#: round-to-round accuracy gain drops below 0.06, from round 3 on; fixed here for seeding).
WARMUP_ROUNDS = 5

#: (our choice) per-cluster FedAvg rounds after clustering.
CLUSTER_ROUNDS = 10

#: The paper's activation bound: M = 1.02 x the largest latent activation clients report.
ACTIVATION_MARGIN = 1.02

def client_descriptors(model, params, clients, projection: PCA, n_classes: int, *,
                       split: str = "train", form: str = DEFAULT_DESCRIPTOR_FORM) -> np.ndarray:
    """Each client's descriptor from the encoder ``model.latents(params, x)`` (client side)."""
    x = [c.x_train if split == "train" else c.x_test for c in clients]
    y = [c.y_train if split == "train" else c.y_test for c in clients]
    return _descriptors([model.latents(params, rows) for rows in x], y, projection, n_classes,
                        form)


def _descriptors(latents, labels, projection, n_classes: int, form: str) -> np.ndarray:
    """One :func:`descriptor` per client, from its ``latents`` and ``labels``, stacked."""
    return np.stack([descriptor(z, y, projection, n_classes, form=form)
                     for z, y in zip(latents, labels)])

@dataclass
class FluxRun:
    """The outcome of :func:`run_flux`.

    ``labels``: cluster per training client; ``models``: one per cluster (after per-cluster
    FedAvg); ``new_labels``: the cluster each unseen client was assigned to, label-free
    (``GLOBAL``, -1: it resembles no cluster and uses ``global_model``); ``assignment``: the
    :class:`~omnifc.adapters.flux.Assignment` behind ``new_labels`` (per unseen client the
    rule, the conformal p-values and centroid distances, ``summary()``);
    ``accuracy`` / ``new_accuracy``: pooled test accuracy of the training / unseen clients
    with their cluster's model (the global model for ``GLOBAL``); ``distances``: the D the server clustered; ``eps`` and
    ``gap``: the K rule's cut (DBSCAN's eps, or Ward's cut height) and its gap ratio;
    ``global_model``: the warm-up FedAvg model (the encoder).
    """

    labels: np.ndarray
    n_clusters: int
    eps: float
    gap: float | None
    models: list
    new_labels: np.ndarray
    accuracy: float
    new_accuracy: float
    distances: np.ndarray
    prefix: np.ndarray
    global_model: np.ndarray
    max_activation: float
    #: the calibrated rule's evidence (:class:`omnifc.adapters._calibrated_k.KDecision`)
    decision: object = None
    #: the unseen clients' assignment and its evidence (None without unseen clients)
    assignment: object = None
    #: the noise-whitened metric's map and evidence (:class:`NoiseWhitening`; None unless
    #: ``normalization="whitened"``)
    whitening: object = None
    #: the second test's evidence (:class:`~omnifc.adapters.flux._spiked_null.SpikedNullTest`)
    #: where it was asked (``second_test="spiked"``, the rule at one cluster, 4 to 6
    #: clients), else None
    second_test: object = None

def run_flux(data, model, *, warmup_rounds: int = WARMUP_ROUNDS,
             cluster_rounds: int = CLUSTER_ROUNDS, local_train=None, seed: int = 0,
             secure: bool = True, normalization: str = DEFAULT_RECIPE["normalization"],
             k_rule: str = DEFAULT_RECIPE["k_rule"],
             eps_rule: str = "gap", eps_scaling: float = 1.0, n_components: int | None = None,
             descriptor_form: str = DEFAULT_DESCRIPTOR_FORM, assign_rule: str = "nearest",
             scale_bits: int = 16, parties=None, new_parties=None,
             k_alpha: float | None = None, k_references: int | None = None,
             k_min_group: int | None = None, split_groups: int | None = None,
             second_test: str | None = None) -> FluxRun:
    """FLUX end to end on an :func:`omnifc.fl.make_federated` data set.

    1. FedAvg warm-up of ``model`` for ``warmup_rounds`` (the global model is the encoder);
    2. clients compute descriptors of their training rows (latents of the global model,
       the shared data-independent PCA with ``l = flux_components(n_classes, latent_dim)``
       components (at least ``FLUX_MIN_COMPONENTS``; the paper's ``l = n_classes`` with
       ``n_components=n_classes``), ``M`` = 1.02 x the
       largest activation the clients report; ``descriptor_form="weighted_all"`` by
       default, ``"weighted"`` (the previous default), ``"paper"`` for the paper's
       descriptor);
    3. the server gets the squared distances through the secure reconstruction and chooses
       the clusters with :func:`cluster_clients`. **By default** (``DEFAULT_RECIPE`` =
       ``SPLIT_GROUPS_RECIPE``, issue 24's twenty-second pass): ``normalization="split"``,
       each client also computes the descriptors of its rows without each of
       ``split_groups`` = 10 random groups (the delete-a-group jackknife; it needs at least
       10 rows), its 11 rows join one secure D of 11n rows, and the server whitens the
       descriptors by the noise it reads from that D alone
       (:mod:`omnifc.adapters.flux._split_half`; ``**SPLIT_MIN_P_RECIPE``, the default of
       the fourteenth to the twenty-first pass: two random halves, ``split_groups=2``, 3n
       rows); ``k_rule="calibrated_axis_or_gap"``, the
       calibrated one-cluster test that reads both the top principal axis and Ward's widest
       merge gap against the same references, min-p (:func:`calibrated_k`,
       ``statistic="axis_or_gap"``, seeded by ``seed``; evidence in ``FluxRun.decision``);
       K = Ward's cut at its widest gap. ``**SPLIT_HALF_RECIPE``: the top-axis test alone.
       Every calibrated rule here tests at ``k_alpha`` = ``RUN_K_ALPHA`` (0.01, the iid
       goal's level) with ``k_references`` = ``RUN_K_REFERENCES`` (199) unless told
       otherwise. Options: ``normalization="none"`` (D of the descriptors only, n x n;
       ``**PREVIOUS_DEFAULT`` is the default before that pass, with ``k_rule="calibrated"``
       at 0.05), ``"whitened"`` (each client also computes its jackknife noise,
       :func:`noise_contribution`, pooled by secure sum, every descriptor whitened by it
       before the reconstruction, :mod:`omnifc.adapters.flux._whitening`, evidence in
       ``FluxRun.whitening``; ``**WHITENED_RECIPE``: better than the default on held-out
       seeds, not the default for what it reveals), the block normalizations
       (:data:`NORMALIZATIONS`); K rules ``"calibrated"``, ``"calibrated_axis"``,
       ``"calibrated_unimodal"`` and ``"calibrated_denoised"`` (:data:`K_RULES`; ``k_min_group`` goes to
       :func:`cluster_clients` for the top-axis rules), ``"ward"`` (:func:`ward_gap`);
       ``k_rule="dbscan"`` runs FLUX's adaptive DBSCAN with ``eps_rule`` (``"gap"``, the
       previous default, or the paper's ``"knee"`` with ``eps_scaling``);
    4. per-cluster FedAvg from the global model for ``cluster_rounds``;
    5. test time: every unseen client (``data.new_clients``) computes its descriptor (no
       labels are needed for the ``[mu_x, sigma_x]`` prefix), the prefix distances go through
       a second reconstruction, and it is assigned by ``assign_rule``
       (:func:`assign_with_evidence`): ``"nearest"`` takes the model of the nearest cluster
       centroid; ``"calibrated"`` the cluster with the largest conformal p-value, or the
       global model (the warm-up FedAvg encoder) when every p <= alpha = 0.05; the
       evidence is ``FluxRun.assignment``.

    ``secure=False`` computes the same distances from the same quantized descriptors in
    the clear; since the loop is seeded per (round, client), equal clusters give
    bit-identical models. ``parties`` / ``new_parties`` group clients into protocol parties
    (party label per training client / per training + unseen client for the prefix).
    """
    from ... import fl

    k_alpha, k_references = run_k_level(k_rule, k_alpha, k_references, eps_rule=eps_rule,
                                        eps_scaling=eps_scaling, k_min_group=k_min_group)
    if assign_rule not in ASSIGN_RULES:
        raise ParameterError(f"assign_rule must be one of {ASSIGN_RULES}, got {assign_rule!r}")
    split_groups = split_groups_for(normalization, split_groups)
    second_test = second_test_for(second_test, normalization, k_rule)
    if local_train is None:
        local_train = fl.sgd_trainer(model, epochs=2, batch_size=20, learning_rate=0.3)
    warm = fl.run_federated(data.clients, [model.init(seed)], rounds=warmup_rounds,
                            local_train=local_train, seed=seed)
    encoder = warm.models[0]
    # each client encodes its training rows once: the activation it reports, its
    # descriptor and (whitened) its jackknife noise all read these latents
    latents = [model.latents(encoder, c.x_train) for c in data.clients]
    new_latents = [model.latents(encoder, c.x_train) for c in data.new_clients]
    latent_dim = latents[0].shape[1]
    # M: the paper's 1.02 x the largest activation any client reports (the server learns it)
    largest = max(float(z.max(initial=0.0)) for z in latents + new_latents)
    max_value = ACTIVATION_MARGIN * max(largest, 1e-12)
    l = flux_components(data.n_classes, latent_dim) if n_components is None else int(n_components)
    projection = shared_projection(latent_dim, l, max_value=max_value)
    bound = descriptor_bound(projection, max_value)
    labels = [c.y_train for c in data.clients]
    desc = _descriptors(latents, labels, projection, data.n_classes, descriptor_form)
    whitening = None
    if normalization == "whitened":
        whitening = whitening_of_clients(
            latents, labels, projection, data.n_classes, bound=bound, form=descriptor_form,
            secure=secure, parties=parties)
    splits = None
    if normalization == "split":
        # each client splits its rows at random (seeded here, for a reproducible simulation)
        splits = split_descriptors(latents, labels, projection, data.n_classes,
                                   form=descriptor_form, rng=np.random.default_rng(seed),
                                   groups=split_groups)
    if normalization == "split":             # the rule reads the split D itself
        full = split_block_distances(desc, splits, bound=bound, secure=secure,
                                     scale_bits=scale_bits, parties=parties)
        d, found = cluster_split_clients(full, len(desc), groups=split_groups, k_rule=k_rule,
                                         k_alpha=k_alpha, k_references=k_references,
                                         k_min_group=k_min_group, second_test=second_test,
                                         eps_rule=eps_rule, eps_scaling=eps_scaling,
                                         random_state=seed)
        scales = None
    else:
        d, _, scales = block_distances(desc, n_components=l, n_classes=data.n_classes,
                                       bound=bound, normalization=normalization,
                                       secure=secure, scale_bits=scale_bits, parties=parties,
                                       whitening=whitening)
        found = cluster_clients(d, k_rule=k_rule, eps_rule=eps_rule, eps_scaling=eps_scaling,
                                k_alpha=k_alpha, k_references=k_references,
                                k_min_group=k_min_group, random_state=seed)
    labels = found.labels
    clustered = fl.run_federated(data.clients, [encoder] * found.n_clusters,
                                 rounds=cluster_rounds, local_train=local_train,
                                 assign=fl.fixed_assign(labels), seed=seed + 1)
    accuracy = fl.mean_accuracy(model, clustered.models, labels, data.clients)
    new_labels = np.zeros(0, dtype=np.int64)
    new_accuracy = float("nan")
    prefix = np.zeros((0, 0))
    assignment = None
    if len(data.new_clients):
        # label-free: only the [mu_x, sigma_x] prefix is used (per-class blocks are ignored)
        new_desc = _descriptors(new_latents, [c.y_train for c in data.new_clients],
                                projection, data.n_classes, descriptor_form)
        prefix = prefix_distances(desc, new_desc, n_components=l, n_classes=data.n_classes,
                                  bound=bound, scales=scales, normalization=normalization,
                                  secure=secure, scale_bits=scale_bits, parties=new_parties)
        assignment = assign_with_evidence(prefix, labels, rule=assign_rule)
        new_labels = assignment.labels
        # GLOBAL (-1) indexes the global model, appended after the cluster models
        with_global = list(clustered.models) + [encoder]
        new_accuracy = fl.mean_accuracy(model, with_global,
                                        np.where(new_labels == GLOBAL, found.n_clusters,
                                                 new_labels), data.new_clients)
    return FluxRun(labels=labels, n_clusters=found.n_clusters, eps=found.eps, gap=found.gap,
                   models=clustered.models, new_labels=new_labels, accuracy=accuracy,
                   new_accuracy=new_accuracy, distances=d, prefix=prefix,
                   global_model=encoder, max_activation=largest, decision=found.decision,
                   assignment=assignment, whitening=whitening, second_test=found.second_test)

def flux_baselines(data, model, flux_run: FluxRun, *, warmup_rounds: int = WARMUP_ROUNDS,
                   cluster_rounds: int = CLUSTER_ROUNDS, local_train=None,
                   seed: int = 0) -> dict:
    """FedAvg, IFCA and random assignment on the same data and round budget as FLUX.

    - ``fedavg``: one model, ``warmup_rounds + cluster_rounds`` rounds;
    - ``ifca``: IFCA with the planted K (IFCA must be given K), models initialized from
      seeds ``seed .. seed + K - 1``, same total rounds; unseen clients pick the model with
      the lowest loss on their *labelled* training rows (an advantage FLUX does not have);
    - ``random``: FLUX's cluster models, each unseen client assigned to a uniformly random
      cluster (seeded).

    Returns ``{name: (accuracy on training clients, accuracy on unseen clients)}``; FLUX's
    own pair is under ``"flux"``.
    """
    from ... import fl

    if local_train is None:
        local_train = fl.sgd_trainer(model, epochs=2, batch_size=20, learning_rate=0.3)
    rounds = warmup_rounds + cluster_rounds
    plain = fl.run_federated(data.clients, [model.init(seed)], rounds=rounds,
                             local_train=local_train, seed=seed)
    zeros_new = np.zeros(len(data.new_clients), dtype=np.int64)
    out = {"flux": (flux_run.accuracy, flux_run.new_accuracy),
           "fedavg": (fl.mean_accuracy(model, plain.models, plain.assignment, data.clients),
                      fl.mean_accuracy(model, plain.models, zeros_new, data.new_clients))}
    k = data.n_groups
    picker = fl.ifca_assign(model)
    ifca = fl.run_federated(data.clients, [model.init(seed + j) for j in range(k)],
                            rounds=rounds, local_train=local_train, assign=picker, seed=seed)
    final = picker(fl.RoundState(rounds, ifca.models, data.clients, np.arange(len(data.clients)),
                                 ifca.assignment, np.random.default_rng(0)))
    new_pick = picker(fl.RoundState(rounds, ifca.models, data.new_clients,
                                    np.arange(len(data.new_clients)), zeros_new,
                                    np.random.default_rng(0)))
    out["ifca"] = (fl.mean_accuracy(model, ifca.models, final, data.clients),
                   fl.mean_accuracy(model, ifca.models, new_pick, data.new_clients))
    rng = np.random.default_rng([seed, 7])
    random_labels = rng.integers(0, flux_run.n_clusters, size=len(data.new_clients))
    out["random"] = (flux_run.accuracy,
                     fl.mean_accuracy(model, flux_run.models, random_labels, data.new_clients))
    return out

SHIFTS = ("P(X)", "P(Y)", "P(Y|X)", "P(X|Y)")

def shift_scenario(shift: str, *, n_clients: int = 20, n_new: int = 10, n_classes: int = 10,
                   dim: int = 50, samples: int = 200, seed: int = 0):
    """Two groups of clients differing by one distribution shift (identity encoder, D = 50).

    - ``P(X)``: group 1's features are offset by a fixed vector (covariate shift);
    - ``P(Y)``: group 0 draws only classes 0..U/2-1, group 1 only the others;
    - ``P(Y|X)``: group 1's labels are permuted (same features: concept shift);
    - ``P(X|Y)``: group 1's class means move by per-class offsets.

    Latents are clipped to [0, M] with M = 2 x the public start value's scale (here M = 8):
    post-ReLU activations. Returns ``(train, new)``; each a list of ``(latents, labels)`` and
    an array of group indices.
    """
    if shift not in SHIFTS:
        raise ParameterError(f"shift must be one of {SHIFTS}, got {shift!r}")
    rng = np.random.Generator(np.random.PCG64(seed))
    centre = 4.0
    class_means = centre + rng.normal(0.0, 1.0, (n_classes, dim))
    offset = rng.normal(0.0, 1.0, dim)
    class_offsets = rng.normal(0.0, 1.0, (n_classes, dim))
    permutation = np.roll(np.arange(n_classes), 1)

    def client(group):
        if shift == "P(Y)":
            p = np.zeros(n_classes)
            p[np.arange(n_classes // 2) + (n_classes // 2) * group] = 1.0 / (n_classes // 2)
        else:
            p = np.full(n_classes, 1.0 / n_classes)
        y = rng.choice(n_classes, size=samples, p=p)
        x = class_means[y] + 0.5 * rng.standard_normal((samples, dim))
        if group == 1 and shift == "P(X)":
            x = x + offset
        if group == 1 and shift == "P(X|Y)":
            x = x + class_offsets[y]
        if group == 1 and shift == "P(Y|X)":
            y = permutation[y]
        return np.clip(x, 0.0, 2 * centre), y

    def make(count):
        groups = np.arange(count) % 2
        return [client(g) for g in groups], groups

    return make(n_clients), make(n_new)
