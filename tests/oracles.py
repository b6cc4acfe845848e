"""The one home of the independent oracles shared by the test packages.

Each function recomputes a quantity of the library from its textbook definition with
Python integers or exact fractions, never with the library's own algorithm; galois, the
project's reference for field arithmetic, is reached through :func:`galois_field`.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np


def galois_field(p: int):
    """galois' GF(p), computing in Python (``compile="python-calculate"``).

    galois is the project's oracle for field arithmetic, Lagrange polynomials and
    Reed-Solomon decoding. Its default modes JIT-compile lookup or calculation kernels for
    every field, a minute or more per field on a loaded 2-core machine; the tests use
    small arrays, for which galois' own pure-Python arithmetic is the same oracle at no
    compile cost. (galois caches one class per order, so every caller shares this mode.)

    >>> gf = galois_field(13)
    >>> int(gf(7) * gf(2)), int(gf(1) / gf(2))
    (1, 7)
    """
    import galois

    return galois.GF(p, compile="python-calculate")


def parity_rows(points, checks, p):
    """mu_{k,j} = v_j beta_j^k for k < ``checks``, with v_j = 1 / prod_{i != j} (b_j - b_i).

    Row 0 is the column multipliers v of the dual code. The inverse is Fermat's
    ``den^(p-2)``, not the extended Euclid of the library.

    >>> parity_rows([1, 2, 3], 2, 7)
    [[4, 6, 4], [4, 5, 5]]
    """
    out = []
    for k in range(checks):
        row = []
        for j, x in enumerate(points):
            den = 1
            for i, y in enumerate(points):
                if i != j:
                    den = den * (x - y) % p
            row.append(pow(den, p - 2, p) * pow(x, k, p) % p)
        out.append(row)
    return out


def mask_stream_elements(key, p, count):
    """The first ``count`` field elements of the documented mask stream under ``key``.

    AES-256 in counter mode from a zero counter block (the keystream is AES-256 of the
    big-endian block numbers 0, 1, 2, ..., each block computed here with AES in ECB mode),
    read as little-endian 32-bit words, each masked to ``(p - 1).bit_length()`` bits and
    kept when below p (rejection sampling), one word at a time in Python: not the
    library's vectorized fast path nor its CTR mode.
    """
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

    block = Cipher(algorithms.AES(key), modes.ECB()).encryptor()
    bits, out, counter = (p - 1).bit_length(), [], 0
    while len(out) < count:
        blocks = b"".join(i.to_bytes(16, "big") for i in range(counter, counter + 256))
        counter += 256
        keystream = block.update(blocks)
        for i in range(0, len(keystream), 4):
            word = int.from_bytes(keystream[i:i + 4], "little") & ((1 << bits) - 1)
            if word < p:
                out.append(word)
                if len(out) == count:
                    break
    return out


def graph_connected(n, edges, removed) -> bool:
    """Brute force: is the graph on 0..n-1 with ``edges``, minus ``removed``, connected?"""
    alive = [v for v in range(n) if v not in removed]
    if len(alive) <= 1:
        return True
    seen, stack = {alive[0]}, [alive[0]]
    while stack:
        v = stack.pop()
        for a, b in edges:
            for x, y in ((a, b), (b, a)):
                if x == v and y not in removed and y not in seen:
                    seen.add(y)
                    stack.append(y)
    return len(seen) == len(alive)


def sq_distances(x):
    """Squared Euclidean distances of the rows of ``x`` (a 1-D ``x``: one value per row),
    by broadcasting in float64."""
    x = np.asarray(x, dtype=np.float64).reshape(len(x), -1)
    return ((x[:, None, :] - x[None, :, :]) ** 2).sum(-1)


def split_federation(rng, n, rows, k, *, shift=0.0, small=0, client_sd=0.0,
                     client_axes="all", p=4):
    """The rows ``[G_0; ...; G_{k-1}; F]`` of a Gaussian federation, written out: each
    client's ``rows`` rows are iid ``N(mean, I)`` in ``p`` dimensions, its descriptor F is
    their mean, and its k delete-a-group descriptors leave out one of k consecutive row
    groups. ``small`` clients have their mean moved by ``shift`` along the first axis.
    ``client_sd``: every client's own mean moves too, by ``N(0, client_sd^2 I)``
    (``client_axes="all"``: clients of one group, each its own distribution) or by
    ``client_sd`` times one standard normal along the first axis (``"first"``: clients that
    differ along one direction). The draws, per client: the client effect (p numbers or
    one, drawn even at ``client_sd = 0``), then the rows."""
    if client_axes not in ("all", "first"):
        raise ValueError(f"client_axes must be 'all' or 'first', got {client_axes!r}")
    f, g = [], [[] for _ in range(k)]
    for i in range(n):
        mean = np.zeros(p)
        mean[0] += shift if i < small else 0.0
        if client_axes == "all":
            mean += client_sd * rng.standard_normal(p)
        else:
            mean[0] += client_sd * rng.standard_normal()
        x = mean + rng.standard_normal((rows, p))
        f.append(x.mean(axis=0))
        for j, part in enumerate(np.array_split(np.arange(rows), k)):
            g[j].append(np.delete(x, part, axis=0).mean(axis=0))
    return np.vstack([np.array(gj) for gj in g] + [np.array(f)])


def k_nearest(sq, k):
    """Each row's k nearest other rows of a square list-of-lists of exact squared distances,
    nearest first, ties to the lower row index (a stable sort of each row by distance)."""
    n = len(sq)
    return [sorted((j for j in range(n) if j != i), key=lambda j: (sq[i][j], j))[:k]
            for i in range(n)]


def quantize(x, bound, scale_bits, nonnegative=False):
    lower = 0.0 if nonnegative else -bound
    return np.floor(np.clip(np.asarray(x, float), lower, bound) * 2.0**scale_bits + 0.5) \
        .astype(np.int64)


def plaintext_sq_distances(x, bound, scale_bits, nonnegative=False):
    """Integer squared distances of the quantized rows with exact Python integers."""
    q = quantize(x, bound, scale_bits, nonnegative).tolist()
    return np.array([[sum((a - b) ** 2 for a, b in zip(u, v)) for v in q] for u in q],
                    dtype=np.int64)


def lagrange_weights(points, x, p):
    """[L_j(x) mod p] for the Lagrange basis on ``points``.

    Independent of the library's modular algorithm: each L_j(x) is evaluated exactly over
    the rationals (``fractions.Fraction``) and only then mapped to GF(p), which is valid
    because the points are distinct modulo p (no denominator vanishes mod p).
    tests/protocols/test_helper_oracle.py checks this against galois.
    """
    out = []
    for j, xj in enumerate(points):
        value = Fraction(1)
        for k, xk in enumerate(points):
            if k != j:
                value *= Fraction(int(x) - int(xk), int(xj) - int(xk))
        out.append(value.numerator % p * pow(value.denominator % p, -1, p) % p)
    return out


class Oracle:
    """Independent reference computations with exact Python integers and fractions.

    Nothing here calls omnifc: tests compare the library against these.
    """

    @staticmethod
    def quantize_value(x: float, scale_bits: int, bound: float, nonnegative: bool = False) -> int:
        """round-half-up(2^q * clip(x, lower, R)), computed exactly with fractions."""
        from fractions import Fraction
        import math

        lower = 0.0 if nonnegative else -float(bound)
        clipped = min(max(float(x), lower), float(bound))
        return math.floor(Fraction(clipped) * 2**scale_bits + Fraction(1, 2))

    @classmethod
    def quantize(cls, rows, scale_bits: int, bound: float, nonnegative: bool = False):
        """A list of lists of Python ints."""
        return [[cls.quantize_value(v, scale_bits, bound, nonnegative) for v in row]
                for row in np.asarray(rows, dtype=np.float64).tolist()]

    @staticmethod
    def sq_distances(rows):
        """Pairwise squared distances of integer rows, as a list of lists of Python ints."""
        rows = [[int(v) for v in row] for row in rows]
        return [[sum((a - b) * (a - b) for a, b in zip(u, v)) for v in rows] for u in rows]

    @staticmethod
    def is_prime(n: int) -> bool:
        """Deterministic Miller-Rabin for n < 3.3e24 (bases are the first 13 primes)."""
        if n < 2:
            return False
        bases = (2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41)
        for b in bases:
            if n % b == 0:
                return n == b
        d, s = n - 1, 0
        while d % 2 == 0:
            d, s = d // 2, s + 1
        for b in bases:
            x = pow(b, d, n)
            if x in (1, n - 1):
                continue
            for _ in range(s - 1):
                x = x * x % n
                if x == n - 1:
                    break
            else:
                return False
        return True


def ward_gap_k(x, k_upper=15):
    """omnifc's K rule from its definition, on scikit-learn's Ward merge heights.

    K in 2..min(k_upper, n // 2) (n when n < 4) with the widest ratio of consecutive merge
    heights h_{n-k+1} / h_{n-k}; the heights come from scikit-learn's agglomerative
    clustering of the vectors ``x``, not from scipy's linkage on D as in the library.

    >>> ward_gap_k(np.array([[0.0], [0.1], [5.0], [5.1], [100.0], [100.1]]))
    3
    """
    from sklearn.cluster import AgglomerativeClustering

    heights = np.sort(AgglomerativeClustering(linkage="ward", compute_distances=True)
                      .fit(x).distances_)
    n = len(x)
    upper = min(k_upper, n // 2) if n >= 4 else n
    best_k, best = 2, -1.0
    for k in range(2, upper + 1):
        low, high = heights[n - k - 1], heights[n - k]
        ratio = high / low if low > 0 else (np.inf if high > 0 else 1.0)
        if ratio > best:
            best_k, best = k, ratio
    return best_k


def conformal_p_value(members, x):
    """Full conformal p-value of ``x`` against the cluster ``members``, from the vectors.

    In the augmented set ``members + [x]`` each point's score is its squared distance to the
    centroid of the other points (the centroid computed from the coordinates, in exact
    fractions); ``p = #{score >= score(x)} / (len(members) + 1)``. Returns a Fraction.

    >>> conformal_p_value([[0], [2]], [1])     # x at the centroid of the others: all >= it
    Fraction(1, 1)
    >>> conformal_p_value([[0], [1], [2]], [9])  # x beyond everything: only itself
    Fraction(1, 4)
    """
    points = [[Fraction(v) for v in row] for row in members] + [[Fraction(v) for v in x]]
    n = len(points)

    def score(i):
        others = [p for j, p in enumerate(points) if j != i]
        centre = [sum(column) / len(others) for column in zip(*others)]
        return sum((a - b) ** 2 for a, b in zip(points[i], centre))

    scores = [score(i) for i in range(n)]
    return Fraction(sum(1 for s in scores if s >= scores[-1]), n)


def secure_and_plain_flux_runs(data, model, seed, **options):
    """``(secure, plain)``: one ``flux.run_flux`` on ``data`` through the secure path (the
    clients in three parties, training and unseen alike) and the same run in the clear, one
    warm-up and one cluster round each; ``options`` go to both (a recipe, say)."""
    import numpy as np

    from omnifc.adapters import flux

    parties = {"parties": np.arange(len(data.clients)) % 3,
               "new_parties": np.arange(len(data.clients) + len(data.new_clients)) % 3}
    return tuple(flux.run_flux(data, model, seed=seed, secure=secure, cluster_rounds=1,
                               warmup_rounds=1, **options, **(parties if secure else {}))
                 for secure in (True, False))
