"""Coordinator restart: the journal a coordinator writes, and the restore of a new
coordinator from it (docs/protocol.md, "Coordinator restart").

:class:`CoordinatorRestart` holds the methods of :class:`protocols._coordinator.Coordinator`
that write a round to the journal before its RoundStart goes out (``_journal_round``), give
the fingerprint a resumed session must share with the journaled one
(``parameters_fingerprint``), continue a journaled session in a new process (``restore``),
and let go of the journal and the result without deleting them (``keep_files``). They use
the coordinator's state; the rules of the journal are in :mod:`protocols._journal`.
"""

from __future__ import annotations

import base64
import logging

from finite_field import IntegrityError, ParameterError, ProtocolError

from ._generated import omnifc_pb2 as pb

__all__ = ["CoordinatorRestart"]

logger = logging.getLogger(__name__)


class CoordinatorRestart:
    """The coordinator's journal and restore (mixed into
    :class:`protocols._coordinator.Coordinator`)."""

    # -- coordinator restart (docs/protocol.md, "Coordinator restart") -------------------
    def _journal_round(self) -> None:
        """Journal the round before its RoundStart goes out (the first one with what a
        restarted coordinator checks the parties against: their signed hellos)."""
        if self.journal.records == 0:
            self.journal.append(
                "begin", session_id=self.session_id, parties=self.names,
                fingerprint=self.parameters_fingerprint, n=self.n_total,
                primes=list(self.plan.primes),
                hellos=[_b64(self.hellos[name]) for name in self.names],
                confirmations=[_b64(self.confirmations[name]) for name in self.names])
        self.journal.append(
            "round", round=self.round, responders=list(self.responders),
            excluded=list(self._excluded), lost=sorted(self.lost),
            aborted=sorted(self._aborted_rounds), deviations=list(self.deviations))

    @property
    def parameters_fingerprint(self) -> str:
        """SHA-256 (hex) of what a resumed session must share with the journaled one:
        the session id, the parties and their pinned keys, every parameter, B's rule."""
        import hashlib
        import json

        described = {"session_id": self.session_id, "parties": self.names,
                     "identities": [self.identities[n].hex() for n in self.names],
                     "parameters": self.parameters.to_proto(self.plan).SerializeToString().hex()
                     if self.plan is not None else None,
                     "first_responders": self._first_responders}
        return hashlib.sha256(json.dumps(described, sort_keys=True).encode()).hexdigest()

    def restore(self, records: list) -> list:
        """Continue, in a new process, a session whose coordinator died in evaluation,
        from its journal's verified ``records`` (:func:`protocols._journal.read_journal`)
        and the result at ``out``; returns nothing to send yet: every party is *away*
        until it resumes (:meth:`resume` then re-sends it the round's start, and the
        party re-sends the uploads of the round the journal does not hold).

        Refused (:class:`ParameterError`, nothing changed on disk) when the journal is
        another session's, the parameters, parties or first B differ from the journaled
        run, the decode had started, or the result file's journaled tiles differ from
        their digests (:class:`IntegrityError`). The hellos and roster confirmations
        are checked again (signatures, caps) as when they first arrived.
        """
        if self.phase != "join" or self.hellos or self.journal is None:
            raise ProtocolError("restore a new coordinator that keeps a journal")
        try:
            return self._restore(records)
        except Exception as error:
            self.keep_files()  # refused: the files stay as they were, for another try
            self._fail(error)
            raise

    def keep_files(self) -> None:
        """Let go of the journal and the result without deleting them (a resume that
        was refused, or could not start serving, may be tried again)."""
        if self.journal is not None:
            self.journal.close()
            self.journal = None
        acc, self._acc = self._acc, None
        if acc is not None:
            acc.release()

    def _restore(self, records: list) -> list:
        if not records or records[0].get("kind") != "begin":
            raise ParameterError("the journal holds no evaluation round: the coordinator "
                                 "died before evaluation started; nothing to resume")
        begin = records[0]
        if begin["session_id"] != self.session_id or begin["parties"] != self.names:
            raise ParameterError(f"the journal is of session {begin['session_id']!r} with "
                                 f"parties {begin['parties']}, not {self.session_id!r} with "
                                 f"{self.names}; refusing to resume")
        for name, raw in zip(self.names, begin["hellos"]):
            self._on_hello(name, pb.Hello.FromString(base64.b64decode(raw)))
        for name, raw in zip(self.names, begin["confirmations"]):
            self._on_confirmation(name, pb.RosterConfirmation.FromString(
                base64.b64decode(raw)))
        if begin["fingerprint"] != self.parameters_fingerprint:
            raise ParameterError("the session config changed since the journal was written "
                                 "(parameters, parties, keys or responders differ); "
                                 "refusing to resume")
        rounds = [r for r in records if r["kind"] == "round"]
        last = rounds[-1]
        if any(r["kind"] == "decode" and r["round"] == last["round"] for r in records):
            raise ParameterError(f"the coordinator died while decoding round "
                                 f"{last['round']} (the decode changes the result in place); "
                                 "nothing to resume: run the session again")
        first = self._first_responders or self.names
        if rounds[0]["round"] != 1 or rounds[0]["responders"] != \
                [p for p in self.names if p in first]:
            raise ParameterError(f"the journal's first responding set "
                                 f"{rounds[0]['responders']} is not this config's; refusing "
                                 "to resume")
        held = [(r["prime"], r["tile"], r["digest"]) for r in records
                if r["kind"] == "tile" and r["round"] == last["round"]]
        self.ready = set(self.names)
        for log in self._outlogs.values():
            log.drop()  # everything before the round was delivered in the first process
        self.round = last["round"] - 1
        self._excluded = list(last["excluded"])
        self.lost = set(last["lost"])
        self._aborted_rounds = set(last["aborted"])
        self.deviations = list(last["deviations"])
        self._restarted = set(self.names) - self.lost
        # its RoundStarts are held for the resumes
        self._start_round(list(last["responders"]), held={(k, i) for k, i, _ in held})
        for k, i, digest in held:
            a, b = self.tiles[i]
            if self._acc.region_digest(k, a, b) != digest:
                raise IntegrityError(f"the result file was changed since the journal "
                                     f"recorded tile {i} of prime {k} (its digest "
                                     "differs); refusing to resume")
        self.away = set(self._restarted)
        logger.warning("session %r restored from its journal in round %d: %d of %d tiles "
                       "held; waiting for %s to resume", self.session_id, self.round,
                       len(held), len(self.plan.primes) * len(self.tiles),
                       sorted(self._restarted))
        return []


def _b64(message) -> str:
    return base64.b64encode(message.SerializeToString()).decode()
