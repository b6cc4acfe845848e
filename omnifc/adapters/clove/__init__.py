"""CLoVE (ICML 2026, arXiv 2506.22427) on protected loss vectors.

Client side: client i evaluates every current model on its training data and keeps the
loss vector ``L_i = [loss(theta_1), ..., loss(theta_K_hat)]`` (raw mean loss; square root
only as an option), then sends it through the secure distance reconstruction.

Server side, each round (the official code, ``utils/algorithm_utils.py``):

1. K unknown: K = 2..min(#clients, K_ub) (K_ub = 15), ward linkage, silhouette; a larger K
   replaces the best only if its score exceeds 1.10 x the best (best starts at -1). When
   K_ub >= #clients the loss vectors are first repeated 5 times each (``np.repeat``), as in
   the code; here the repetition is done on D (exactly equivalent). This is
   ``k_rule="silhouette"``; omnifc's default is ``k_rule="calibrated"`` (docs/adapters.md).
2. ``KMeans(n_clusters=K, random_state=seed, n_init="auto")``, run on classical-MDS
   coordinates of D (isometric to the loss vectors).
3. Clusters sorted by their smallest client index; Hungarian matching
   (``scipy.optimize.linear_sum_assignment``) on ``C[k, j] = sum_{i in C_k} L_i[j]``.
   **C comes from a secure sum**, not from distances: each client learns its cluster index
   and one masked sum over all clients yields the K x K_hat cluster totals.
4. Unmatched models keep their parameters; each matched model is the FedAvg (weighted by
   training-set size) of its clients' local updates.
5. A client is stable when its model is unchanged over the last 3 rounds; when all are
   stable, assignments freeze and loss vectors are no longer computed.

What the coordinator learns beyond the distances
------------------------------------------------
- the squared distances between loss vectors (hence the loss vectors up to a rigid motion);
- the K x K_hat matrix of per-cluster loss totals ``C`` (a cluster of one client reveals that
  client's loss vector; any two clusterings that differ by one client reveal its vector by
  subtraction, so rounds with changing clusters leak more);
- as in every FL system, the clients' model updates used for FedAvg (this adapter does not
  protect model averaging) and the training-set sizes used as FedAvg weights.

Design rationale, measurements and the named deviations from the paper: docs/adapters.md
(CLoVE). ``_simulation`` holds the federated loop, baselines and synthetic data; K selection
lives in :mod:`omnifc.adapters._k_selection`.

Examples
--------
>>> import numpy as np
>>> from omnifc.adapters import clove
>>> clients, truth, _ = clove.linear_mixture(delta=1.0, train_points=100, seed=0)
>>> start = clove.random_unit_models(5, 20, seed=1)
>>> run = clove.run_clove(clients, start, n_clusters=5, rounds=2, secure=False)
>>> len(run.assignments), run.assignments[-1].shape
(2, (25,))
"""

from .._k_selection import choose_k, choose_k_gap
from ._paper import (cluster_clients, cluster_cost, COORDINATOR_LEARNS, DEFAULT_MAX_LOSS,
                     DEFAULT_SCALE_BITS, fedavg, is_stable, LOSS_TRANSFORMS, loss_vector,
                     match_clusters, mse_loss, sort_clusters)
from ._simulation import (adam_trainer, CLASSIFIER_MAX_LOSS, classifier_trainer, CloveFLRun,
                          CloveRun, DEFAULT_KMEANS_INITS, DEFAULT_RESTARTS, DEFAULT_TRANSFORM,
                          local_update, probe_models, run_clove, run_clove_fl, run_ifca)
from ._synthetic import linear_mixture, random_unit_models
from ._synthetic import true_models  # noqa: F401 (module attributes before the split)

#: The paper's API: the client embedding and the server algorithm. The other names above
#: (simulation, baselines, synthetic data, constants) stay importable from here.
__all__ = ["COORDINATOR_LEARNS", "loss_vector", "mse_loss", "choose_k", "choose_k_gap",
           "cluster_clients", "cluster_cost", "match_clusters", "fedavg", "is_stable"]
