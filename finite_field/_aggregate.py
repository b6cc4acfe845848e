"""One-pass kernels for masked aggregation: what a party uploads and what the coordinator sums.

A party's upload is ``y = c * g + sum(+masks) - sum(-masks) mod p`` packed as uint32; the
coordinator adds uploads into an int64 accumulator (each < 2^31, so about 2^32 of them fit
before any reduction) and reduces once at the end. Done with separate numpy passes this is
memory-bound work repeated eight times over; here each is one pass.

Examples
--------
>>> import numpy as np
>>> values = np.array([[1, 2], [3, 4]])
>>> adds = np.array([[5, 6, 0, 0]], dtype=np.uint32)
>>> subs = np.array([[1, 1, 1, 1]], dtype=np.uint32)
>>> masked_upload(values, 3, adds, subs, 7).tolist()    # (3 v + add - sub) mod 7
[[0, 4], [1, 4]]
>>> acc = np.zeros((2, 2), dtype=np.int64)
>>> add_upload(acc, masked_upload(values, 3, adds, subs, 7), 7)
>>> symmetrize_mod(np.array([[9, 8], [0, 5]]), 7).tolist()
[[0, 1], [1, 0]]

The same upload with the masks drawn chunk by chunk from streams (``next(count)``):

>>> class Stream:
...     def __init__(self, words): self.words, self.at = np.asarray(words, np.uint32), 0
...     def next(self, count):
...         self.at += count
...         return self.words[self.at - count:self.at]
>>> masked_upload_streams(values, 3, [(Stream([5, 6, 0, 0]), False),
...                                    (Stream([1, 1, 1, 1]), True)], 7).tolist()
[[0, 4], [1, 4]]
"""

from __future__ import annotations

import numpy as np

from ._jit import kernel
from ._errors import ParameterError

__all__ = ["masked_upload", "masked_upload_streams", "mask_words", "add_upload",
           "add_reduced", "symmetrize_mod"]


@kernel(cache=True)
def _reduce(x, p, p_inv):
    # x mod p in [0, p) for |x| < 2^63 - 3p: a float64 quotient estimate (off by at most
    # one or two) and branch-free integer fix-ups ((r >> 63) & p is p for negative r, else
    # 0), so the loops that call it vectorize, unlike an integer division per element.
    rest = x - np.int64(x * p_inv) * p
    rest += (rest >> 63) & p
    rest += (rest >> 63) & p
    rest -= p
    rest += (rest >> 63) & p
    rest -= p
    rest += (rest >> 63) & p
    return rest


@kernel("int64(int64[:, :], int64, uint32[:, ::1], uint32[:, ::1], int64, uint32[:, ::1])",
            cache=True, nogil=True)
def _masked_upload_kernel(values, weight, adds, subs, p, out):
    # acc = v*w + sum(adds) + sum(p - subs) < 2^62 + k 2^32 stays in int64 (see _reduce).
    rows, cols = values.shape
    p_inv = 1.0 / p
    bad = 0
    acc = np.empty(cols, dtype=np.int64)
    for r in range(rows):
        base = r * cols
        for c in range(cols):
            v = values[r, c]
            bad += (v < 0) | (v >= p)
            acc[c] = v * weight
        for a in range(adds.shape[0]):
            for c in range(cols):
                acc[c] += np.int64(adds[a, base + c])
        for s in range(subs.shape[0]):
            for c in range(cols):
                acc[c] += p - np.int64(subs[s, base + c])
        for c in range(cols):
            out[r, c] = _reduce(acc[c], p, p_inv)
    return bad


@kernel("int64(int64[:, :], int64, int64, int64[::1])", cache=True, nogil=True)
def _weighted_start(values, weight, p, acc):
    # acc (row-major) = weight * values; returns how many values are outside [0, p).
    rows, cols = values.shape
    bad = 0
    for r in range(rows):
        base = r * cols
        for c in range(cols):
            v = values[r, c]
            bad += (v < 0) | (v >= p)
            acc[base + c] = v * weight
    return bad


@kernel("int64(uint32[::1], uint32, int64)", cache=True, nogil=True)
def _mask_words_kernel(words, bits, p):
    rejected = 0
    for i in range(words.shape[0]):
        w = words[i] & bits
        words[i] = w
        rejected += np.int64(w) >= p
    return rejected


def mask_words(words: np.ndarray, bits: int, p: int) -> int:
    """Mask keystream words to ``bits`` in place (one pass); how many are then >= p.

    The first step of rejection sampling (:func:`finite_field.uniform_elements`): 0 means
    every word is already a uniform element of GF(p).

    >>> w = np.array([0xFFFF0003, 12, 13], dtype=np.uint32)
    >>> mask_words(w, 0xF, 13), w.tolist()
    (1, [3, 12, 13])
    """
    return int(_mask_words_kernel(words, np.uint32(bits), int(p)))


@kernel("void(int64[::1], uint32[::1], int64, int64)", cache=True, nogil=True)
def _accumulate_words(acc, words, p, negate):
    # acc += w (negate = 0) or p - w (negate = 1), branch-free so that it vectorizes.
    offset = p * negate
    sign = 1 - 2 * negate
    for i in range(acc.shape[0]):
        acc[i] += offset + sign * np.int64(words[i])


@kernel("void(int64[::1], uint32[::1], int64, int64)", cache=True, nogil=True)
def _accumulate_scaled(acc, words, p, coefficient):
    # acc = (acc mod p) + coefficient * w: both terms < 2^31, so it stays below 2^63 - 3p.
    p_inv = 1.0 / p
    for i in range(acc.shape[0]):
        acc[i] = _reduce(acc[i], p, p_inv) + coefficient * np.int64(words[i])


@kernel("void(int64[::1], int64, uint32[:, ::1])", cache=True, nogil=True)
def _reduce_into(acc, p, out):
    rows, cols = out.shape
    p_inv = 1.0 / p
    for r in range(rows):
        base = r * cols
        for c in range(cols):
            out[r, c] = _reduce(acc[base + c], p, p_inv)


def _readonly_u32(layout: str):
    # Uploads arrive as read-only views of the received bytes (no copy). A numba type, so
    # the signatures below are functions (called when the kernel first compiles).
    import numba

    return numba.types.Array(numba.types.uint32, 2, layout, readonly=True)


def _signature(target: str, *middle: str, last: str, upload_layout: str = "C"):
    """``int64(target, *middle, read-only uint32 2-D upload, last)`` as numba types."""
    def signature():
        import numba

        t = numba.types
        kinds = {"int64": t.int64, "uint32": t.uint32, "int64[:, :]": t.int64[:, :],
                 "int64[:, ::1]": t.int64[:, ::1], "uint32[:, ::1]": t.uint32[:, ::1]}
        upload = _readonly_u32(upload_layout)
        return t.int64(kinds[target], *(kinds[m] for m in middle), upload, kinds[last])
    return signature


@kernel(_signature("int64[:, :]", last="int64", upload_layout="A"), cache=True, nogil=True)
def _add_upload_kernel(target, upload, p):
    # Returns how many values were >= p (counted, not branched on, so the loop vectorizes).
    rows, cols = upload.shape
    bad = 0
    for r in range(rows):
        for c in range(cols):
            v = np.int64(upload[r, c])
            bad += v >= p
            target[r, c] += v
    return bad


def _add_reduced_impl(base, row0, col0, upload, p):
    # base[row0:, col0:] (upload's shape) <- (that + upload) mod p for both in [0, p),
    # p < 2^31: the sum is below 2^32, so it fits the uint32 view of an int32 matrix too.
    # The target is given as its C-contiguous base and offsets (see _rows_of), so that
    # the loop vectorizes. Returns how many uploaded values were >= p (counted, not
    # branched on).
    rows, cols = upload.shape
    bad = 0
    for r in range(rows):
        target = base[row0 + r, col0:col0 + cols]
        src = upload[r]
        for c in range(cols):
            v = src[c]
            bad += v >= p
            s = target[c] + v
            target[c] = s - p if s >= p else s
    return bad


_add_reduced_u32 = kernel(_signature("uint32[:, ::1]", "int64", "int64", last="uint32"),
                          cache=True, nogil=True)(_add_reduced_impl)
_add_reduced_i64 = kernel(_signature("int64[:, ::1]", "int64", "int64", last="int64"),
                          cache=True, nogil=True)(_add_reduced_impl)


@kernel("void(int64[:, ::1], int64)", cache=True, nogil=True)
def _symmetrize_kernel(matrix, p):
    # In 64 x 64 blocks, so that the mirrored (column) writes stay in cache. Entries are
    # non-negative sums of uploads (< 2^62).
    n = matrix.shape[0]
    p_inv = 1.0 / p
    block = 64
    for ib in range(0, n, block):
        i_end = min(ib + block, n)
        for jb in range(ib, n, block):
            j_end = min(jb + block, n)
            for i in range(ib, i_end):
                for j in range(max(jb, i + 1), j_end):
                    rest = _reduce(matrix[i, j], p, p_inv)
                    matrix[i, j] = rest
                    matrix[j, i] = rest
        for i in range(ib, i_end):
            matrix[i, i] = 0


def _masks(masks, size: int) -> np.ndarray:
    if not np.size(masks):
        return np.zeros((0, size), dtype=np.uint32)
    return np.ascontiguousarray(np.asarray(masks, dtype=np.uint32).reshape(-1, size))


def _upload_grid(values, p):
    """(p, values as a 2-D int64 grid, their shape) with the checks every upload makes."""
    p = int(p)
    if not 2 <= p < 2**31:
        raise ParameterError(f"modulus must be in [2, 2^31), got {p}")
    array = np.asarray(values, dtype=np.int64)
    grid = array.reshape(1, -1) if array.ndim == 1 else array
    if grid.ndim != 2:
        raise ParameterError(f"values must be 1-D or 2-D, got shape {array.shape}")
    return p, grid, array.shape


def masked_upload(values, weight: int, adds, subs, p: int) -> np.ndarray:
    """``(weight * values + sum(adds) - sum(subs)) mod p`` as uint32, in one pass.

    Parameters
    ----------
    values : ndarray of int64, 2-D (any strides) or 1-D
        Reduced field elements in [0, p); anything else raises ParameterError.
    weight : int
        The party's decoding weight c_j (1 for a plain sum).
    adds, subs : array-like of uint32, shape (k, values.size)
        Masks (any uint32 values; the result is reduced mod p), flattened in row-major
        order of ``values``.
    p : int
        The prime (< 2^31).
    """
    p, grid, shape = _upload_grid(values, p)
    adds = _masks(adds, grid.size)
    subs = _masks(subs, grid.size)
    if adds.shape[0] + subs.shape[0] > 2**30:  # pragma: no cover - int64 headroom
        raise ParameterError("too many masks for one accumulator")
    out = np.empty(grid.shape, dtype=np.uint32)
    if _masked_upload_kernel(grid, int(weight) % p, adds, subs, p, out):
        raise ParameterError(f"values must be reduced field elements in [0, {p})")
    return out.reshape(shape)


#: Elements per chunk of :func:`masked_upload_streams` (whole rows, at least one).
STREAM_CHUNK = 1 << 15


def masked_upload_streams(values, weight: int, streams, p: int) -> np.ndarray:
    """:func:`masked_upload` with the masks drawn from streams chunk by chunk.

    ``(weight * values + sum(coefficient * stream)) mod p`` as uint32, computed in
    chunks of whole rows (about :data:`STREAM_CHUNK` elements): each stream fills a
    chunk that is added at once while it is in cache, so no mask array of the whole
    upload ever exists and memory stays O(chunk) per stream. One mechanism for the
    pairwise masks (coefficients +1 and -1) and the integrity group masks (rho_G times
    the party's entry z_G[j] of the group's null vector).

    Parameters
    ----------
    values : ndarray of int64, 2-D (any strides) or 1-D
        Reduced field elements in [0, p); anything else raises ParameterError.
    weight : int
        The party's decoding weight c_j (1 for a plain sum or an unweighted upload).
    streams : sequence of (stream, coefficient)
        ``stream.next(count)`` returns the stream's next ``count`` elements as a
        contiguous uint32 array of values in [0, p) (flattened in row-major order of
        ``values``); ``coefficient`` is an int (taken mod p; ``True``/``False`` are
        accepted as -1/+1 for "negate"). +1 and -1 are plain additions, any other
        coefficient a multiply-and-reduce per element. A stream that also has
        ``fill(out)`` (write the next ``out.size`` elements into the contiguous uint32
        ``out`` and return it) is drawn straight into the kernel's buffer on the +1/-1
        path; a word >= p from either raises ParameterError.
    p : int
        The prime (< 2^31).
    """
    p, grid, shape = _upload_grid(values, p)
    plan = []
    for stream, coefficient in streams:
        if isinstance(coefficient, (bool, np.bool_)):
            coefficient = -1 if coefficient else 1
        coefficient = int(coefficient) % p
        plan.append((stream, coefficient))
    if len(plan) > 2**30:  # pragma: no cover - int64 headroom
        raise ParameterError("too many masks for one accumulator")
    rows, cols = grid.shape
    out = np.empty(grid.shape, dtype=np.uint32)
    step = max(1, STREAM_CHUNK // max(cols, 1))
    weight = int(weight) % p
    if all(coefficient in (1, p - 1) for _, coefficient in plan):
        # Pairwise masks only (+1/-1): each chunk's words land in two stacked buffers and
        # one pass of _masked_upload_kernel weights, adds, subtracts and reduces them.
        _masked_chunks(grid, weight, plan, p, out, step)
        return out.reshape(shape)
    acc = np.empty(min(step, rows) * cols, dtype=np.int64)
    for r0 in range(0, rows, step):
        r1 = min(rows, r0 + step)
        chunk = acc[:(r1 - r0) * cols]
        if _weighted_start(grid[r0:r1], weight, p, chunk):
            raise ParameterError(f"values must be reduced field elements in [0, {p})")
        for stream, coefficient in plan:
            words = stream.next(chunk.size)
            if words.shape != chunk.shape or words.dtype != np.uint32:
                raise ParameterError(f"a mask stream returned {words.shape} {words.dtype}, "
                                     f"expected ({chunk.size},) uint32")
            if coefficient == 1:
                _accumulate_words(chunk, words, p, 0)
            elif coefficient == p - 1:
                _accumulate_words(chunk, words, p, 1)
            elif coefficient:
                _accumulate_scaled(chunk, words, p, coefficient)
        _reduce_into(chunk, p, out[r0:r1])
    return out.reshape(shape)


def _rows_of(view: np.ndarray):
    """``(base, row0, col0)`` with ``base`` C-contiguous 2-D and ``view`` equal to
    ``base[row0:row0 + rows, col0:col0 + cols]``, or None.

    The numba kernels take that C-contiguous base and offsets rather than the strided view
    itself: a loop over a view of unknown strides does not vectorize (measured: 2 to 3
    times slower), and the views here (a tile cut from its row block, a block of the
    result matrix) are plain row and column ranges of a contiguous array.
    """
    if view.ndim != 2:
        return None
    if view.flags.c_contiguous:
        return view, 0, 0
    base = view.base
    while isinstance(base, np.ndarray):
        if (base.ndim == 2 and base.flags.c_contiguous and base.itemsize == view.itemsize
                and base.strides == view.strides):
            # (an int32 matrix's uint32 view has the int32 matrix as its base)
            base = base if base.dtype == view.dtype else base.view(view.dtype)
            offset = view.__array_interface__["data"][0] - base.__array_interface__["data"][0]
            row0, col0 = divmod(offset // view.itemsize, base.shape[1])
            if (offset >= 0 and offset % view.itemsize == 0
                    and row0 + view.shape[0] <= base.shape[0]
                    and col0 + view.shape[1] <= base.shape[1]):
                return base, int(row0), int(col0)
            return None
        base = base.base
    return None


@kernel("void(int64[:, ::1], int64, int64, int64, int64, uint32[:, ::1], uint32[:, ::1],"
            " int64, uint32[:, ::1], int64[::1])", cache=True, nogil=True)
def _pairwise_upload_kernel(base, row0, col0, weight, weight_shoup, adds, subs, p, out,
                            counts):
    # out = (weight * values + sum(adds) - sum(subs)) mod p for values = base[row0:, col0:]
    # (out's shape), with every word of adds and subs in [0, p) (stream elements). All
    # branch-free, so that each loop vectorizes:
    #   weight * v mod p by Shoup's method: weight_shoup = floor(weight 2^32 / p) and
    #   q = (v weight_shoup) >> 32 give v weight - q p in [0, 2p); then x - p, plus p if
    #   negative ((x >> 63) & p). v, weight and weight_shoup are below 2^32 and the
    #   products are taken of their zero-extended 32-bit values, so that they vectorize
    #   (32 x 32 -> 64-bit multiplies; a full 64-bit multiply does not on AVX2).
    #   The first two streams (adds first, then subs) are folded into that pass: a word w
    #   moves x by ((w ^ neg) - neg) - lift, which is w - p for an add (neg = 0,
    #   lift = p) and -w for a sub (neg = -1, lift = 0), and one conditional p brings x
    #   back to [0, p); a missing stream is a row of zeros with neg = lift = 0. Further
    #   streams are added in passes over the row's int64 accumulator.
    # counts[0] += values outside [0, p), counts[1] += words outside [0, p).
    rows, cols = out.shape
    n_adds, n_subs = adds.shape[0], subs.shape[0]
    streams = n_adds + n_subs
    bad_values = 0
    bad_words = 0
    w32 = np.uint64(np.uint32(weight))
    ws32 = np.uint64(np.uint32(weight_shoup))
    p64 = np.uint64(np.uint32(p))
    zero = np.zeros(cols, dtype=np.uint32)
    neg0 = np.int64(0) if (n_adds > 0 or streams == 0) else np.int64(-1)
    lift0 = p if n_adds > 0 else 0
    neg1 = np.int64(0) if (n_adds > 1 or streams < 2) else np.int64(-1)
    lift1 = p if n_adds > 1 else 0
    acc = np.empty(cols, dtype=np.int64)
    for r in range(rows):
        src = base[row0 + r, col0:col0 + cols]
        at = r * cols
        if streams == 0:
            first = zero
        elif n_adds > 0:
            first = adds[0, at:at + cols]
        else:
            first = subs[0, at:at + cols]
        if streams < 2:
            second = zero
        elif n_adds > 1:
            second = adds[1, at:at + cols]
        elif n_adds == 1:
            second = subs[0, at:at + cols]
        else:
            second = subs[1, at:at + cols]
        for c in range(cols):
            v = src[c]
            bad_values += (v < 0) | (v >= p)
            u = np.uint64(np.uint32(v))
            q = (u * ws32) >> np.uint64(32)
            x = np.int64(u * w32 - q * p64) - p
            x = x + ((x >> 63) & p)
            a = np.int64(first[c])
            b = np.int64(second[c])
            bad_words += (a >= p) + (b >= p)
            x = x + ((a ^ neg0) - neg0) - lift0
            x = x + ((x >> 63) & p)
            x = x + ((b ^ neg1) - neg1) - lift1
            acc[c] = x + ((x >> 63) & p)
        for k in range(2, streams):
            if k < n_adds:
                words = adds[k, at:at + cols]
                for c in range(cols):
                    w = np.int64(words[c])
                    bad_words += w >= p
                    x = acc[c] + w - p
                    acc[c] = x + ((x >> 63) & p)
            else:
                words = subs[k - n_adds, at:at + cols]
                for c in range(cols):
                    w = np.int64(words[c])
                    bad_words += w >= p
                    x = acc[c] - w
                    acc[c] = x + ((x >> 63) & p)
        dest = out[r]
        for c in range(cols):
            dest[c] = np.uint32(acc[c])
    counts[0] += bad_values
    counts[1] += bad_words


def _masked_chunks(grid, weight: int, plan, p: int, out, step: int) -> None:
    # masked_upload_streams for coefficients +1 / -1, chunk by chunk (see there). Each
    # stream writes its words straight into its row of the stacked buffers (``fill``
    # where the stream has it: no copy), and one kernel call per chunk does the rest.
    rows, cols = grid.shape
    signs = [coefficient == p - 1 for _, coefficient in plan]
    width = min(step, rows) * cols
    if width == 0:
        return
    located = _rows_of(grid)
    base, row0, col0 = located if located is not None else (np.ascontiguousarray(grid), 0, 0)
    weight_shoup = (weight << 32) // p
    counts = np.zeros(2, dtype=np.int64)
    adds = np.empty(signs.count(False) * width, dtype=np.uint32)
    subs = np.empty(signs.count(True) * width, dtype=np.uint32)
    for r0 in range(0, rows, step):
        r1 = min(rows, r0 + step)
        size = (r1 - r0) * cols
        add_rows = adds[:adds.size // width * size].reshape(-1, size)
        sub_rows = subs[:subs.size // width * size].reshape(-1, size)
        filled = {False: 0, True: 0}
        for (stream, _), negate in zip(plan, signs):
            target = (sub_rows if negate else add_rows)[filled[negate]]
            filled[negate] += 1
            fill = getattr(stream, "fill", None)
            words = fill(target) if fill is not None else stream.next(size)
            if words.shape != (size,) or words.dtype != np.uint32:
                raise ParameterError(f"a mask stream returned {words.shape} {words.dtype}, "
                                     f"expected ({size},) uint32")
            if fill is None:
                target[:] = words
        _pairwise_upload_kernel(base, row0 + r0, col0, weight, weight_shoup, add_rows,
                                sub_rows, p, out[r0:r1], counts)
        if counts[0]:
            raise ParameterError(f"values must be reduced field elements in [0, {p})")
        if counts[1]:
            raise ParameterError(f"a mask stream returned words outside [0, {p}) (its "
                                 "elements must be reduced)")


def add_upload(target: np.ndarray, upload, p: int) -> None:
    """Add a uint32 upload into an int64 accumulator view; ParameterError if any value >= p.

    The accumulator is reduced later (:func:`symmetrize_mod`, or ``% p``): up to 2^32
    uploads fit in int64 before that.
    """
    upload = np.asarray(upload, dtype=np.uint32)
    target_2d = target.reshape(1, -1) if target.ndim == 1 else target
    upload_2d = upload.reshape(target_2d.shape)
    if _add_upload_kernel(target_2d, upload_2d, int(p)):
        raise ParameterError(f"upload holds a value >= p = {p}")


def add_reduced(target: np.ndarray, upload, p: int) -> None:
    """``target <- (target + upload) mod p`` in place, reduced on every add.

    ``target`` is a 2-D uint32 or int64 view holding residues in [0, p) (e.g. a block of
    a memory-mapped result), ``upload`` a uint32 array of the same shape. Any number of
    uploads fit (unlike :func:`add_upload`, which defers the reduction). Raises
    ParameterError if ``upload`` held a value >= p, after adding: a caller that must add
    nothing on error checks the upload first.

    >>> t = np.array([[5, 6]], dtype=np.uint32)
    >>> add_reduced(t, np.array([[3, 0]], dtype=np.uint32), 7)
    >>> t.tolist()
    [[1, 6]]
    """
    kernel = _add_reduced_u32 if target.dtype == np.uint32 else _add_reduced_i64
    upload = np.ascontiguousarray(np.asarray(upload, dtype=np.uint32)).reshape(target.shape)
    located = _rows_of(target)
    if located is None:  # not a row/column block of a contiguous matrix: via a copy
        block = np.ascontiguousarray(target)
        bad = kernel(block, 0, 0, upload, target.dtype.type(p))
        target[...] = block
    else:
        bad = kernel(*located, upload, target.dtype.type(p))
    if bad:
        raise ParameterError(f"upload holds a value >= p = {p}")


def symmetrize_mod(matrix, p: int) -> np.ndarray:
    """Reduce the upper triangle mod p, mirror it below, zero the diagonal (in place)."""
    matrix = np.ascontiguousarray(matrix, dtype=np.int64)
    if matrix.ndim != 2 or matrix.shape[0] != matrix.shape[1]:
        raise ParameterError(f"a square matrix is needed, got shape {matrix.shape}")
    _symmetrize_kernel(matrix, int(p))
    return matrix
