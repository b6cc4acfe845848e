"""The verdicts of the reproduction pages and the noise measures behind them.

A comparison on a page is never written by hand: :func:`verdict` computes "better", "tie
within noise" or "worse" from the two numbers and a stated noise measure
(:func:`accuracy_noise`, :func:`paired_noise`, :func:`kappa_noise`). Moved here unchanged
from :mod:`._report` (issue 20), which re-exports every name.

>>> compared("FedAvg", 0.90, 0.85, 0.03)
'better than FedAvg (0.900 vs 0.850; noise 0.030)'
"""

from __future__ import annotations

import math

import numpy as np

from finite_field import ParameterError

__all__ = ["VERDICTS", "verdict", "accuracy_noise", "paired_noise", "kappa_noise",
           "bootstrap_kappas", "compared", "not_better", "yes", "KAPPA_DRAWS", "KAPPA_SEED"]

#: The three verdicts a comparison on a page can carry (computed, never written by hand).
VERDICTS = ("better", "tie within noise", "worse")


def verdict(ours: float, theirs: float, noise: float) -> str:
    """``"better"`` if ours - theirs > noise, ``"worse"`` if < -noise, else a tie.

    ``noise`` (>= 0) is the stated noise measure of the difference (e.g. two standard
    errors: :func:`accuracy_noise`, :func:`paired_noise`); a difference exactly at the
    noise is a tie.

    >>> verdict(0.90, 0.85, 0.03), verdict(0.85, 0.90, 0.03), verdict(0.87, 0.85, 0.03)
    ('better', 'worse', 'tie within noise')
    """
    if not (math.isfinite(ours) and math.isfinite(theirs) and math.isfinite(noise)) \
            or noise < 0:
        raise ParameterError(f"verdict needs finite values and noise >= 0, got {ours!r}, "
                             f"{theirs!r}, {noise!r}")
    diff = ours - theirs
    if diff > noise:
        return VERDICTS[0]
    if diff < -noise:
        return VERDICTS[2]
    return VERDICTS[1]


def accuracy_noise(a: float, b: float, n: int) -> float:
    """Two standard errors of the difference of two accuracies, each on ``n`` test rows.

    ``2 sqrt((a (1 - a) + b (1 - b)) / n)`` (binomial; the two taken as independent).

    >>> round(accuracy_noise(0.9, 0.8, 100), 4)
    0.1
    """
    if int(n) < 1:
        raise ParameterError(f"n must be >= 1, got {n}")
    return 2.0 * math.sqrt((a * (1 - a) + b * (1 - b)) / int(n))


def paired_noise(ours, theirs) -> float:
    """Two standard errors of the mean paired difference over seeds (0 for one seed).

    >>> round(paired_noise([0.5, 0.7], [0.4, 0.4]), 6)  # d = 0.1, 0.3: 2 * sqrt(0.02 / 2)
    0.2
    """
    d = [float(a) - float(b) for a, b in zip(ours, theirs)]
    if len(d) < 2:
        return 0.0
    mean = sum(d) / len(d)
    var = sum((x - mean) ** 2 for x in d) / (len(d) - 1)
    return 2.0 * math.sqrt(var / len(d))


#: Bootstrap resamples behind :func:`kappa_noise` and their public seed.
KAPPA_DRAWS = 200
KAPPA_SEED = 0


def kappa_noise(truth, ours, theirs, *, draws: int = KAPPA_DRAWS, seed: int = KAPPA_SEED,
                ours_kappas=None) -> float:
    """Two bootstrap standard errors of ``kappa(truth, ours) - kappa(truth, theirs)``.

    The rows are resampled with replacement ``draws`` times (numpy's PCG64 with ``seed``;
    resample b uses the same rows for both sides, so the difference is paired); the
    result is twice the sample standard deviation (ddof 1) of the ``draws`` differences.
    The two labelings are fixed: the methods' own seed-to-seed variation is not in it.
    ``ours_kappas`` may pass the ``draws`` kappas of ``ours`` from an earlier call with the
    same truth, draws and seed (they do not depend on ``theirs``).

    >>> kappa_noise([0, 0, 1, 1], [0, 0, 1, 1], [1, 1, 0, 0])   # both perfect up to naming
    0.0
    """
    truth, ours, theirs = (np.asarray(a) for a in (truth, ours, theirs))
    if ours_kappas is None:
        ours_kappas = bootstrap_kappas(truth, ours, draws=draws, seed=seed)
    diffs = np.asarray(ours_kappas) - np.asarray(bootstrap_kappas(truth, theirs, draws=draws,
                                                                  seed=seed))
    return 2.0 * float(np.std(diffs, ddof=1))


def bootstrap_kappas(truth, predicted, *, draws: int = KAPPA_DRAWS,
                     seed: int = KAPPA_SEED) -> list[float]:
    """Kappa of ``predicted`` on ``draws`` bootstrap resamples of the rows (see kappa_noise)."""
    from .._metrics import kappa

    if int(draws) < 2:
        raise ParameterError(f"draws must be >= 2, got {draws}")
    truth, predicted = np.asarray(truth), np.asarray(predicted)
    rng = np.random.Generator(np.random.PCG64(seed))
    n = truth.size
    return [kappa(truth[idx], predicted[idx])
            for idx in (rng.integers(0, n, n) for _ in range(int(draws)))]


def compared(name: str, ours: float, theirs: float, noise: float) -> str:
    """``"better than FedAvg (0.900 vs 0.850; noise 0.030)"``: a computed verdict with its numbers."""
    word = verdict(ours, theirs, noise)
    link = {"better": "better than", "worse": "worse than", "tie within noise": "tie with"}
    return f"{link[word]} {name} ({ours:.3f} vs {theirs:.3f}; noise {noise:.3f})"


def not_better(claim: str, comparisons) -> list[str]:
    """The comparisons where a paper claims "better" and the numbers do not show it.

    ``comparisons``: ``(setting, name, ours, theirs, noise)`` tuples; one line per
    comparison whose :func:`verdict` is not "better", for the page's list of claims not
    reproduced.

    >>> not_better("accuracy above FedAvg", [("seen", "FedAvg", 0.9, 0.8, 0.05),
    ...                                      ("unseen", "FedAvg", 0.8, 0.8, 0.05)])
    ['accuracy above FedAvg, unseen: tie with FedAvg (0.800 vs 0.800; noise 0.050)']
    """
    return [f"{claim}, {setting}: {compared(name, ours, theirs, noise)}"
            for setting, name, ours, theirs, noise in comparisons
            if verdict(ours, theirs, noise) != VERDICTS[0]]


def yes(flag) -> str:
    return "bit-identical" if flag else "**differs**"
