"""Progress inside a long clustering: rate-limited INFO records, rendered by the CLI.

The long steps of a clustering (the swap rounds of PAM, the runs of Lloyd and of fuzzy
c-means, the passes of the streamed MDS over D, one long eigendecomposition) say how far
they are under the logger of this module. Library code only logs: the CLI
(:func:`omnifc.cli._session_io.clustering_progress`) turns the records into its phase
display, and a Python user sees them with ``logging.basicConfig(level=logging.INFO)``.

A :class:`Steps` says its first step, then at most one step per :data:`EVERY` seconds,
and always its last one (when the total is known), so a clustering of a few
milliseconds says at most two lines and a long one about one line per :data:`EVERY`
seconds.

>>> import logging
>>> steps = Steps("k-means", "run", total=3)
>>> for run in range(1, 4):
...     steps.step(run)
>>> steps.said
['k-means: run 1 of 3', 'k-means: run 3 of 3']
"""

from __future__ import annotations

import logging
import time

__all__ = ["Steps", "started", "EVERY"]

logger = logging.getLogger(__name__)

#: Seconds between two progress records of one task (first and last steps excepted).
EVERY = 2.0


class Steps:
    """The progress of one task counted in steps (``total`` steps, or at most
    ``at_most`` when the task may stop early, or neither)."""

    def __init__(self, task: str, unit: str, *, total: int | None = None,
                 at_most: int | None = None) -> None:
        self.task, self.unit, self.total, self.at_most = task, unit, total, at_most
        self._last = None
        self.said: list[str] = []  # what this task said (for tests and doctests)

    def step(self, done: int, detail: str = "") -> None:
        """Step ``done`` (1-based) has finished or begins; ``detail`` is appended."""
        now = time.monotonic()
        last = self.total is not None and done >= self.total
        if self._last is not None and not last and now - self._last < EVERY:
            return
        self._last = now
        text = f"{self.task}: {self.unit} {done}"
        if self.total is not None:
            text += f" of {self.total}"
        elif self.at_most is not None:
            text += f" (at most {self.at_most})"
        if detail:
            text += f", {detail}"
        self.said.append(text)
        logger.info("%s", text)


def started(task: str, what: str) -> None:
    """One long call without steps (an eigendecomposition) begins: said once."""
    logger.info("%s: %s", task, what)
