"""The reproduction pages' figures: Agg figures without pyplot, legends that cover nothing.

Moved here unchanged from :mod:`._report` (issue 20), which re-exports every name.
:func:`require_plots` names the ``plots`` extra when matplotlib is missing.

>>> fig, axes = figure(2)
>>> len(axes), legend_overlaps(fig)
(2, [])
"""

from __future__ import annotations

from finite_field import ParameterError

__all__ = ["PLOTS_HINT", "require_plots", "figure", "pair_lines", "legend_overlaps",
           "place_legends"]

PLOTS_HINT = 'pip install "omnifc[plots]"'


def require_plots() -> None:
    """Raise :class:`ParameterError` naming the ``plots`` extra unless matplotlib imports.

    Called before any experiment runs, so a missing extra costs no time and writes nothing.
    """
    try:
        import matplotlib  # noqa: F401
    except ImportError as error:
        raise ParameterError(f"omnifc reproduce writes plots and needs matplotlib, which is "
                             f"not installed ({error}); install the plotting extra: "
                             f"{PLOTS_HINT}") from error


def figure(n_panels: int, width: float = 5.0, height: float = 3.8):
    require_plots()
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width * n_panels, height))
    FigureCanvasAgg(fig)
    return fig, fig.subplots(1, n_panels, squeeze=False)[0]


def pair_lines(ax, xs, plain, secure, label, color):
    """Plaintext as a wide light line, secure as a thin dashed line on top: both visible."""
    ax.plot(xs, plain, "-", color=color, linewidth=5, alpha=0.35, label=f"{label} (plaintext)")
    ax.plot(xs, secure, "--", color=color, linewidth=1.4, marker="o", markersize=3,
            label=f"{label} (secure)")


def legend_overlaps(fig) -> list[str]:
    """The texts (annotations, labels) that a legend of ``fig`` covers, as drawn.

    >>> fig, (ax,) = figure(1)
    >>> _ = ax.text(0.05, 0.95, "covered", transform=ax.transAxes, va="top")
    >>> _ = ax.plot([0, 1], [0, 1], label="a line")
    >>> _ = ax.legend(loc="upper left")
    >>> legend_overlaps(fig)
    ["legend of 'a line' covers 'covered'"]
    """
    return [f"legend of {ax.get_legend().get_texts()[0].get_text()!r} covers "
            f"{text.get_text()!r}" for ax, texts in _covered(fig).items() for text in texts]


def place_legends(fig) -> None:
    """Move every legend that covers a text of its axes below the axes, where it cannot."""
    for ax in _covered(fig):
        size = ax.get_legend().get_texts()[0].get_fontsize()
        ax.legend(fontsize=size, loc="upper center", bbox_to_anchor=(0.5, -0.18),
                  frameon=False)


def _covered(fig) -> dict:
    """{axes: the texts its legend covers} for the axes where there are any, from one draw."""
    renderer = fig.canvas.get_renderer()
    fig.draw_without_rendering()
    covered = {}
    for ax in fig.axes:
        if ax.get_legend() is None:
            continue
        box = ax.get_legend().get_window_extent(renderer)
        texts = [t for t in ax.texts
                 if t.get_text() and box.overlaps(t.get_window_extent(renderer))]
        if texts:
            covered[ax] = texts
    return covered
