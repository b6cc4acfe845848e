"""Where a party's CSV file goes wrong, in the words of a user looking at the file.

:func:`numpy.loadtxt` numbers rows from 0 and columns from 1 in one message, and its
ragged-file advice (``usecols``) is an option of numpy, not of ``omnifc join``. These
helpers read the file again only after numpy refused it (or let a NaN through), and name
the first bad cell by its 1-based line and column, as an editor shows it.
"""

from __future__ import annotations

import math

__all__ = ["csv_problem"]


def _cells(path):
    """``(line number, [cells])`` of each line numpy reads (blank and ``#`` lines skipped)."""
    with open(path, encoding="utf-8", errors="replace") as handle:
        for number, line in enumerate(handle, 1):
            text = line.split("#", 1)[0].strip()
            if text:
                yield number, [cell.strip() for cell in text.split(",")]


def csv_problem(path) -> str | None:
    """The first cell that is not a finite number, or the first line whose width differs,
    as ``"line 3, column 2: 'abc' is not a number"``; None when nothing is found."""
    width = first = None
    for number, cells in _cells(path):
        for column, cell in enumerate(cells, 1):
            try:
                value = float(cell)
            except ValueError:
                hint = " (the file must have no header line)" if number == 1 else ""
                return f"line {number}, column {column}: {cell!r} is not a number{hint}"
            if not math.isfinite(value):
                return (f"line {number}, column {column}: {cell!r} is not a finite number "
                        "(every entry must be a real number)")
        if width is None:
            width, first = len(cells), number
        elif len(cells) != width:
            return (f"line {number} has {len(cells)} values, line {first} has {width}: every "
                    "row needs the same number of columns")
    return None
