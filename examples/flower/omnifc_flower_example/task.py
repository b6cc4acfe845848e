"""The federated task: synthetic regression data in three planted groups, a numpy model.

Node ``k`` of the federation (``partition-id`` in simulation, ``omnifc-party = "org-k"`` in a
deployment) holds samples of group ``k % 3``: its features come from the group's
distribution and its targets from the group's linear model, so one global model fits no
group well and one model per group fits each. Replace ``load_data``, ``descriptor``,
``train`` and ``evaluate`` with your own (a PyTorch model: see docs/flower.md).
"""

from __future__ import annotations

import numpy as np

GROUPS = 3
FEATURES = 2
CENTERS = np.array([[3.0, 0.0], [0.0, 3.0], [-3.0, -3.0]])
SPREADS = np.array([0.5, 1.0, 1.5])
WEIGHTS = np.array([[1.0, -2.0], [-1.5, 0.5], [2.0, 1.0]])
LEARNING_RATE = 0.02
LOCAL_STEPS = 5


def load_data(node: int, samples: int = 40):
    """Node ``node``'s private samples (x, y)."""
    group = node % GROUPS
    rng = np.random.default_rng(1000 + node)
    x = CENTERS[group] + SPREADS[group] * rng.normal(size=(samples, FEATURES))
    y = x @ WEIGHTS[group] + rng.normal(0, 0.05, samples)
    return x, y


def descriptor(x) -> np.ndarray:
    """The client embedding sent through omnifc: per-feature mean and standard deviation of
    the local features (FLUX's descriptor prefix), one row of 2 * FEATURES values."""
    return np.concatenate([x.mean(axis=0), x.std(axis=0)])[None, :]


def train(w, x, y) -> np.ndarray:
    """A few full-batch gradient steps on the mean squared error."""
    w = np.array(w, dtype=np.float64)
    for _ in range(LOCAL_STEPS):
        w = w - LEARNING_RATE * 2.0 / len(y) * x.T @ (x @ w - y)
    return w


def evaluate(w, x, y) -> float:
    return float(np.mean((x @ np.asarray(w) - y) ** 2))
