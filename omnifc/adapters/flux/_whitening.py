"""FLUX's noise-whitened metric: D measured in units of the descriptors' own sampling noise.

Why (issue 24, tenth and eleventh passes, docs/adapters.md): in FLUX's Euclidean D the
direction that separates two groups of clients often carries little variance, so every K
rule that reads D's geometry misses groups that a test told that direction finds. What
hides the direction is the descriptor's sampling noise: a client's descriptor is a
statistic of its rows, and some coordinates (a rare class's block, a scale) are far noisier
than others and correlated with each other. Whitening the descriptors by the noise
covariance makes the noise isotropic, so a difference between groups stands out in D by its
size relative to the noise, as a Mahalanobis distance does.

The noise covariance is estimated, label-free and client-side, by the **jackknife**
(Efron & Stein 1981): a client with ``n`` rows recomputes its descriptor ``n`` times, each
time without one row (:func:`leave_one_out_descriptors`, closed form), and its noise
covariance is ``J = (n - 1)/n sum_i (theta_(i) - theta_bar)(theta_(i) - theta_bar)^T``.
Each client contributes ``(n - 1) J / B^2`` (``B``: the descriptors' public bound,
:func:`~omnifc.adapters.flux.descriptor_bound`), its noise per row in units of ``B^2``:
clients with more rows have proportionally smaller ``J``, which the factor removes, so
clients of any size estimate the same matrix; for the mean block it is the client's
variance over ``B^2``, at most 1) and its ``n - 1`` degrees of freedom. The pooled noise
``S`` is the mean over clients. (A client's noise is not normalized by its own size, e.g.
its trace: on heavy-tailed data a client holding an extreme row has a large ``J`` along
that row's direction, and that is the spread the metric must count; normalized away, iid
breast-cancer federations split: docs/adapters.md.) Its correlation matrix
is shrunk towards the identity by the Oracle Approximating Shrinkage intensity (Chen,
Wiesel, Eldar & Hero 2010, eq. 23, as scikit-learn's ``oas`` computes it) with the pooled
degrees of freedom as the sample size, and every descriptor is mapped to
``x diag(S)^(-1/2) R_shrunk^(-1/2)`` (:class:`NoiseWhitening`; ZCA, so coordinates keep
their place in the block layout). A coordinate with no noise at all (zero in every
leave-one-out descriptor of every client, e.g. a class no client holds) is dropped.

What the coordinator learns beyond D: the pooled noise ``S`` (a p x p matrix, an
average over every client) and the total degrees of freedom ``sum (n_c - 1)`` (the number
of rows minus the number of clients), both through :func:`omnifc.secure_sum` when secure
(never a single client's). It broadcasts the public whitening matrix to the clients.

Examples
--------
>>> import numpy as np
>>> from omnifc.adapters import flux
>>> rng = np.random.default_rng(0)
>>> proj = flux.shared_projection(4, 2, max_value=1.0)
>>> clients = [(rng.uniform(0, 1, (30, 4)), rng.integers(0, 2, 30)) for _ in range(5)]
>>> bound = flux.descriptor_bound(proj, 1.0)
>>> parts = [flux.noise_contribution(x, y, proj, 2, bound=bound) for x, y in clients]
>>> white = flux.noise_whitening(*flux.pool_noise(parts))
>>> desc = np.stack([flux.descriptor(x, y, proj, 2) for x, y in clients])
>>> white.apply(desc).shape, 0.0 <= white.shrinkage <= 1.0
((5, 12), True)
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
from sklearn.covariance import shrunk_covariance

from finite_field import InputError, ParameterError, Quantizer, choose_primes

from ._paper import DEFAULT_DESCRIPTOR_FORM

__all__ = ["NOISE_BOUND", "NOISE_SCALE_BITS", "NoiseWhitening", "leave_one_out_descriptors",
           "noise_contribution", "noise_whitening", "oas_shrinkage", "pool_noise",
           "whitening_of_clients"]

logger = logging.getLogger(__name__)

#: q of the pooled noise's secure sum: entries (units of B^2) are rounded to 2^-30, the
#: finest the quantizer allows.
NOISE_SCALE_BITS = 30

#: Public clip bound of a client's contribution ``(n - 1) J / B^2``, per entry. Its mean
#: block's entries are at most 1 (a variance of values within [-B, B], over B^2). The
#: largest leave-one-out jumps are a class block's: ``"weighted_all"``'s 1-row class leaving
#: moves its block ``sqrt(1/n) (z - mu_x)`` to 0, at most ``2 B sqrt(1/n)``: at most 4 after
#: the factor; ``"weighted"``'s 2-row class drops to 0 whichever row leaves, ``2 (2 B)^2
#: (2/n)`` summed: at most 16. Both extremes need projected values spanning all of
#: [-B, B], which B (a sum of absolute loadings) overstates; the tests' worst case on box
#: corners is 3.97. An entry beyond 16 is refused (:func:`pool_noise` fails closed), never
#: clipped silently.
NOISE_BOUND = 16.0

#: Descriptor forms with a closed-form leave-one-out: (form, least rows a class block needs).
_LEAST_ROWS = {"weighted_all": 1, "weighted": 2}


def leave_one_out_descriptors(latents, labels, projection, n_classes: int, *,
                              form: str = DEFAULT_DESCRIPTOR_FORM) -> np.ndarray:
    """``(n, 2(U+1) l)``: row i is the client's descriptor without its row i (client side).

    Closed form, equal to ``descriptor(np.delete(latents, i, 0), np.delete(labels, i), ...)``
    for every i (tested), in O(n U l). Forms ``"weighted_all"`` (default) and ``"weighted"``.

    >>> import numpy as np
    >>> from omnifc.adapters import flux
    >>> proj = flux.shared_projection(3, 2, max_value=1.0)
    >>> x = np.random.default_rng(1).uniform(0, 1, (6, 3)); y = np.array([0, 0, 1, 1, 1, 2])
    >>> loo = flux.leave_one_out_descriptors(x, y, proj, 3)
    >>> bool(np.allclose(loo[5], flux.descriptor(x[:5], y[:5], proj, 3)))
    True
    """
    if form not in _LEAST_ROWS:
        raise ParameterError(f"the noise-whitened metric needs a descriptor form with a "
                             f"closed-form leave-one-out, one of {tuple(_LEAST_ROWS)}, got "
                             f"{form!r}")
    least = _LEAST_ROWS[form]
    z = projection.transform(np.asarray(latents, dtype=np.float64))
    labels = np.asarray(labels)
    n, l = z.shape
    if labels.shape != (n,) or n < 2:
        raise InputError(f"expected one label per latent row and at least 2 rows, got {n} "
                         f"rows and {labels.shape[0] if labels.ndim else 0} labels")
    mean = (z.sum(axis=0) - z) / (n - 1)
    spread = np.sqrt(_variance_without(z))
    means = np.zeros((n, n_classes, l))
    stds = np.zeros((n, n_classes, l))
    for c in range(n_classes):
        rows = np.flatnonzero(labels == c)
        count = rows.size
        if count < least:
            continue                     # zeros with or without any one row
        zc = z[rows]
        mean_c = zc.mean(axis=0)
        std_c = zc.std(axis=0)
        weight = np.sqrt(count / (n - 1))
        means[:, c] = weight * (mean_c - mean)
        stds[:, c] = weight * std_c
        if count - 1 < least:            # without its only row(s) the class is below least
            means[rows, c] = 0.0
            stds[rows, c] = 0.0
            continue
        weight = np.sqrt((count - 1) / (n - 1))
        mean_without = (zc.sum(axis=0) - zc) / (count - 1)
        means[rows, c] = weight * (mean_without - mean[rows])
        stds[rows, c] = weight * np.sqrt(_variance_without(zc))
    return np.concatenate([mean, spread, means.reshape(n, -1), stds.reshape(n, -1)], axis=1)


def _variance_without(z: np.ndarray) -> np.ndarray:
    """Row i: the population variance of ``z`` without its row i, per column, from the
    centred sum of squares (``M2 - (z_i - m)^2 n / (n - 1)``: no cancellation of raw sums);
    exactly 0 when one row remains."""
    n = z.shape[0]
    if n == 2:
        return np.zeros_like(z)
    centred = z - z.mean(axis=0)
    m2 = (centred * centred).sum(axis=0)
    return np.maximum(m2 - centred * centred * (n / (n - 1)), 0.0) / (n - 1)


def noise_contribution(latents, labels, projection, n_classes: int, *, bound: float,
                       form: str = DEFAULT_DESCRIPTOR_FORM) -> tuple[np.ndarray, int]:
    """``((n - 1) J / B^2, n - 1)``: one client's jackknife noise per row, in units of the
    descriptors' public bound ``B`` squared, and its degrees of freedom (client side).

    A client with one row contributes zeros and 0 degrees of freedom.

    >>> import numpy as np
    >>> from omnifc.adapters import flux
    >>> proj = flux.shared_projection(3, 2, max_value=1.0)
    >>> x = np.random.default_rng(1).uniform(0, 1, (8, 3)); y = np.array([0, 1] * 4)
    >>> noise, df = flux.noise_contribution(x, y, proj, 2, bound=1.0)
    >>> z = proj.transform(x)       # the mean block: the rows' variance (ddof 0)
    >>> bool(np.allclose(np.diag(noise)[:2], z.var(axis=0))), df
    (True, 7)
    """
    if not bound > 0:
        raise ParameterError(f"bound must be positive, got {bound}")
    if np.asarray(latents).shape[0] < 2:
        p = 2 * (n_classes + 1) * projection.n_components_
        return np.zeros((p, p)), 0
    loo = leave_one_out_descriptors(latents, labels, projection, n_classes, form=form)
    n = loo.shape[0]
    centred = loo - loo.mean(axis=0)
    jack = (n - 1) / n * (centred.T @ centred)
    return jack * ((n - 1) / float(bound) ** 2), n - 1


def _quantized(noise, client: int) -> np.ndarray:
    """A contribution's entries in units of 2^-30; beyond ``NOISE_BOUND`` it is refused."""
    q = Quantizer(scale_bits=NOISE_SCALE_BITS, bound=NOISE_BOUND, clip="error")
    try:
        return q.quantize(noise).values
    except InputError as exc:
        raise InputError(f"client {client}'s descriptor noise exceeds the public bound "
                         f"{NOISE_BOUND} B^2 per entry ({exc}); the noise-whitened metric "
                         "cannot pool it") from None


def pool_noise(contributions, *, secure: bool = False, parties=None,
               **options) -> tuple[np.ndarray, int]:
    """``(S, df)``: the mean noise over clients and the total degrees of freedom.

    ``contributions``: one :func:`noise_contribution` per client. ``secure=True`` sums each
    party's clients through :func:`omnifc.secure_sum` (``parties``: a party label per
    client, each client its own party by default), so the coordinator learns the sums only;
    ``secure=False`` computes the same sums from the same quantized contributions in the
    clear (equal, bit for bit). Clients with 0 degrees of freedom count in neither sum. An
    entry beyond ``NOISE_BOUND`` raises :class:`InputError` (before anything is sent).
    """
    noises = [np.asarray(s, dtype=np.float64) for s, _ in contributions]
    dfs = [int(d) for _, d in contributions]
    used = [i for i, d in enumerate(dfs) if d > 0]
    if not used:
        raise InputError("no client has 2 or more rows: the noise of the descriptors cannot "
                         "be estimated")
    labels = (np.arange(len(noises)) if parties is None else np.asarray(parties))
    if labels.shape != (len(noises),):
        raise ParameterError(f"parties must give one label per client ({len(noises)}), got "
                             f"shape {labels.shape}")
    if not secure:
        total = sum(_quantized(noises[i], i) for i in used)
        noise_sum = total / float(2 ** NOISE_SCALE_BITS)
        return noise_sum / len(used), int(sum(dfs))
    from ..._secure_sum import secure_sum

    names = [str(v) for v in dict.fromkeys(labels.tolist())]
    members = {name: [i for i in used if str(labels[i]) == name] for name in names}
    most = max(len(m) for m in members.values())
    p = noises[0].shape[0]
    quantized = {name: sum((_quantized(noises[i], i) for i in m), np.zeros((p, p), np.int64))
                 / float(2 ** NOISE_SCALE_BITS) for name, m in members.items()}
    noise_sum = secure_sum(quantized, bound=NOISE_BOUND * max(most, 1),
                           scale_bits=NOISE_SCALE_BITS,
                           **options).total
    df_parts = {name: np.array([float(sum(dfs[i] for i in m)), float(len(m))])
                for name, m in members.items()}
    df_bound = float(max(max(v) for v in df_parts.values()))
    counts = secure_sum(df_parts, bound=max(df_bound, 1.0), scale_bits=0, nonnegative=True,
                        **options).total
    return noise_sum / counts[1], int(round(counts[0]))


def oas_shrinkage(covariance, n_samples: float) -> float:
    """The Oracle Approximating Shrinkage intensity of ``covariance`` from ``n_samples``.

    Chen, Wiesel, Eldar & Hero (2010), eq. 23, in scikit-learn's form (``sklearn.covariance
    .oas`` computes it from the samples; this takes the covariance and the sample size, all
    that the secure sum reveals). Equal to scikit-learn's on the samples' empirical
    covariance (tested).

    >>> import numpy as np
    >>> from sklearn.covariance import oas, empirical_covariance
    >>> x = np.random.default_rng(0).normal(size=(40, 5))
    >>> bool(np.isclose(oas_shrinkage(empirical_covariance(x), 40), oas(x)[1]))
    True
    """
    s = np.asarray(covariance, dtype=np.float64)
    p = s.shape[0]
    if p == 1:
        return 0.0
    alpha = float(np.mean(s ** 2))
    mu = float(np.trace(s)) / p
    den = (float(n_samples) + 1.0) * (alpha - mu * mu / p)
    return 1.0 if den <= 0 else float(min((alpha + mu * mu) / den, 1.0))


@dataclass(frozen=True)
class NoiseWhitening:
    """The public whitening map and its evidence (:func:`noise_whitening`).

    ``matrix``: p x p, descriptors (rows) map to ``x @ matrix``; ``shrinkage``: the OAS
    intensity applied to the noise correlation; ``df``: the pooled degrees of freedom;
    ``kept``: the coordinates with noise (the others map to 0).
    """

    matrix: np.ndarray
    shrinkage: float
    df: int
    kept: np.ndarray

    def apply(self, descriptors) -> np.ndarray:
        """Whitened descriptors (client side: each client maps its own row)."""
        x = np.asarray(descriptors, dtype=np.float64)
        if x.shape[-1] != self.matrix.shape[0]:
            raise InputError(f"expected descriptors of {self.matrix.shape[0]} entries, got "
                             f"{x.shape[-1]}")
        return x @ self.matrix

    def bound(self, descriptor_bound: float) -> float:
        """Public clip bound of every whitened entry, from the descriptors' public bound:
        ``|sum_k x_k W_kj| <= B sum_k |W_kj|``."""
        return float(max(1.0, descriptor_bound * np.abs(self.matrix).sum(axis=0).max()))

    def scale_bits(self, descriptor_bound: float, wanted: int) -> int:
        """The quantization ``q`` of the whitened rows: the largest ``q <= wanted`` whose
        squared distances fit the protocol's 63 bits (``choose_primes`` of
        :meth:`Quantizer.distance_bound`, as the protocol's plan checks it) under
        :meth:`bound`. Whitened, a client's noise has the same standard deviation in every
        direction, about ``B / sqrt(n - 1)`` for ``n`` rows (the pooled noise is per row, in
        units of ``B^2``), so ``2^-q`` is a fixed fraction of the noise in every direction,
        not of the descriptors' range."""
        dim = self.matrix.shape[1]
        bound = self.bound(descriptor_bound)
        for q in range(int(wanted), -1, -1):
            try:                            # the protocol's own checks (finite_field's plan)
                choose_primes(Quantizer(scale_bits=q, bound=bound).distance_bound(dim) + 1)
            except ParameterError:          # beyond 2^53 or 63 bits: a coarser q may fit
                continue
            return q
        raise ParameterError(f"the whitened rows' bound {bound:.3g} in {dim} dimensions does "
                             "not fit the protocol's 63 bits even at scale_bits 0")

    def summary(self) -> str:
        return (f"noise-whitened metric: {int(self.kept.sum())} of {self.kept.size} "
                f"coordinates with noise, OAS shrinkage {self.shrinkage:.3g}, "
                f"{self.df} degrees of freedom")


def _shrunk_eigen(corr, df: int):
    """``(corr, shrinkage, eigenvalues, eigenvectors)``: the correlation ``corr``
    symmetrized, and its eigen-decomposition once shrunk towards the identity by
    :func:`oas_shrinkage` with ``df`` samples."""
    corr = (corr + corr.T) / 2
    shrinkage = oas_shrinkage(corr, df)
    values, vectors = np.linalg.eigh(shrunk_covariance(corr, shrinkage))
    return corr, shrinkage, values, vectors


def noise_whitening(noise, df: int) -> NoiseWhitening:
    """The whitening of the pooled noise ``S`` (:func:`pool_noise`).

    Coordinates with zero noise variance are dropped; the others are standardized, their
    correlation shrunk towards the identity by :func:`oas_shrinkage` with ``df`` samples
    (``sklearn.covariance.shrunk_covariance``) and whitened by its inverse square root
    (ZCA). Distances between mapped descriptors are Mahalanobis distances for the shrunk
    noise covariance.
    """
    s = np.asarray(noise, dtype=np.float64)
    if s.ndim != 2 or s.shape[0] != s.shape[1] or not np.all(np.isfinite(s)):
        raise InputError(f"the pooled noise must be a finite square matrix, got shape "
                         f"{s.shape}")
    if int(df) < 1:
        raise InputError(f"the pooled noise needs at least 1 degree of freedom, got {df}")
    variances = np.diag(s).copy()
    kept = variances > 0
    if not kept.any():
        raise InputError("no descriptor coordinate has any sampling noise")
    sd = np.sqrt(variances[kept])
    corr, shrinkage, values, vectors = _shrunk_eigen(s[np.ix_(kept, kept)] / np.outer(sd, sd),
                                                     df)
    floor = values.max() * np.finfo(np.float64).eps * corr.shape[0]
    if values.min() <= floor:
        # A mean of PSD matrices is PSD; rounded to 2^-30, coordinates whose noise is near
        # that resolution can make it indefinite (correlations beyond 1). Only then: the
        # nearest PSD correlation (negative eigenvalues to 0, unit diagonal), shrunk again.
        logger.warning("the pooled noise correlation is indefinite (smallest shrunk "
                       "eigenvalue %.3g: coordinates with noise near the 2^-30 resolution); "
                       "projected onto the positive semi-definite correlations", values.min())
        w, u = np.linalg.eigh(corr)
        corr = (u * np.maximum(w, 0.0)) @ u.T
        unit = np.sqrt(np.diag(corr))
        if not np.all(unit > 0):
            raise InputError("the pooled noise correlation has a coordinate with no positive "
                             "part; more rows are needed")
        _, shrinkage, values, vectors = _shrunk_eigen(corr / np.outer(unit, unit), df)
        if values.min() <= floor:
            raise InputError("the pooled noise correlation is singular even after shrinkage "
                             f"(smallest eigenvalue {values.min():.3g}); more rows are needed")
    inverse_root = (vectors / np.sqrt(values)) @ vectors.T
    matrix = np.zeros((s.shape[0], s.shape[0]))
    matrix[np.ix_(kept, kept)] = inverse_root / sd[:, None]
    out = NoiseWhitening(matrix=matrix, shrinkage=shrinkage, df=int(df), kept=kept)
    logger.info("%s", out.summary())
    return out


def whitening_of_clients(latents, labels, projection, n_classes: int, *, bound: float,
                         form: str = DEFAULT_DESCRIPTOR_FORM, secure: bool = False,
                         parties=None, **options) -> NoiseWhitening:
    """The whole metric of a federation: every client's :func:`noise_contribution` (from its
    ``latents`` and ``labels``, one array each per client), :func:`pool_noise` and
    :func:`noise_whitening`. What ``run_flux(normalization="whitened")`` and the grid run.
    """
    noise = [noise_contribution(z, y, projection, n_classes, bound=bound, form=form)
             for z, y in zip(latents, labels)]
    return noise_whitening(*pool_noise(noise, secure=secure, parties=parties, **options))
