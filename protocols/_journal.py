"""The coordinator's journal: what a restarted coordinator needs to continue a session.

``omnifc serve`` keeps, beside the result it accumulates on disk, an append-only journal
of the session's evaluation (docs/protocol.md, "Coordinator restart"). Each record is
written with one ``write`` and fsynced before the coordinator goes on, in this order:

- ``begin``: the session id, the config's fingerprint, the signed hellos and roster
  confirmations (in roster order) and the result file's shape: written when the first
  round starts (a session that dies before evaluation has nothing to resume);
- ``round``: a round's number, its responding set B and what earlier rounds decided
  (excluded and lost parties, abandoned rounds, deviations): written before its
  ``RoundStart`` is sent;
- ``tile``: one tile (prime, tile index) of the current round written into the result
  with every responder's upload, and a BLAKE2b digest of its region of the result file
  (written there first: a process that dies leaves its writes in the page cache; after
  a machine crash a region that did not reach the disk fails its digest and the resume
  is refused, never taken);
- ``decode``: the decode started (it changes the result in place: a resume is then
  refused).

Every record carries an HMAC-SHA256 chained over all records before it, under a key
derived from the coordinator's TLS private key (:func:`journal_key`): a record changed,
removed or inserted by anyone without that key is refused (:class:`IntegrityError`). Only
a *torn* last record (shorter than its length says: the process died in the write) is
dropped, with a log line: its tile is then simply received again.

>>> import os, tempfile
>>> path = os.path.join(tempfile.mkdtemp(), "session.journal")
>>> journal = Journal.create(path, b"k" * 32)
>>> journal.append("begin", session_id="s", fingerprint="f")
>>> journal.append("tile", round=1, prime=0, tile=3, digest="00")
>>> [r["kind"] for r in read_journal(path, b"k" * 32)]
['begin', 'tile']
>>> try:
...     read_journal(path, b"x" * 32)                   # another key: refused
... except IntegrityError as error:
...     print("refused:", "does not verify at record 1 of 2" in str(error))
refused: True
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import struct
from pathlib import Path

from finite_field import IntegrityError, ParameterError

__all__ = ["Journal", "read_journal", "journal_key", "count_records", "JOURNAL_MAGIC", "WORK_DIR",
           "why_not_journaled", "open_serve_journal"]

logger = logging.getLogger(__name__)

#: The first bytes of every journal (its format).
JOURNAL_MAGIC = b"omnifc-journal/1\n"
_LENGTH = struct.Struct(">I")
_MAC_BYTES = 32
#: A record's largest size (the begin record of 1,000 parties is about 0.5 MB).
MAX_RECORD_BYTES = 64 * 2**20


def journal_key(tls_private_key_pem: bytes, session_id: str) -> bytes:
    """The journal's MAC key: HKDF-SHA256 of the coordinator's TLS private key (the one
    secret a restarted coordinator reads again), bound to the session.

    >>> len(journal_key(b"-----BEGIN PRIVATE KEY-----...", "s"))
    32
    """
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF

    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None,
                info=b"omnifc journal/1 " + session_id.encode()).derive(bytes(tls_private_key_pem))


def _mac(key: bytes, previous: bytes, body: bytes) -> bytes:
    return hmac.new(key, previous + _LENGTH.pack(len(body)) + body, hashlib.sha256).digest()


class Journal:
    """An open journal, appended to record by record (each fsynced)."""

    def __init__(self, path: Path, key: bytes, fd: int, chain: bytes, records: int) -> None:
        self.path, self._key, self._fd = path, bytes(key), fd
        self._chain, self.records = chain, records

    @classmethod
    def create(cls, path, key: bytes) -> "Journal":
        """A new journal at ``path`` (which must not exist)."""
        path = Path(path)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o600)
        except FileExistsError:
            raise ParameterError(f"a journal exists already at {str(path)!r}: resume that "
                                 "session (omnifc serve --resume) or move it away") from None
        os.write(fd, JOURNAL_MAGIC)
        os.fsync(fd)
        _fsync_directory(path.parent)
        return cls(path, key, fd, _mac(key, b"", JOURNAL_MAGIC), 0)

    @classmethod
    def reopen(cls, path, key: bytes) -> tuple["Journal", list]:
        """The journal at ``path`` opened for appending, and its verified records (a torn
        last record is cut off first)."""
        path = Path(path)
        records, chain, good = _read(path, key)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND)
        os.ftruncate(fd, good)
        return cls(path, key, fd, chain, len(records)), records

    def append(self, kind: str, **fields) -> None:
        """Write one record and fsync it."""
        body = json.dumps({"kind": kind, **fields}, sort_keys=True,
                          separators=(",", ":")).encode()
        mac = _mac(self._key, self._chain, body)
        os.write(self._fd, _LENGTH.pack(len(body)) + body + mac)
        os.fsync(self._fd)
        self._chain = mac
        self.records += 1

    def close(self, *, remove: bool = False) -> None:
        """Close it; ``remove=True`` deletes the file (the session ended)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if remove:
            try:
                self.path.unlink()
            except FileNotFoundError:
                pass


def read_journal(path, key: bytes) -> list[dict]:
    """The verified records of the journal at ``path``, oldest first.

    Raises :class:`IntegrityError` when a record does not verify under ``key`` (the
    journal was changed, or belongs to another session or coordinator key) and
    :class:`ParameterError` when ``path`` is not a journal.
    """
    return _read(Path(path), key)[0]


def _read(path: Path, key: bytes) -> tuple[list, bytes, int]:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise ParameterError(f"no journal at {str(path)!r}: nothing to resume") from None
    if not data.startswith(JOURNAL_MAGIC):
        raise ParameterError(f"{str(path)!r} is not an omnifc journal")
    chain = _mac(key, b"", JOURNAL_MAGIC)
    records = []
    frames, offset = _frames(data)
    torn = len(data) - offset
    total = len(frames)
    for i, (body, mac) in enumerate(frames):
        expected = _mac(key, chain, body)
        if not hmac.compare_digest(mac, expected):
            raise IntegrityError(f"the coordinator's journal {str(path)!r} does not verify at "
                                 f"record {i + 1} of {total}: it was changed, or it is "
                                 "another session's or another coordinator key's; refusing "
                                 "to resume")
        chain = expected
        records.append(json.loads(body))
    if torn:
        logger.warning("journal %s: its last %d bytes are a record cut off by the process's "
                       "end; dropped (its tile is received again)", path, torn)
    return records, chain, offset


def count_records(path, kind: str) -> int:
    """Complete records of ``kind`` in the journal at ``path`` (0 when there is none),
    counted without the key (nothing is verified: for progress and tests).

    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "j")
    >>> journal = Journal.create(path, b"k" * 32)
    >>> journal.append("tile", round=1, prime=0, tile=0, digest="00")
    >>> count_records(path, "tile"), count_records(path, "round")
    (1, 0)
    """
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        return 0
    marker = f'"kind":"{kind}"'.encode()
    return sum(marker in body for body, _ in _frames(data)[0])


def _frames(data: bytes) -> tuple[list, int]:
    """``([(body, mac), ...], end)``: the complete records after the magic, and where
    they end (a torn last record, if any, starts there)."""
    offset, frames = len(JOURNAL_MAGIC), []
    while offset + _LENGTH.size <= len(data):
        (length,) = _LENGTH.unpack_from(data, offset)
        start = offset + _LENGTH.size
        end = start + length + _MAC_BYTES
        if length > MAX_RECORD_BYTES or end > len(data):
            break
        frames.append((data[start:start + length], data[start + length:end]))
        offset = end
    return frames, offset


def _fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# -- the journal of ``omnifc serve`` --------------------------------------------------
#: The folder, inside a serve run's result folder, that holds the journal and the result
#: being accumulated while the session runs (removed when it ends).
WORK_DIR = "in-progress"


def why_not_journaled(parameters, *, tls: bool = True) -> str | None:
    """Why a coordinator of a session with these parameters keeps no journal (None: it
    can keep one); ``tls=False``: the config has TLS off (``omnifc serve`` derives the
    journal's key from the coordinator's TLS key)."""
    from ._plans import session_type

    if not tls:
        return "TLS is off (the journal's key is derived from the coordinator's TLS key)"
    if parameters.reconnect_grace <= 0:
        return "reconnect_grace = 0 (the parties could not come back to a restarted coordinator)"
    if not session_type(parameters).journals:
        return f"a {parameters.kind} session of the {parameters.layout} layout keeps its " \
            "result in memory"
    return None


def open_serve_journal(config, folder, *, resume: bool) -> tuple[Journal, list, Path]:
    """``(journal, records, result path)`` of ``omnifc serve`` in ``folder``: a new
    journal (``records`` empty; the folder's work folder is made), or, with ``resume``,
    the existing one reopened and verified."""
    work = Path(folder) / WORK_DIR
    files = config.coordinator_tls()
    pem = files.key if isinstance(files.key, bytes) else Path(files.key).read_bytes()
    key = journal_key(pem, config.session_id)
    if resume:
        journal, records = Journal.reopen(work / "session.journal", key)
    else:
        work.mkdir(parents=True, exist_ok=True)
        journal, records = Journal.create(work / "session.journal", key), []
    return journal, records, work / "result.npy"
