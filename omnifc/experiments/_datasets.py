"""Built-in offline data sets with public feature ranges, for demos and reproductions.

The clip bound R must be public, never computed from pooled private data. For these public
data sets it is taken from their documentation: iris measurements lie in [0, 8) cm, digit
pixels in [0, 16]. Wine and breast-cancer features have very different scales, so each
feature is divided by its documented maximum (the range printed in the data set's
description), which puts all of them in [0, 1].

>>> from omnifc import load_dataset
>>> data = load_dataset("iris")
>>> data.features.shape, data.bound, data.nonnegative
((150, 4), 8.0, True)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from finite_field import ParameterError

__all__ = ["Dataset", "load_dataset", "DATASETS"]

DATASETS = ("iris", "wine", "breast_cancer", "digits")


@dataclass(frozen=True)
class Dataset:
    """A labelled data set with its public quantization range."""

    name: str
    features: np.ndarray
    labels: np.ndarray
    bound: float
    nonnegative: bool

    @property
    def n_classes(self) -> int:
        return int(np.unique(self.labels).size)


def load_dataset(name: str) -> Dataset:
    """Load one of :data:`DATASETS` (bundled with scikit-learn; no download)."""
    from sklearn import datasets

    loaders = {"iris": datasets.load_iris, "wine": datasets.load_wine,
               "breast_cancer": datasets.load_breast_cancer, "digits": datasets.load_digits}
    if name not in loaders:
        raise ParameterError(f"unknown data set {name!r}; choose one of {list(DATASETS)}")
    bunch = loaders[name]()
    x = np.asarray(bunch.data, dtype=np.float64)
    y = np.asarray(bunch.target)
    if name == "iris":
        return Dataset(name, x, y, bound=8.0, nonnegative=True)
    if name == "digits":
        return Dataset(name, x, y, bound=16.0, nonnegative=True)
    # Documented per-feature maxima of a public data set (see its DESCR): a public scale.
    return Dataset(name, x / x.max(axis=0), y, bound=1.0, nonnegative=True)
