"""Federated data sets with planted client groups, built offline from scikit-learn's bundled data.

Every client belongs to one of ``n_groups`` planted groups; the groups differ by one of the
distribution shifts the clustered-FL papers study (FLUX's taxonomy):

- ``"label"`` (P(Y)): each group has its own class prior ``p_g ~ Dirichlet(group_alpha)``;
  each client draws its own prior ``p_i ~ Dirichlet(client_concentration * p_g)`` around it.
- ``"feature"`` (P(X)): each group transforms the inputs: ``feature_transform="rotate"``
  (8x8 digit images rotated by ``g * 360 / n_groups`` degrees; digits only),
  ``"permute"`` (a fixed random permutation of the features per group; group 0 unchanged) or
  ``"noise"`` (group g adds a fixed Gaussian pattern of scale ``feature_noise``).
- ``"concept"`` (P(Y|X)): each group relabels classes by a fixed permutation (group 0: none).
- ``"conditional"`` (P(X|Y)): each group adds a class-dependent fixed pattern
  ``offset[g, y]`` (scale ``conditional_scale``) to the inputs; class priors unchanged.
- ``"none"``: no shift (one iid population; ``groups`` all 0).

The pool (digits: 1797 8x8 images, pixel values / 16 in [0, 1]) is split once into a
training pool and a test pool (70/30, seeded), so no client's test rows appear in any
client's training data. A client draws its training and test rows from the pools, per class,
with its own class prior (without replacement within a client when the pool allows), then
applies its group's shift. "Unseen" clients (``new_per_group``) are built the same way and
are meant for test-time assignment (FLUX).

Constants marked *(our choice)* below are ours, not a paper's.

Examples
--------
>>> from omnifc.fl import make_federated
>>> data = make_federated("digits", shift="concept", n_groups=3, clients_per_group=2, seed=0)
>>> len(data.clients), data.groups.tolist(), data.n_features, data.n_classes
(6, [0, 0, 1, 1, 2, 2], 64, 10)
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from finite_field import ParameterError

__all__ = ["Client", "FederatedDataset", "SHIFTS", "FEATURE_TRANSFORMS", "load_pool",
           "make_federated"]

SHIFTS = ("label", "feature", "concept", "conditional", "none")
FEATURE_TRANSFORMS = ("rotate", "permute", "noise")
DATASETS = ("digits", "iris", "wine", "breast_cancer")

#: (our choice) fraction of the pool used for training rows; the rest feeds test rows.
TRAIN_FRACTION = 0.7


@dataclass
class Client:
    """One client's local data and its planted group (known to the simulation only)."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    group: int

    @property
    def n_train(self) -> int:
        return int(self.y_train.size)


@dataclass
class FederatedDataset:
    """Clients, unseen clients and their planted groups; ``info`` records the settings."""

    clients: list
    new_clients: list
    groups: np.ndarray
    new_groups: np.ndarray
    n_features: int
    n_classes: int
    shift: str
    n_groups: int
    info: dict = field(default_factory=dict)


def load_pool(name: str = "digits"):
    """A bundled scikit-learn data set as ``(x, y)``, offline.

    ``digits``: pixels / 16 (in [0, 1]); the others: standardized features.
    """
    from sklearn import datasets

    if name not in DATASETS:
        raise ParameterError(f"dataset must be one of {DATASETS}, got {name!r}")
    bunch = getattr(datasets, f"load_{name}")()
    x = np.asarray(bunch.data, dtype=np.float64)
    y = np.asarray(bunch.target, dtype=np.int64)
    if name == "digits":
        return x / 16.0, y
    return (x - x.mean(axis=0)) / np.where(x.std(axis=0) > 0, x.std(axis=0), 1.0), y


def _rotate_images(x: np.ndarray, degrees: float, side: int = 8) -> np.ndarray:
    if degrees % 360 == 0:
        return x.copy()
    from scipy.ndimage import rotate

    images = x.reshape(-1, side, side)
    out = rotate(images, degrees, axes=(1, 2), reshape=False, order=1, mode="constant")
    return np.clip(out.reshape(x.shape[0], -1), 0.0, None)


def _draw_rows(by_class, counts, rng) -> np.ndarray:
    picks = []
    for c, k in enumerate(counts):
        if k == 0:
            continue
        pool = by_class[c]
        picks.append(rng.choice(pool, size=int(k), replace=bool(k > pool.size)))
    return np.concatenate(picks) if picks else np.zeros(0, dtype=np.int64)


def make_federated(name: str = "digits", *, shift: str = "feature", n_groups: int = 3,
                   clients_per_group: int = 4, new_per_group: int = 2,
                   train_samples: int = 150, test_samples: int = 100, seed: int = 0,
                   feature_transform: str | None = None, group_alpha: float = 0.5,
                   client_concentration: float = 50.0, feature_noise: float = 0.3,
                   conditional_scale: float = 0.3, label_floor: float = 0.0) -> FederatedDataset:
    """Build a federated data set with ``n_groups`` planted groups differing by ``shift``.

    Parameters
    ----------
    name : {"digits", "iris", "wine", "breast_cancer"}
        scikit-learn bundled data set (offline).
    shift : {"label", "feature", "concept", "conditional", "none"}
        See the module docstring.
    n_groups, clients_per_group, new_per_group : int
        Planted groups, training clients per group, unseen clients per group.
    train_samples, test_samples : int
        Rows per client.
    seed : int
        Everything (pool split, group transforms, client draws) follows from it.
    feature_transform : {"rotate", "permute", "noise"}, optional
        For ``shift="feature"``; default ``"rotate"`` for digits, ``"permute"`` otherwise.
    group_alpha : float
        *(our choice: 0.5)* Dirichlet concentration of the group class priors (label shift).
    client_concentration : float
        *(our choice: 50)* how tightly a client's prior follows its group's (label shift).
    feature_noise, conditional_scale : float
        *(our choice: 0.3)* scale of the fixed per-group (per-class) input patterns.
    label_floor : float
        Label shift: every class keeps at least this probability in each group prior
        (``p_g = floor + (1 - floor * C) * Dirichlet``); 0 = pure Dirichlet.

    Returns
    -------
    FederatedDataset
        Clients ordered by group (group g holds clients ``g*clients_per_group ...``).
    """
    if shift not in SHIFTS:
        raise ParameterError(f"shift must be one of {SHIFTS}, got {shift!r}")
    n_groups = 1 if shift == "none" else int(n_groups)
    if n_groups < 1 or clients_per_group < 1 or new_per_group < 0:
        raise ParameterError(f"need n_groups >= 1, clients_per_group >= 1, new_per_group >= 0;"
                             f" got {n_groups}, {clients_per_group}, {new_per_group}")
    if train_samples < 1 or test_samples < 0:
        raise ParameterError(f"need train_samples >= 1 and test_samples >= 0, got "
                             f"{train_samples}, {test_samples}")
    if feature_transform is None:
        feature_transform = "rotate" if name == "digits" else "permute"
    if feature_transform not in FEATURE_TRANSFORMS:
        raise ParameterError(f"feature_transform must be one of {FEATURE_TRANSFORMS}, got "
                             f"{feature_transform!r}")
    if shift == "feature" and feature_transform == "rotate" and name != "digits":
        raise ParameterError("feature_transform='rotate' needs image data (digits)")

    x, y = load_pool(name)
    n_classes = int(y.max()) + 1
    if not 0.0 <= label_floor <= 1.0 / n_classes:
        raise ParameterError(f"label_floor must lie in [0, 1/{n_classes}], got {label_floor}")
    d = x.shape[1]
    rng = np.random.default_rng(seed)
    order = rng.permutation(y.size)
    cut = int(round(TRAIN_FRACTION * y.size))
    train_by_class = [order[:cut][y[order[:cut]] == c] for c in range(n_classes)]
    test_by_class = [order[cut:][y[order[cut:]] == c] for c in range(n_classes)]

    # group-level parameters, all from the one seeded generator
    priors = np.full((n_groups, n_classes), 1.0 / n_classes)
    if shift == "label":
        priors = rng.dirichlet(np.full(n_classes, group_alpha), size=n_groups)
        priors = label_floor + (1.0 - label_floor * n_classes) * priors
    feature_perms = [np.arange(d)] + [rng.permutation(d) for _ in range(n_groups - 1)]
    label_perms = [np.arange(n_classes)]
    while len(label_perms) < n_groups:
        p = rng.permutation(n_classes)
        if not any(np.array_equal(p, q) for q in label_perms):
            label_perms.append(p)
    noise_patterns = feature_noise * rng.standard_normal((n_groups, d))
    noise_patterns[0] = 0.0
    class_offsets = conditional_scale * rng.standard_normal((n_groups, n_classes, d))
    class_offsets[0] = 0.0

    def shifted(rows_x, rows_y, g):
        if shift == "feature":
            if feature_transform == "rotate":
                rows_x = _rotate_images(rows_x, g * 360.0 / n_groups)
            elif feature_transform == "permute":
                rows_x = rows_x[:, feature_perms[g]]
            else:
                rows_x = rows_x + noise_patterns[g]
        elif shift == "conditional":
            rows_x = rows_x + class_offsets[g][rows_y]
        elif shift == "concept":
            rows_y = label_perms[g][rows_y]
        return rows_x, rows_y

    def client(g):
        p = priors[g]
        if shift == "label":
            p = rng.dirichlet(client_concentration * p + 1e-3)
        train_idx = _draw_rows(train_by_class, rng.multinomial(train_samples, p), rng)
        test_idx = _draw_rows(test_by_class, rng.multinomial(test_samples, p), rng)
        xtr, ytr = shifted(x[train_idx], y[train_idx], g)
        xte, yte = shifted(x[test_idx], y[test_idx], g)
        return Client(x_train=xtr, y_train=ytr, x_test=xte, y_test=yte, group=g)

    groups = np.repeat(np.arange(n_groups), clients_per_group)
    new_groups = np.repeat(np.arange(n_groups), new_per_group)
    clients = [client(int(g)) for g in groups]
    new_clients = [client(int(g)) for g in new_groups]
    info = dict(name=name, seed=seed, train_samples=train_samples, test_samples=test_samples,
                feature_transform=feature_transform if shift == "feature" else None,
                group_alpha=group_alpha, client_concentration=client_concentration,
                feature_noise=feature_noise, conditional_scale=conditional_scale,
                label_floor=label_floor)
    return FederatedDataset(clients=clients, new_clients=new_clients, groups=groups,
                            new_groups=new_groups, n_features=d, n_classes=n_classes,
                            shift=shift, n_groups=n_groups, info=info)
