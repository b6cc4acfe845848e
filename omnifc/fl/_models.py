"""Numpy reference models for the federated loop: softmax regression and a one-hidden-layer MLP.

A model here is an *architecture* object (shapes, no state) plus a flat float64 parameter
vector. Flat vectors make every aggregation rule a weighted mean of rows and make "identical
models" a plain ``np.array_equal``. Training is minibatch SGD on the mean cross-entropy
(:func:`sgd`), with the batch order drawn from a caller-supplied generator, so a run is a
deterministic function of its seeds.

Both models expose the same methods:

- ``init(seed)``: a parameter vector (small Gaussian weights, zero biases);
- ``logits(params, x)``, ``predict(params, x)``, ``loss(params, x, y)`` (mean cross-entropy),
  ``accuracy(params, x, y)``;
- ``loss_and_gradient(params, x, y)``;
- ``latents(params, x)``: the representation an encoder-based method (FLUX) reads: the
  hidden ReLU activations for the MLP, the input itself for softmax regression.

Examples
--------
>>> import numpy as np
>>> from omnifc.fl import MLP, sgd
>>> rng = np.random.default_rng(0)
>>> x = rng.normal(size=(200, 4)); y = (x[:, 0] > 0).astype(int)
>>> model = MLP(4, 8, 2)
>>> params = sgd(model, model.init(seed=0), x, y, epochs=20, batch_size=20,
...              learning_rate=0.5, rng=np.random.default_rng(1))
>>> model.accuracy(params, x, y) > 0.95
True
"""

from __future__ import annotations

import numpy as np

from finite_field import InputError, ParameterError

__all__ = ["SoftmaxRegression", "MLP", "sgd"]


def _log_softmax(z: np.ndarray) -> np.ndarray:
    z = z - z.max(axis=1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=1, keepdims=True))


def _cross_entropy(logits: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray]:
    """Mean cross-entropy of ``logits`` against labels ``y`` and its gradient in the logits."""
    logp = _log_softmax(logits)
    n = y.size
    delta = np.exp(logp)
    delta[np.arange(n), y] -= 1.0
    return float(-logp[np.arange(n), y].mean()), delta / n


def _check_xy(x, y, n_features: int):
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.int64)
    if x.ndim != 2 or x.shape[1] != n_features or y.shape != (x.shape[0],):
        raise InputError(f"expected x of shape (n, {n_features}) and y of shape (n,), got "
                         f"{x.shape} and {y.shape}")
    return x, y


class _Classifier:
    n_features: int
    n_classes: int
    n_params: int

    def logits(self, params, x):   # pragma: no cover - abstract
        raise NotImplementedError

    def predict(self, params, x) -> np.ndarray:
        """Predicted class per row."""
        return np.argmax(self.logits(params, x), axis=1)

    def loss(self, params, x, y) -> float:
        """Mean cross-entropy."""
        x, y = _check_xy(x, y, self.n_features)
        if x.shape[0] == 0:
            return 0.0
        logp = _log_softmax(self.logits(params, x))
        return float(-logp[np.arange(y.size), y].mean())

    def accuracy(self, params, x, y) -> float:
        """Fraction of rows predicted correctly (1.0 on an empty set)."""
        x, y = _check_xy(x, y, self.n_features)
        if x.shape[0] == 0:
            return 1.0
        return float(np.mean(self.predict(params, x) == y))

    def _check_params(self, params) -> np.ndarray:
        p = np.asarray(params, dtype=np.float64)
        if p.shape != (self.n_params,):
            raise InputError(f"expected a parameter vector of shape ({self.n_params},), got "
                             f"{p.shape}")
        return p


class SoftmaxRegression(_Classifier):
    """Multinomial logistic regression ``softmax(x W + b)``; parameters ``[W.ravel(), b]``.

    Parameters
    ----------
    n_features, n_classes : int
    weight_decay : float
        L2 penalty ``weight_decay/2 ||W||^2`` added to the training loss gradient (not to
        :meth:`loss`, which reports the plain cross-entropy).
    """

    def __init__(self, n_features: int, n_classes: int, *, weight_decay: float = 0.0):
        if n_features < 1 or n_classes < 2:
            raise ParameterError(f"need n_features >= 1 and n_classes >= 2, got {n_features}, "
                                 f"{n_classes}")
        self.n_features, self.n_classes = int(n_features), int(n_classes)
        self.weight_decay = float(weight_decay)
        self.n_params = self.n_features * self.n_classes + self.n_classes

    def _unpack(self, params):
        p = self._check_params(params)
        cut = self.n_features * self.n_classes
        return p[:cut].reshape(self.n_features, self.n_classes), p[cut:]

    def init(self, seed: int = 0) -> np.ndarray:
        """Weights N(0, 0.01^2), zero biases."""
        rng = np.random.default_rng(seed)
        w = 0.01 * rng.standard_normal((self.n_features, self.n_classes))
        return np.concatenate([w.ravel(), np.zeros(self.n_classes)])

    def logits(self, params, x) -> np.ndarray:
        w, b = self._unpack(params)
        return np.asarray(x, dtype=np.float64) @ w + b

    def latents(self, params, x) -> np.ndarray:
        """The input itself (softmax regression has no hidden layer)."""
        return np.asarray(x, dtype=np.float64)

    def loss_and_gradient(self, params, x, y):
        """Mean cross-entropy and its gradient (plus the weight decay term)."""
        w, b = self._unpack(params)
        x, y = _check_xy(x, y, self.n_features)
        loss, delta = _cross_entropy(x @ w + b, y)
        gw = x.T @ delta + self.weight_decay * w
        return loss, np.concatenate([gw.ravel(), delta.sum(axis=0)])


class MLP(_Classifier):
    """One hidden ReLU layer: ``softmax(relu(x W1 + b1) W2 + b2)``.

    Parameters are ``[W1.ravel(), b1, W2.ravel(), b2]``; weights start He-scaled
    (``N(0, 2/fan_in)``), biases at 0.
    """

    def __init__(self, n_features: int, n_hidden: int, n_classes: int, *,
                 weight_decay: float = 0.0):
        if n_features < 1 or n_hidden < 1 or n_classes < 2:
            raise ParameterError(f"need n_features, n_hidden >= 1 and n_classes >= 2, got "
                                 f"{n_features}, {n_hidden}, {n_classes}")
        self.n_features, self.n_hidden = int(n_features), int(n_hidden)
        self.n_classes = int(n_classes)
        self.weight_decay = float(weight_decay)
        f, h, c = self.n_features, self.n_hidden, self.n_classes
        self._cuts = np.cumsum([f * h, h, h * c, c])
        self.n_params = int(self._cuts[-1])

    def _unpack(self, params):
        p = self._check_params(params)
        a, b, c, _ = self._cuts
        return (p[:a].reshape(self.n_features, self.n_hidden), p[a:b],
                p[b:c].reshape(self.n_hidden, self.n_classes), p[c:])

    def init(self, seed: int = 0) -> np.ndarray:
        """He-scaled Gaussian weights, zero biases."""
        rng = np.random.default_rng(seed)
        w1 = rng.standard_normal((self.n_features, self.n_hidden)) * np.sqrt(2.0 / self.n_features)
        w2 = rng.standard_normal((self.n_hidden, self.n_classes)) * np.sqrt(2.0 / self.n_hidden)
        return np.concatenate([w1.ravel(), np.zeros(self.n_hidden), w2.ravel(),
                               np.zeros(self.n_classes)])

    def latents(self, params, x) -> np.ndarray:
        """Hidden activations ``relu(x W1 + b1)`` (nonnegative)."""
        w1, b1, _, _ = self._unpack(params)
        return np.maximum(np.asarray(x, dtype=np.float64) @ w1 + b1, 0.0)

    def logits(self, params, x) -> np.ndarray:
        _, _, w2, b2 = self._unpack(params)
        return self.latents(params, x) @ w2 + b2

    def loss_and_gradient(self, params, x, y):
        """Mean cross-entropy and its gradient by backpropagation (plus weight decay)."""
        w1, b1, w2, b2 = self._unpack(params)
        x, y = _check_xy(x, y, self.n_features)
        pre = x @ w1 + b1
        hidden = np.maximum(pre, 0.0)
        loss, delta = _cross_entropy(hidden @ w2 + b2, y)
        gw2 = hidden.T @ delta + self.weight_decay * w2
        back = (delta @ w2.T) * (pre > 0)
        gw1 = x.T @ back + self.weight_decay * w1
        return loss, np.concatenate([gw1.ravel(), back.sum(axis=0), gw2.ravel(),
                                     delta.sum(axis=0)])


def sgd(model, params, x, y, *, epochs: int = 1, batch_size: int = 32,
        learning_rate: float = 0.1, rng=None) -> np.ndarray:
    """Minibatch SGD on the mean cross-entropy; returns new parameters (input untouched).

    Each epoch visits the rows in an order drawn from ``rng`` (a ``numpy.random.Generator``;
    ``None`` keeps the data order), in batches of ``batch_size``.
    """
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.int64)
    if epochs < 0 or batch_size < 1 or learning_rate <= 0:
        raise ParameterError(f"need epochs >= 0, batch_size >= 1, learning_rate > 0; got "
                             f"{epochs}, {batch_size}, {learning_rate}")
    w = np.array(params, dtype=np.float64, copy=True)
    n = x.shape[0]
    if n == 0:
        return w
    for _ in range(int(epochs)):
        order = np.arange(n) if rng is None else rng.permutation(n)
        for start in range(0, n, int(batch_size)):
            idx = order[start:start + int(batch_size)]
            _, grad = model.loss_and_gradient(w, x[idx], y[idx])
            w -= learning_rate * grad
    return w
