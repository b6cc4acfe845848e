"""What the coordinator does when the integrity checks flag a round: correct it, exclude
the named parties and rerun, or end the session (docs/integrity.md, "Declared adversaries").

:class:`DeviationHandling` holds the methods of :class:`protocols._coordinator.Coordinator`
that say what the checks covered (``_integrity_status``) and act on a nonzero syndrome
(``_on_deviation``); :func:`_deviation_message` puts a deviation record in a Result.
"""

from __future__ import annotations

import logging

from finite_field import DeviationError

from ._generated import omnifc_pb2 as pb
from ._integrity import verdict

__all__ = ["DeviationHandling"]

logger = logging.getLogger(__name__)


class DeviationHandling:
    """The coordinator's handling of detected deviations (mixed into
    :class:`protocols._coordinator.Coordinator`)."""

    def _integrity_status(self) -> str:
        if self.checks is not None:
            return (f"checked: s = {self.checks.checks} parity check(s) over "
                    f"{len(self.responders)} responders, radius {self.checks.radius}, "
                    f"A = {self.adversaries}")
        if self.parameters.integrity == "off" or not self.session.has_checks:
            return "off"
        return "unchecked: r = 0 redundant responders"

    def _on_deviation(self):
        """Some syndrome was nonzero: correct, exclude and rerun, or raise DeviationError.

        Returns None when the round's (corrected) sums may be decoded, else the messages
        of the rerun. The rules that keep the guarantees against any A deviating parties
        (docs/integrity.md, "Declared adversaries"):

        * the verdict assumes at most A deviators, those excluded earlier among them, so
          it names only parties in every explanation of the errors (never an innocent);
        * "correct" accepts the round only if every flagged entry was located and the
          errors are explained within A: with tau + A' <= s (the round's radius) nothing
          located is mislocated, and what is not located is refused; otherwise the round
          is handled as "detect";
        * a rerun excludes named responders only, and only if it is itself checked against
          the deviators left (K + max(A' - excluded, 1) responders); else the session ends.
        """
        found, checks = self.findings, self.checks
        left = self._adversaries_left
        attribution = verdict(found, self.names, self.adversaries, known=self._excluded)
        named = tuple(attribution.named) if attribution.explained else ()
        suspects = tuple(attribution.suspects) if attribution.explained else ()
        what = (f"{found.flagged} entries failed the parity checks in round {self.round} "
                f"({found.uncorrectable} could not be located within radius "
                f"{checks.radius} of s = {checks.checks} checks)")
        if not attribution.explained:
            who = (f"more than the declared A = {self.adversaries} parties deviate "
                   "(no explanation of the errors is that small)")
        elif attribution.clean and not found.triples:
            who = "no error could be located"
        else:
            who = attribution.describe()
        excluded = ", ".join(map(repr, self._excluded))
        if attribution.clean and found.triples and not attribution.named and excluded:
            who = f"the parties already excluded ({excluded}) explain every located error"
        elif excluded:
            who += f" (already excluded: {excluded})"
        record = {"round": self.round, "named": list(named),
                  "suspects": [list(x) for x in suspects], "description": f"{what}: {who}"}
        logger.warning("session %r: integrity: %s: %s", self.session_id, what, who)
        if self.parameters.integrity == "correct" and attribution.explained and \
                found.uncorrectable == 0:
            self.deviations.append(record | {"action": "corrected"})
            return None
        exclude = [p for p in self.responders if p in named]
        remaining = [p for p in self.responders if p not in exclude and p not in self.lost]
        needed = self.min_responders + max(left - len(exclude), 1)  # checked against the rest
        if exclude and len(remaining) >= needed:
            self.deviations.append(record | {"action": "excluded"})
            self._excluded.extend(exclude)
            logger.warning("round %d rejected by the integrity checks; rerunning without %s "
                           "with %s", self.round, exclude, remaining)
            self._aborted_rounds.add(self.round)
            self._enter("evaluation")
            return self._start_round(remaining)
        reason = ("nobody can be excluded" if not exclude else
                  f"excluding {exclude} leaves {len(remaining)} responders, a rerun checked "
                  f"against the deviators left needs {needed}")
        raise DeviationError(f"integrity check failed in phase 'decode': {what}: {who}; "
                             f"{reason}, so the session returns nothing",
                             named=tuple(self._excluded) + named, suspects=suspects)


def _deviation_message(record: dict) -> pb.Deviation:
    return pb.Deviation(round=record["round"], named=record["named"],
                        suspects=[pb.Suspects(parties=x) for x in record["suspects"]],
                        action=record["action"], description=record["description"])
