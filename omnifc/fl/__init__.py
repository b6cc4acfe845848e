"""A small federated training loop for the clustered-FL adapters (numpy, seconds per run).

- :func:`run_federated`: rounds of assign -> local train -> per-cluster aggregate -> evaluate,
  each step a callback (model-agnostic); :func:`fedavg`, :func:`sgd_trainer`,
  :func:`ifca_assign`, :func:`fixed_assign`, :func:`accuracy_evaluator`.
- Reference models on flat parameter vectors: :class:`SoftmaxRegression`, :class:`MLP`
  (one hidden ReLU layer), trained by minibatch :func:`sgd`.
- :func:`make_federated`: offline federated data sets from scikit-learn's bundled data
  (digits by default) with planted groups differing by label shift (Dirichlet), feature
  shift (rotation / permutation / noise), concept shift P(Y|X) (label permutation) or
  P(X|Y) shift; every draw seeded.

Examples
--------
Plain FedAvg, then per-cluster FedAvg with the planted groups as clusters (the oracle):

>>> from omnifc import fl
>>> data = fl.make_federated("digits", shift="concept", n_groups=2, clients_per_group=3,
...                          train_samples=120, test_samples=60, seed=0)
>>> model = fl.SoftmaxRegression(data.n_features, data.n_classes)
>>> train = fl.sgd_trainer(model, epochs=2, batch_size=20, learning_rate=0.5)
>>> evaluate = fl.accuracy_evaluator(model)
>>> fedavg = fl.run_federated(data.clients, [model.init(0)], rounds=8, local_train=train,
...                           evaluate=evaluate, seed=0)
>>> oracle = fl.run_federated(data.clients, [model.init(0)] * 2, rounds=8, local_train=train,
...                           assign=fl.fixed_assign(data.groups), evaluate=evaluate, seed=0)
>>> oracle.history[-1].metrics["accuracy"] > fedavg.history[-1].metrics["accuracy"] + 0.2
True
"""

from ._data import (FEATURE_TRANSFORMS, SHIFTS, Client, FederatedDataset, load_pool,
                    make_federated)
from ._loop import (FederatedRun, RoundRecord, RoundState, accuracy_evaluator,
                    client_accuracies, client_rng, fedavg, fixed_assign, ifca_assign,
                    mean_accuracy, run_federated, sgd_trainer)
from ._models import MLP, SoftmaxRegression, sgd

__all__ = ["run_federated", "RoundState", "RoundRecord", "FederatedRun", "fedavg",
           "sgd_trainer", "ifca_assign", "fixed_assign", "accuracy_evaluator",
           "client_accuracies", "mean_accuracy", "client_rng",
           "SoftmaxRegression", "MLP", "sgd",
           "make_federated", "load_pool", "Client", "FederatedDataset", "SHIFTS",
           "FEATURE_TRANSFORMS"]
