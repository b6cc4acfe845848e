"""Small statistical helpers shared by the checks (stated tests, stated error rates)."""

from __future__ import annotations

import numpy as np
from scipy import stats

__all__ = ["chi2_homogeneity", "chi2_uniform", "FAMILY_ALPHA"]

#: The family-wise false-positive rate of every check's statistical tests (Bonferroni).
FAMILY_ALPHA = 1e-3


def chi2_homogeneity(first: np.ndarray, second: np.ndarray, cells: int) -> dict:
    """Pearson chi-square test that two samples of cell indices in [0, cells) share a law.

    Cells empty in both samples are dropped (they carry no information).
    """
    a = np.bincount(np.asarray(first, dtype=np.int64).ravel(), minlength=cells)
    b = np.bincount(np.asarray(second, dtype=np.int64).ravel(), minlength=cells)
    keep = (a + b) > 0
    table = np.vstack([a[keep], b[keep]])
    if table.shape[1] < 2:
        # Both samples sit in a single cell: identical degenerate laws.
        return {"statistic": 0.0, "dof": 0, "p_value": 1.0,
                "samples": [int(a.sum()), int(b.sum())], "cells": int(cells)}
    statistic, p_value, dof, _ = stats.chi2_contingency(table, correction=False)
    return {"statistic": float(statistic), "dof": int(dof), "p_value": float(p_value),
            "samples": [int(a.sum()), int(b.sum())], "cells": int(cells)}


def chi2_uniform(values: np.ndarray, cells: int) -> dict:
    """Pearson chi-square goodness-of-fit of cell indices in [0, cells) to the uniform law."""
    counts = np.bincount(np.asarray(values, dtype=np.int64).ravel(), minlength=cells)
    statistic, p_value = stats.chisquare(counts)
    return {"statistic": float(statistic), "dof": int(cells - 1), "p_value": float(p_value),
            "samples": int(counts.sum()), "cells": int(cells)}
