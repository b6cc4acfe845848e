"""Independent Python-integer oracles shared by the test packages.

Each function recomputes a quantity of the library from its textbook definition with
Python integers, never with the library's own algorithm.
"""

from __future__ import annotations


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


def chacha20_elements(key, p, count):
    """The first ``count`` field elements of the documented mask stream under ``key``.

    ChaCha20 with a zero nonce, read as little-endian 32-bit words, each masked to
    ``(p - 1).bit_length()`` bits and kept when below p (rejection sampling), one word at a
    time in Python: not the library's vectorized fast path.
    """
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms

    stream = Cipher(algorithms.ChaCha20(key, bytes(16)), mode=None).encryptor()
    bits, out = (p - 1).bit_length(), []
    while len(out) < count:
        word = int.from_bytes(stream.update(bytes(4)), "little") & ((1 << bits) - 1)
        if word < p:
            out.append(word)
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


def k_nearest(sq, k):
    """Each row's k nearest other rows of a square list-of-lists of exact squared distances,
    nearest first, ties to the lower row index (a stable sort of each row by distance)."""
    n = len(sq)
    return [sorted((j for j in range(n) if j != i), key=lambda j: (sq[i][j], j))[:k]
            for i in range(n)]
