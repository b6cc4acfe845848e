"""The audit's figures: one headless pyplot, and what a reader sees of a saved figure."""

from __future__ import annotations

__all__ = ["pyplot", "save_figure"]


def pyplot():
    """matplotlib's pyplot on the non-interactive Agg backend (no display needed)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig, path) -> list:
    """Lay out, save (110 dpi) and close ``fig``; return what a reader sees of it: every
    axes' title and x label and its legend's entries, for tests to check.

    >>> plt = pyplot()
    >>> fig, ax = plt.subplots()
    >>> _ = ax.set_title("t"); _ = ax.plot([0, 1], label="a"); _ = ax.legend()
    >>> import tempfile, os
    >>> save_figure(fig, os.path.join(tempfile.mkdtemp(), "f.png"))
    ['t', '', 'a']
    """
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    texts = [t for ax in fig.axes for t in [ax.get_title(), ax.get_xlabel()] + (
        [x.get_text() for x in ax.get_legend().get_texts()] if ax.get_legend() else [])]
    pyplot().close(fig)
    return texts
