"""FLUX (NeurIPS 2025, arXiv 2511.22305) on protected distribution descriptors.

Client side (official code, ``flux/``, ``public/models.py``): latents from the shared
encoder (the global model; any encoder's output is accepted) are projected by a shared,
data-independent PCA fitted on 200 points of Uniform[0, M]^D with seed 1 (a public
constant), ``l`` components (``l`` = number of classes by default). The paper's descriptor
(``form="paper"``) is

    [mu_x, sigma_x, mu_1, ..., mu_U, sigma_1, ..., sigma_U]

with sigma the per-dimension population standard deviation (``np.std``, ddof 0) and
classes with fewer than 2 samples filled with -1: all class means first, then all class
stds; 2(U+1) blocks of l entries. omnifc's weighted form (``form="weighted"``, *our choice*)
keeps the layout and the prefix and weights each class block by the square root of the
class's share of the client's rows, ``sqrt(f_c) (mu_c - mu_x)`` and ``sqrt(f_c) sigma_c``
(zeros for classes with < 2 samples): the squared blocks decompose the client's variance, so
the label mix (what label shift changes) enters every class block and rare classes weigh
little (see :func:`descriptor` and docs/adapters.md for the measured reason).
``form="weighted_all"`` (**the default**, issue 24) also keeps 1-row classes (mean block
``sqrt(1/n) (z - mu_x)``, std block 0), so the decomposition is exact for any class mix.

Server side (``run_flux``'s default, :data:`DEFAULT_RECIPE`, since issue 24's
twenty-seventh pass :data:`SPLIT_UNION_RECIPE`: the noise-whitened D read from the D of
every client's descriptor and its descriptors without each of 10 random groups of its rows,
``normalization="split"``, and the min-p of the top-axis index and Ward's widest gap,
``k_rule="calibrated_axis_or_gap"``, at 0.01 with B = 199; where that rule answers one
cluster among 4 to 6 clients, the spiked-null test on the same split D at the same level,
``second_test="spiked"``, :func:`cluster_split_clients`; :data:`SPLIT_GROUPS_RECIPE`
without the second test from the twenty-second pass, :data:`SPLIT_MIN_P_RECIPE`, the
same with two halves, from the fourteenth pass; :data:`PREVIOUS_DEFAULT` before it):
optional normalization, automatic K
from D (:func:`cluster_clients`): omnifc's calibrated rule by default for a D alone
(``k_rule="calibrated"``,
:func:`calibrated_k`: Ward's widest merge-height gap tested against Gaussian reference
federations of the same size fitted to D, p <= 0.05, evidence in ``FluxRun.decision``),
two options of the same test on the top principal axis (``"calibrated_axis"``: the 2-means
cluster index against Gaussian references; ``"calibrated_unimodal"``: the same against
references whose top axis has the data's own least-smooth unimodal shape;
``"calibrated_denoised"``: the 2-means cluster index on the broken-stick axes), the previous
Ward gap rule (``k_rule="ward"``, :func:`ward_gap`: Ward's tree on D cut at the widest
relative gap of its merge heights above ``WARD_MIN_GAP``) or FLUX's adaptive DBSCAN
(``k_rule="dbscan"``, ``min_samples = 2``; every noise point becomes its own cluster) with
eps from omnifc's gap rule (:func:`gap_eps`: the widest relative gap of the MST edge
lengths, the previous default) or the paper's knee (``eps_rule="knee"``: the Kneedle knee,
convex/increasing, of the sorted distances of each client to its nearest other client,
times ``eps_scaling``),
centroids, and label-free test-time assignment of a new client to the nearest centroid
using only the ``[mu_x, sigma_x]`` prefix, from distances:
``||x - c_A||^2 = mean_{j in A} D_xj - sum_{j,k in A} D_jk / (2 |A|^2)`` (default), or with
omnifc's calibrated rule (``rule="calibrated"``, :func:`assign_with_evidence`: a full conformal
p-value per cluster, the global model when every p <= 0.05). The new client's
descriptor is protected too: it joins a reconstruction of the prefix blocks.

Normalization: what each option reveals
---------------------------------------
The paper min-max scales each block with the range over all clients and coordinates;
distances cannot give ranges.

- ``"none"`` (``block_distances``' default, ``run_flux``'s before the fourteenth pass): one
  reconstruction of the unscaled descriptor; reveals D only.
- ``"block_neighbour"`` (distance-only, *our choice*): one reconstruction per block; block b
  is divided by its noise scale, the median over clients of the squared distance to the
  nearest other client in that block (:func:`neighbour_scales`). Reveals the per-block
  matrices, like ``"block_diameter"``.
- ``"block_diameter"`` (distance-only, the previous default): one reconstruction per block
  gives ``D_b``; the combined distance is ``sum_b D_b / diam_b^2`` with
  ``diam_b^2 = max_ij D_b`` (the block's largest squared distance replaces its squared
  range). The coordinator learns the 2(U+1) per-block squared-distance matrices (each
  block's geometry separately: more than the total D, but no coordinate, range or offset).
- ``"ranges"`` (the paper's min-max scaling, exactly): each client reveals its per-block
  minimum and maximum; the coordinator broadcasts ``r_b = max_b - min_b``; clients divide
  block b by ``r_b`` (offsets cancel in distances) and one reconstruction gives the paper's
  scaled D. The coordinator learns every client's per-block min and max (2 x 2(U+1) numbers
  per client; with a secure max/min only the global ranges would be revealed).
- ``"whitened"`` (an option): every descriptor whitened by the clients' pooled jackknife
  noise (pooled by secure sum); the coordinator learns that pooled noise and must follow
  the protocol (:mod:`omnifc.adapters.flux._whitening`).
- ``"split"`` (``run_flux``'s default): each client also sends its descriptors without each
  of k random groups of its rows (``split_groups``, 10 by default; 2: two halves); one
  reconstruction of the (k + 1)n rows, from which the coordinator alone reads the noise and
  whitens (:mod:`omnifc.adapters.flux._split_half`). It learns the D of the (k + 1)n rows
  (per client, the distances among its descriptor and those k: how leaving out each
  group moves it), nothing else; a coordinator that lies only spoils its own clustering.

Design rationale, measurements and the named deviations from the paper: docs/adapters.md
(FLUX). ``_secure`` holds the secure path, ``_simulation`` the federated loop, baselines and
synthetic data; K selection lives in :mod:`omnifc.adapters._k_selection`.

Examples
--------
>>> import numpy as np
>>> from omnifc.adapters import flux
>>> x = np.array([[0.0], [0.1], [0.2], [5.0], [5.1], [5.2]])
>>> flux.adaptive_dbscan((x - x.T) ** 2).labels.tolist()
[0, 0, 0, 1, 1, 1]
"""

from .._k_selection import (DbscanResult, gap_eps, MIN_GAP, ward_gap, WARD_MIN_GAP)
from ._assign import (ASSIGN_RULES, Assignment, AssignDecision, assign_new_clients,
                      assign_with_evidence, conformal_p_values, GLOBAL)
from ._paper import (adaptive_dbscan, cluster_clients, COORDINATOR_LEARNS,
                     DEFAULT_DESCRIPTOR_FORM, DEFAULT_K_RULE, descriptor, descriptor_bound,
                     DESCRIPTOR_FORMS, EPS_RULES, K_RULES,
                     flux_components, FLUX_MIN_COMPONENTS, NORMALIZATIONS, prefix_row,
                     PREVIOUS_DEFAULT, run_k_level, RUN_K_ALPHA, RUN_K_REFERENCES,
                     shared_projection, SPLIT_GROUPS_RECIPE, SPLIT_HALF_RECIPE, SPLIT_MIN_P_RECIPE,
                     WHITENED_RECIPE, DEFAULT_RECIPE, DEFAULT_SPLIT_GROUPS, SPLIT_UNION_RECIPE)
from ._split_half import (cluster_split_clients, SECOND_TESTS, second_test_for,
                          split_descriptors, split_rows, split_whitened_distances)
from ._spiked_null import SPIKED_MAX_CLIENTS, spiked_null_test, SpikedNullTest
from .._calibrated_k import calibrated_k, KDecision  # noqa: F401
from ._secure import (block_distances, block_ranges, block_slices, combine_blocks,
                      neighbour_scales, prefix_distances, split_block_distances)
from ._whitening import (leave_one_out_descriptors, NOISE_BOUND, noise_contribution,
                         noise_whitening, NoiseWhitening, oas_shrinkage, pool_noise,
                         whitening_of_clients)
from ._simulation import (client_descriptors, flux_baselines, FluxRun, run_flux, shift_scenario,
                          SHIFTS)
# module attributes before the split
from ._simulation import ACTIVATION_MARGIN, CLUSTER_ROUNDS, WARMUP_ROUNDS  # noqa: F401
from .._k_selection import GAP_SEARCH_FROM  # noqa: F401 (module attributes before the split)

#: The paper's API: the client embedding and the server algorithm. The other names above
#: (simulation, baselines, synthetic data, constants) stay importable from here.
__all__ = ["COORDINATOR_LEARNS", "shared_projection", "descriptor", "descriptor_bound",
           "block_distances", "cluster_clients", "calibrated_k", "ward_gap", "adaptive_dbscan",
           "prefix_distances", "assign_new_clients", "assign_with_evidence",
           "conformal_p_values", "AssignDecision", "Assignment", "ASSIGN_RULES", "GLOBAL",
           "noise_contribution", "pool_noise", "noise_whitening", "NoiseWhitening",
           "WHITENED_RECIPE", "split_descriptors", "split_rows", "split_whitened_distances",
           "SPLIT_GROUPS_RECIPE", "SPLIT_HALF_RECIPE", "SPLIT_MIN_P_RECIPE", "PREVIOUS_DEFAULT",
           "DEFAULT_RECIPE", "DEFAULT_SPLIT_GROUPS", "SPLIT_UNION_RECIPE",
           "split_block_distances", "cluster_split_clients", "SECOND_TESTS",
           "second_test_for", "spiked_null_test", "SpikedNullTest", "SPIKED_MAX_CLIENTS",
           "prefix_row",
           "run_k_level"]
