"""Federated clustering baselines that never see the distances (compared in the reproduction).

- :class:`KFed`: k-FED (Dennis, Li & Smith, ICML 2021), one-shot k-means from local centres.
- :func:`federated_mufc`: MUFC's clustering part (Pan et al., ICLR 2023).
- :func:`federated_fcm`: FFCM, federated fuzzy c-means (Stallmann & Wilbik 2022).
- :func:`fedsc_style`: a FedSC-style baseline (random Fourier features, spectral clustering).
"""

from ._fcm import federated_fcm
from ._fedsc import fedsc_style
from ._kfed import KFed
from ._mufc import federated_mufc

__all__ = ["KFed", "federated_mufc", "federated_fcm", "fedsc_style"]
