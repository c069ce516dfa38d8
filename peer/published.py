"""What this peer published: ``<data>/published/``, one JSON file per resource it owns.

The access point keeps the versions of a peer's resources (``superpeer.versions``); the peer keeps
this journal so that a person can see, change and retract what they published without
remembering its ids (the web app's Share page; the commands write it too, whoever publishes).
A record is written when the access point acknowledges the change, in the answer's callback,
like ``peer.state``::

    {"format": 1,
     "id": "paper-1",                     # the publication id (the resource's name)
     "subject": "http://example.org/a",
     "ntriples": "...",                   # what is published about it now: the last version,
                                          # or the union of the extensions (canonical text)
     "changes": 2,                        # acknowledged changes (first publication included)
     "first_published": 1764108000.25,    # this machine's clock
     "last_changed": 1764108100.5,
     "expires": null,                     # the resource's expiry (absolute), if any
     "retracted": false}

The file name is a hash of the id, so any id is a safe name. A document with several subjects
is several resources (``id#1``, ``id#2``, ...), each with its record. Leaving the network
clears the journal: the access point forgets the resources of a peer that leaves.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
from pathlib import Path
from typing import Any, Final

import qel
from peer.files import remove_temporary_files, write_all_atomically, write_atomically

RECORD_FORMAT: Final = 1
log = logging.getLogger("peer.published")


def file_name(publication_id: str) -> str:
    """The file of a resource's record: a hash of its id, so any id is a safe name (also
    ``peer.kept``'s)."""
    return hashlib.sha256(publication_id.encode()).hexdigest()[:32] + ".json"


class Published:
    """The journal of one data directory; see the module docstring."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    @classmethod
    def open(cls, directory: Path) -> Published:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        remove_temporary_files(directory)
        return cls(directory)

    def get(self, publication_id: str) -> dict[str, Any] | None:
        try:
            record = json.loads((self.directory / file_name(publication_id)).read_bytes())
        except (OSError, ValueError):
            return None
        return record if isinstance(record, dict) and record.get("id") == publication_id else None

    def record(
        self, publication: qel.Publication, change: str, expires: float | None, now: float
    ) -> None:
        """The access point accepted ``publication`` as a ``change`` (``publish``, ``update`` or
        ``extend``) of the resource it names."""
        record = self._changed(publication, change, expires, now)
        if record is not None:
            self._write(record)

    def record_all(
        self, publications: list[qel.Publication], expires: float | None, now: float
    ) -> None:
        """The access point accepted each of ``publications`` (first publications, a batch of a
        bulk publication): one write for all (``write_all_atomically``)."""
        files = {}
        for publication in publications:
            record = self._changed(publication, "publish", expires, now)
            if record is not None:
                files[file_name(record["id"])] = _encoded(record)
        if files:
            write_all_atomically(self.directory, files)

    def _changed(
        self, publication: qel.Publication, change: str, expires: float | None, now: float
    ) -> dict[str, Any] | None:
        """The record of the resource once ``change`` is made (None: it is unchanged)."""
        previous = self.get(publication.id)
        statements = publication.statements
        if change == "extend" and previous is not None:
            try:
                known = qel.parse_publication_text(previous["ntriples"]).statements
            except qel.QelError as error:  # edited by hand: the new version stands alone
                log.warning("event=unreadable_published id=%r error=%r", publication.id, str(error))
            else:
                statements = statements | known
        current = qel.Publication(
            publication.subject, statements, publication.publisher, publication.id
        ).to_text()
        if previous is None or previous.get("retracted") or change == "publish":
            if previous is not None and previous.get("ntriples") == current:
                return None  # the same content again: the access point changed nothing either
            changes, first, kept_expiry = 1, now, expires
        else:
            changes = int(previous.get("changes", 0)) + 1
            first, kept_expiry = previous["first_published"], previous.get("expires")
        return {
            "format": RECORD_FORMAT,
            "id": publication.id,
            "subject": publication.subject.value,
            "ntriples": current,
            "changes": changes,
            "first_published": first,
            "last_changed": now,
            "expires": kept_expiry,
            "retracted": False,
        }

    def retracted(self, publication_id: str, now: float) -> None:
        record = self.get(publication_id)
        if record is None or record.get("retracted"):
            return
        self._write({**record, "retracted": True, "last_changed": now})

    def records(self) -> list[dict[str, Any]]:
        """Every record, the most recently changed first."""
        found = []
        for path in self.directory.glob("*.json"):
            try:
                record = json.loads(path.read_bytes())
            except (OSError, ValueError) as error:
                log.warning("event=unreadable_published file=%s error=%r", path, str(error))
                continue
            if isinstance(record, dict) and "id" in record:
                found.append(record)
        return sorted(found, key=lambda r: (-float(r.get("last_changed", 0)), r["id"]))

    def clear(self) -> None:
        """The peer left the network: its resources are gone with it."""
        shutil.rmtree(self.directory, ignore_errors=True)
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)

    def _write(self, record: dict[str, Any]) -> None:
        write_atomically(self.directory / file_name(record["id"]), _encoded(record))


def _encoded(record: dict[str, Any]) -> bytes:
    return (json.dumps(record, indent=2, ensure_ascii=False) + "\n").encode()
