"""A small, model-agnostic federated training loop with per-cluster FedAvg.

One round of :func:`run_federated`:

1. **participants**: every client, or a seeded sample (``participation``);
2. **assign** (optional callback): the method's server/client logic picks a model index per
   client (CFL: cluster -> model); it may also return new models (e.g. FLUX splitting the
   global model into one copy per cluster). Without it every client keeps its assignment
   (all 0 at the start: plain FedAvg);
3. **local train** (callback) on each participant, from its assigned model, with a generator
   seeded by ``(seed, round, client index)`` so results never depend on who else took part
   or in which order the clients ran (a secure and a plaintext run that assign the same
   clusters train bit-identical models);
4. **aggregate**: per model, the callback (default :func:`fedavg`, weighted by training-set
   size) over the participants assigned to it; a model without participants keeps its
   parameters;
5. **evaluate** (optional callback) -> a dict stored in the round's record.

Callback signatures::

    local_train(params, client, rng) -> params
    assign(state: RoundState) -> assignment | (assignment, models)
    aggregate(list_of_params, weights) -> params
    evaluate(state: RoundState) -> dict

Models are whatever ``local_train`` and ``aggregate`` understand; the helpers here use flat
numpy vectors (:mod:`omnifc.fl._models`).

Examples
--------
FedAvg of a softmax regression on three rotated-digits groups, then IFCA from three models:

>>> import numpy as np
>>> from omnifc import fl
>>> data = fl.make_federated("digits", shift="feature", n_groups=3, clients_per_group=3,
...                          train_samples=100, test_samples=60, seed=0)
>>> model = fl.SoftmaxRegression(data.n_features, data.n_classes)
>>> train = fl.sgd_trainer(model, epochs=2, batch_size=20, learning_rate=0.5)
>>> run = fl.run_federated(data.clients, [model.init(seed=0)], rounds=5, local_train=train,
...                        evaluate=fl.accuracy_evaluator(model), seed=0)
>>> round(run.history[-1].metrics["accuracy"], 2) > 0.5
True
>>> start = [model.init(seed=s) for s in range(3)]
>>> ifca = fl.run_federated(data.clients, start, rounds=5, local_train=train,
...                         assign=fl.ifca_assign(model), seed=0)
>>> ifca.assignment.shape
(9,)
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from finite_field import InputError, ParameterError

from ._models import sgd

__all__ = ["RoundState", "RoundRecord", "FederatedRun", "run_federated", "fedavg",
           "sgd_trainer", "client_accuracies", "mean_accuracy", "accuracy_evaluator",
           "ifca_assign", "fixed_assign", "client_rng"]

logger = logging.getLogger(__name__)


@dataclass
class RoundState:
    """What the callbacks see: the round, the models, the clients and the assignment.

    ``assignment`` holds one model index per client (length ``len(clients)``); in ``assign``
    it is the previous round's (zeros in round 0), in ``evaluate`` the current one.
    ``rng`` is a generator seeded by ``(seed, round)`` for the server's own randomness.
    """

    round: int
    models: list
    clients: list
    participants: np.ndarray
    assignment: np.ndarray
    rng: np.random.Generator


@dataclass
class RoundRecord:
    """One round: who took part, the assignment used, and the evaluation metrics."""

    round: int
    participants: np.ndarray
    assignment: np.ndarray
    metrics: dict = field(default_factory=dict)


@dataclass
class FederatedRun:
    """The final models, the last assignment (one model index per client) and the history."""

    models: list
    assignment: np.ndarray
    history: list


def client_rng(seed: int, round_index: int, client_index: int) -> np.random.Generator:
    """The generator a client uses for local training in a round (order-independent)."""
    return np.random.default_rng([int(seed), int(round_index), int(client_index)])


def fedavg(params_list, weights) -> np.ndarray:
    """Weighted mean of parameter vectors (FedAvg); weights are normalized here."""
    stacked = np.stack([np.asarray(p, dtype=np.float64) for p in params_list])
    w = np.asarray(weights, dtype=np.float64)
    if w.shape != (stacked.shape[0],) or np.any(w < 0) or w.sum() <= 0:
        raise InputError(f"need one nonnegative weight per update with a positive sum; got "
                         f"{w.tolist()} for {stacked.shape[0]} updates")
    return (w[:, None] * stacked).sum(axis=0) / w.sum()


def sgd_trainer(model, *, epochs: int = 1, batch_size: int = 32,
                learning_rate: float = 0.1) -> Callable:
    """A ``local_train`` callback: :func:`omnifc.fl.sgd` on the client's training rows."""
    def local_train(params, client, rng):
        return sgd(model, params, client.x_train, client.y_train, epochs=epochs,
                   batch_size=batch_size, learning_rate=learning_rate, rng=rng)
    return local_train


def client_accuracies(model, models, assignment, clients, *, split: str = "test") -> np.ndarray:
    """Accuracy of each client's assigned model on its own ``split`` rows."""
    if split not in ("test", "train"):
        raise ParameterError(f"split must be 'test' or 'train', got {split!r}")
    out = []
    for i, c in enumerate(clients):
        x, y = (c.x_test, c.y_test) if split == "test" else (c.x_train, c.y_train)
        out.append(model.accuracy(models[int(assignment[i])], x, y))
    return np.array(out)


def mean_accuracy(model, models, assignment, clients, *, split: str = "test") -> float:
    """Accuracy over all clients' ``split`` rows pooled (clients weighted by row count)."""
    acc = client_accuracies(model, models, assignment, clients, split=split)
    sizes = np.array([(c.y_test if split == "test" else c.y_train).size for c in clients])
    return float((acc * sizes).sum() / max(sizes.sum(), 1))


def accuracy_evaluator(model, *, split: str = "test") -> Callable:
    """An ``evaluate`` callback returning ``{"accuracy": pooled test accuracy}``."""
    def evaluate(state: RoundState) -> dict:
        return {"accuracy": mean_accuracy(model, state.models, state.assignment,
                                          state.clients, split=split)}
    return evaluate


def ifca_assign(model) -> Callable:
    """IFCA (Ghosh et al. 2020): every client picks the model with the lowest training loss.

    Client-side and local: each client evaluates all current models on its own training
    rows and takes ``np.argmin`` (first index on ties). Every client is assigned (so the
    evaluation sees each client's choice), only participants train.
    """
    def assign(state: RoundState) -> np.ndarray:
        return np.array([int(np.argmin([model.loss(m, c.x_train, c.y_train)
                                        for m in state.models])) for c in state.clients])
    return assign


def fixed_assign(assignment) -> Callable:
    """An ``assign`` callback that always returns the same assignment (oracle, random, ...)."""
    fixed = np.asarray(assignment, dtype=np.int64).copy()

    def assign(state: RoundState) -> np.ndarray:
        return fixed.copy()
    return assign


def _participants(participation, n, rng, round_index):
    if participation is None or (not callable(participation) and participation >= 1.0):
        return np.arange(n)
    if callable(participation):
        chosen = np.asarray(participation(round_index, rng), dtype=np.int64)
    else:
        if not 0.0 < participation <= 1.0:
            raise ParameterError(f"participation must be in (0, 1], got {participation}")
        count = max(1, int(np.ceil(participation * n)))
        chosen = np.sort(rng.choice(n, size=count, replace=False))
    if chosen.size == 0 or chosen.min() < 0 or chosen.max() >= n:
        raise InputError(f"participants must be a nonempty subset of 0..{n - 1}, got "
                         f"{chosen.tolist()}")
    return np.unique(chosen)


def run_federated(clients, models, *, rounds: int, local_train: Callable,
                  aggregate: Callable = fedavg, assign: Callable | None = None,
                  evaluate: Callable | None = None, participation=None,
                  initial_assignment=None, seed: int = 0) -> FederatedRun:
    """Run ``rounds`` rounds of (clustered) federated training.

    Parameters
    ----------
    clients : list
        Client objects (:class:`omnifc.fl.Client` for the helpers; anything the callbacks
        understand otherwise); FedAvg weights are ``client.n_train`` when present, else 1.
    models : list
        Initial models (one per cluster; one for FedAvg).
    rounds : int
    local_train : callable ``(params, client, rng) -> params``
    aggregate : callable ``(list_of_params, weights) -> params``
        Default :func:`fedavg`.
    assign : callable ``(RoundState) -> assignment or (assignment, models)``, optional
        Called at the start of every round.
    evaluate : callable ``(RoundState) -> dict``, optional
        Called at the end of every round (after aggregation).
    participation : float in (0, 1] or callable ``(round, rng) -> indices``, optional
        Fraction of clients sampled each round (seeded), or a chooser; default all.
    initial_assignment : array-like, optional
        Model index per client before round 0 (default all 0).
    seed : int
        Seeds participant sampling, the server generator and the clients' generators.

    Returns
    -------
    FederatedRun
    """
    models = [np.array(m, copy=True) for m in models]
    n = len(clients)
    if n == 0 or not models:
        raise InputError(f"need at least one client and one model, got {n} and {len(models)}")
    if rounds < 0:
        raise ParameterError(f"rounds must be >= 0, got {rounds}")
    weights = np.array([float(getattr(c, "n_train", 1)) for c in clients])
    assignment = (np.zeros(n, dtype=np.int64) if initial_assignment is None
                  else np.asarray(initial_assignment, dtype=np.int64).copy())
    if assignment.shape != (n,):
        raise InputError(f"initial_assignment needs one entry per client ({n}), got shape "
                         f"{assignment.shape}")
    history = []
    for r in range(int(rounds)):
        server_rng = np.random.default_rng([int(seed), r, 2**31])
        participants = _participants(participation, n, server_rng, r)
        if assign is not None:
            out = assign(RoundState(r, models, clients, participants, assignment.copy(),
                                    server_rng))
            if isinstance(out, tuple):
                out, models = out
                models = [np.array(m, copy=True) for m in models]
            assignment = np.asarray(out, dtype=np.int64).copy()
            if assignment.shape != (n,) or assignment.min() < 0 or \
                    assignment.max() >= len(models):
                raise InputError(f"assign must return one model index in [0, {len(models)}) "
                                 f"per client ({n}); got {assignment.tolist()}")
        updates = {int(i): local_train(models[assignment[i]], clients[i], client_rng(seed, r, i))
                   for i in participants}
        for k in range(len(models)):
            members = [int(i) for i in participants if assignment[i] == k]
            if members:
                models[k] = aggregate([updates[i] for i in members], weights[members])
        metrics = {}
        if evaluate is not None:
            metrics = dict(evaluate(RoundState(r, models, clients, participants,
                                               assignment.copy(), server_rng)))
        logger.debug("round %d: %d participants, metrics %s", r, participants.size, metrics)
        history.append(RoundRecord(round=r, participants=participants,
                                   assignment=assignment.copy(), metrics=metrics))
    return FederatedRun(models=models, assignment=assignment, history=history)
