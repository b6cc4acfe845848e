"""Client2Vec (ICCV 2025, arXiv 2405.16233) on protected client indices.

Client side: from per-sample embeddings the caller supplies (the paper: a CLIP image
embedding passed through its DSA-IGN network for the feature part, the CLIP text embedding
of the label for the label part; any encoder's output is accepted), the client index is
``beta_i = mean over samples of [u^f; u^l]``. The client L2-normalizes each part and
protects ``x_i = [sqrt(a) beta^f / |beta^f|; sqrt(b) beta^l / |beta^l|]`` so that

    a cos_f(i, j) + b cos_l(i, j) = (a + b) - D_ij / 2.

Server side: similarity-driven client sampling and MWU aggregation weights:

    p_i^t  = exp(S(i, C^{t-1}) / tau) / sum_j exp(S(j, C^{t-1}) / tau)
    w_i^t  ∝ q_i exp((1 / lambda_1) sum_{tau'=1..t} gamma^(t - tau') S(i, C^{tau'}))

What the coordinator learns beyond the distances
------------------------------------------------
Nothing beyond D (hence ``a cos_f + b cos_l`` for every pair, i.e. the normalized indices
up to a rigid motion). The data-size weights ``q_i`` of MWU are metadata the clients
report, as in the paper. Client2Vec itself does not cluster; :func:`cluster_indices` is an
**omnifc extension** (k-means on the protected indices).

Design rationale, measurements and the named deviations from the paper: docs/adapters.md
(Client2Vec). ``_simulation`` holds the federated loop, baselines and synthetic data; K
selection lives in :mod:`omnifc.adapters._k_selection`.

Examples
--------
>>> import numpy as np
>>> from omnifc.adapters import client2vec
>>> d = np.array([[0.0, 0.0, 8.0], [0.0, 0.0, 8.0], [8.0, 8.0, 0.0]])
>>> s = client2vec.pair_similarity(d)
>>> float(s[0, 1]), float(s[0, 2])
(2.0, -2.0)
>>> client2vec.sampling_probabilities(s, previous=[0]).round(3).tolist()
[0.117, 0.867, 0.016]
"""

from ._paper import (client_index, cluster_indices, COORDINATOR_LEARNS, DEFAULT_GAMMA,
                     DEFAULT_LAMBDA, DEFAULT_TAU, direct_pair_similarity, mwu_weights,
                     pair_similarity, protected_vector, protection_bound, sample_clients,
                     sampling_probabilities, set_similarity)
from ._simulation import (DEFAULT_MWU, DEFAULT_REGULARIZER, DEFAULT_SAMPLING,  # noqa: F401
                          resolve_uses, USES)  # (issue 24: no use on by default)
from ._simulation import (DEFAULT_LAMBDA_KD, DEFAULT_LAMBDA_ORTH, fit_index_network, IndexNetwork,
                          label_embeddings, network_index, regularized_loss_and_gradient,
                          regularized_trainer, run_federated_client2vec, synthetic_domains)

#: The paper's API: the client embedding and the server algorithm. The other names above
#: (simulation, baselines, synthetic data, constants) stay importable from here.
__all__ = ["COORDINATOR_LEARNS", "client_index", "protected_vector", "protection_bound",
           "pair_similarity", "set_similarity", "sampling_probabilities", "mwu_weights",
           "sample_clients", "cluster_indices"]
