"""FMCL (Ali & Brattain, 2026, arXiv 2604.27510) on protected class-aware signatures.

Client side: from a frozen encoder the caller supplies, the signature is
``S_i = {(mu_ic, w_ic)}``: the mean embedding of each class c and its weight
``w_ic = n_ic / n_i``.

FMCL distance (Algorithm 3, as this module implements it)::

    d_c      = 1 - cos(mu_ic, mu_jc)                          (shared classes)
    m_c      = min(w_ic, w_jc),     Omega_ij = sum_c m_c      (= 1 - TV(w_i, w_j))
    Dbar_ij  = sum_c m_c d_c / (Omega_ij + eps)               (eps = 1e-3)
    D_ij     = Dbar_ij * g(Omega_ij),   g(Omega) = min(Omega^-alpha, beta)

with ``alpha = 1`` and ``beta = 100`` (the reference notes read beta as a cap on the
inverse-overlap factor; the exact form is unverified, this is omnifc's documented choice).
Pairs with no shared class (Omega = 0) get ``D_big = min(2 P95, P99)`` of the finite
off-diagonal distances; the diagonal is 0. The cosine's own ``+eps`` in the denominator is
dropped (negligible for non-zero means).

Secure path (neither embeddings nor class weights are revealed)
----------------------------------------------------------------
Each client rounds its weights to multiples of 1/q with largest-remainder rounding
(``k_ic`` integers summing to q; ``|k_ic/q - w_ic| < 1/q``), unit-normalizes its class
means, and protects two vectors: the thermometer code ``t_i = concat_c t(k_ic)`` with
``t(k) = [1]*k + [0]*(q-k)`` and ``z_i = concat_c t(k_ic) (x) mu_hat_ic`` (dimension C q d).
With ``D^t = ||t_i - t_j||^2 / q`` and ``D^z = ||z_i - z_j||^2 / q``::

    sum_c m_c (1 - cos_c) = (D^z - D^t) / 2,      Omega = 1 - D^t / 2

exactly for the rounded weights (and unit-norm means); the error bound against the exact
weights and the exact resolution are in docs/adapters.md. For any sample counts the weights
are carried exactly by :func:`exact_fmcl_distances` (the default of :func:`run_federated_fmcl`):

- the level-set code of :func:`level_code`: one slot per weight any client can have (the
  levels ``k L / n_i``, L = lcm of the sample counts), each slot's integer parts squaring
  to the gap to the previous level, so ``<t(v), t(v')> = min(v, v')`` and
  ``<t_i, t_j> = L Omega_ij``;
- when L is too large for 63-bit distances (counts 101, 103, ..., 131: L = 2^47.6), the
  grouped code of :func:`grouped_level_code`: the distinct counts in groups G_g, one level
  code per pair of groups (scale ``L_gh = lcm(G_g u G_h)``); a client of group g fills the
  blocks that contain g. Two clients of groups g != h share one block, two of one group g
  share all of g's blocks, so ``<t_i, t_j> = S_ij Omega_ij`` with the public scale
  ``S_ij = L_gh`` or ``F_g = sum_k L_gk``. The coordinator divides by ``S_ij`` in exact
  fractions. :func:`exact_code` picks the code.

K is chosen by :func:`choose_clusters` (rules ``"additive"``, the default since issue 24,
``"tested"``, the default before, ``"silhouette"``, ``"calibrated"``, ``"paper"``; ``"additive"`` and its client-effect null
live in ``_one_cluster``, the others in :mod:`omnifc.adapters._k_selection`).

What the coordinator learns beyond the distances
------------------------------------------------
The two squared-distance matrices D^z and D^t with the public zero anchor, i.e. the Gram
matrices: per pair the class overlap Omega_ij (D^t alone is the L1 distance between the
class-weight vectors) and the overlap-weighted cosine sum ``sum_c m_c cos_q,c``; per client
``sum_c w_ic |mu_q,ic|^2`` (the diagonal of G^z: 1 up to the 2^-s quantization of its own
unit means). No weight, mean or class count. On the exact path (the default) every
client's sample count is public: the code is built from them, and FedAvg's weights
(``n_train``) give them to the coordinator anyway. The rounded path (``resolution=q``)
reveals no count.

Design rationale, measurements and the named deviations from the paper: docs/adapters.md
(FMCL). ``_secure`` holds the secure path, ``_simulation`` the federated loop, baselines and
synthetic data; K selection lives in :mod:`omnifc.adapters._k_selection`.

Examples
--------
>>> import numpy as np
>>> from omnifc.adapters import fmcl
>>> w = np.array([[0.5, 0.5], [0.5, 0.5], [1.0, 0.0]])
>>> mu = np.array([[[1.0, 0], [0, 1]], [[1.0, 0], [0, 1]], [[0, 1.0], [0, 0]]])
>>> fmcl.fmcl_distances(mu, w).round(3).tolist()
[[0.0, 0.0, 1.996], [0.0, 0.0, 1.996], [1.996, 1.996, 0.0]]
"""

from .._k_selection import (coefficient_of_variation, k_window, MAX_CLUSTERS, OneClusterTest,
                            OVERLAP_STRATA, silhouette_profile)
from ._one_cluster import (additive_fit, AdditiveFit, choose_clusters, class_mix_distances,
                           class_mix_test, DEFAULT_RULE, MIX_ALPHAS, NULLS, one_cluster_test,
                           RULES, split_silhouette)
from ._paper import (check_level_counts, class_counts, GroupedLevelCode, group_counts,
                     grouped_level_code, LevelCode, level_code, level_rows, MAX_LEVEL_SCALE,
                     MAX_LEVELS, sum_of_squares)
from ._paper import (COORDINATOR_LEARNS, DEFAULT_RESOLUTION, exact_resolution, fill_missing,
                     fmcl_distances, fmcl_from_thermometer, fmcl_server, FmclResult, geodesic_fill,
                     round_weights, signature, thermometer_rows)
from ._secure import (EXACT_SCALE_BITS, exact_code, exact_fmcl_distances, exact_scale_bits,
                      GROUP_LCM_LIMITS)
from ._secure import (class_overlap, fmcl_from_anchored, quantized_fmcl_distances,
                      secure_thermometer_distances, thermometer_error_bound)
from ._simulation import (fixed_encoder, kmeans_on_mean_embeddings, run_federated_fmcl, SHIFTS,
                          synthetic_domains)
from ._paper import ALPHA, BETA, EPS  # noqa: F401 (module attributes before the split)
from .._k_selection import CV_THRESHOLDS, NULL_ALPHA, NULL_PERMUTATIONS  # noqa: F401 (module attributes before the split)

#: The paper's API: the client embedding and the server algorithm. The other names above
#: (simulation, baselines, synthetic data, constants) stay importable from here.
__all__ = ["COORDINATOR_LEARNS", "signature", "fmcl_distances", "fmcl_server", "FmclResult",
           "choose_clusters", "one_cluster_test", "secure_thermometer_distances",
           "exact_resolution", "thermometer_rows", "class_counts", "level_code",
           "exact_fmcl_distances", "class_mix_distances", "class_mix_test", "MIX_ALPHAS"]
