"""The notifications directory ``<data>/notifications/``: one JSON file per resource heard of.

A record's file name is a hash of the publication's owner and id (``record_key``), so any id is a
safe file name. The file holds the latest change of that resource heard of (``version``, and
``kind``: ``added``, ``changed`` or ``removed``; see ``superpeer.versions``): a newer version
replaces it (and is listed again, under a new sequence number); a notification of a version
already stored, or older, is ignored and counted (the network promises each change once per
subscriber, but a super-peer that re-sends its offline outbox after a crash, or a daemon
restarted between receiving and acknowledging, can repeat one). Records are written atomically
and durably (``peer.files``), so a record exists completely or not at all. A record::

    {"format": 1,
     "sequence": 7,                       # receive order in this inbox, from 1, never reused
     "publication": "n1",                 # the publication's id, unique per owner
     "version": 0,                        # the resource's version (0: first publication)
     "kind": "added",                     # what the change is for this peer's subscriptions
     "owner": "peer-9f8e7d6c",            # the publishing peer
     "subject": "http://example.org/a",
     "ntriples": "# publication {...}\\n<http://example.org/a> <...> \\"...\\" .\\n",
     "subscriptions": ["s1"],             # this peer's subscriptions it matched
     "access_point": "127.0.0.1:7400",    # the owner's super-peer (to fetch the resource)
     "origin": "sp-1a2b3c4d",             # the super-peer where it entered the network
     "hops": 2,                           # super-peer to super-peer hops on the way
     "published_at": 1764108000.25,       # when the origin accepted it (hybrid time: clocks)
     "received_at": 1764108000.31}        # when this peer stored it (this machine's clock)

``ntriples`` is the publication's canonical text (sorted N-Triples after a comment header line),
which ``qel.parse_publication_text`` reads back into an equal publication.

Storing is split in three steps so that the daemon can do the slow part (the syncs) in a worker
thread while the index stays owned by one task: ``prepare`` (dedup, sequence, the bytes),
``write`` (the files), ``commit`` (the record becomes visible to readers). The notifications of
one read go through them as a group (the daemon's ``inbox_group`` at most): each is prepared,
the group is written with two syncs in all (``peer.files.write_all_atomically``), then each is
committed and the group acknowledged. A record a second time in one group (a resource changed
twice) is written once, as its newer version. A sync pair and a ``Delivered`` per
notification held a subscriber to 507 notifications a second on this machine, whose fsync takes
0.2 ms (``bench.inbox``: 2,529 in groups), and to a few hundred on a disk whose fsync takes
milliseconds, below what one publisher's catalogue sends. A write that fails ends the inbox's
use (the daemon stops: it must not acknowledge notifications it cannot keep).
"""

from __future__ import annotations

import bisect
import hashlib
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from peer.files import remove_temporary_files, write_all_atomically, write_atomically
from wire import messages as m

RECORD_FORMAT: Final = 1
log = logging.getLogger("peer.inbox")


def record_key(owner: str, publication_id: str) -> str:
    return hashlib.sha256(json.dumps([owner, publication_id]).encode()).hexdigest()[:32]


@dataclass(frozen=True, slots=True)
class PendingRecord:
    key: str
    sequence: int
    path: Path
    data: bytes
    owner: str = ""
    origin: str = ""

    def write(self) -> None:
        write_atomically(self.path, self.data)


def _index_of(path: Path) -> tuple[int, int, str, str]:
    """A record's sequence number, version (records written before versions are 0), owner and
    origin."""
    record = json.loads(path.read_bytes())
    sequence = record.get("sequence") if isinstance(record, dict) else None
    if isinstance(sequence, bool) or not isinstance(sequence, int) or sequence < 1:
        raise ValueError(f"no valid sequence number (found {sequence!r})")
    version = record.get("version", 0)
    if isinstance(version, bool) or not isinstance(version, int) or version < 0:
        raise ValueError(f"no valid version (found {version!r})")
    return sequence, version, str(record.get("owner", "")), str(record.get("origin", ""))


class Inbox:
    """The records of one notifications directory, indexed by key and by sequence."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.duplicates = 0
        """Notifications ignored because their publication was already stored (this run)."""
        self.withdrawn = 0
        """Notifications ignored because every subscription they name had been withdrawn when
        they were published (``peer.state.withdrawn_before``; this run)."""
        self.unreadable = 0
        """Record files found damaged when the inbox was opened (kept, skipped, logged)."""
        self.writes = 0
        """Groups of records written, each with its own syncs (``write``; this run)."""
        self._versions: dict[str, int] = {}
        """Per record key, the version stored (0 for a damaged record: it still blocks repeats of
        the first version, a newer one replaces it)."""
        self._sequences: dict[str, int] = {}
        self._order: list[tuple[int, str]] = []
        self._next_sequence = 1
        self._origins: dict[str, tuple[int, str]] = {}
        """Per owner, the super-peer its latest notification here came from (its access point
        then), with that record's sequence: where ``peer locate`` asks first."""

    @classmethod
    def open(cls, directory: Path) -> Inbox:
        """Creates the directory if needed, clears interrupted writes, and indexes the records."""
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        remove_temporary_files(directory)
        inbox = cls(directory)
        for path in directory.glob("*.json"):
            try:
                sequence, version, owner, origin = _index_of(path)
            except (OSError, ValueError) as error:
                inbox.unreadable += 1
                inbox._versions[path.stem] = 0
                log.warning("event=unreadable_record file=%s error=%r", path, str(error))
                continue
            inbox._versions[path.stem] = version
            inbox._sequences[path.stem] = sequence
            inbox._order.append((sequence, path.stem))
            inbox._note_origin(owner, origin, sequence)
        inbox._order.sort()
        if inbox._order:
            inbox._next_sequence = inbox._order[-1][0] + 1
        return inbox

    @property
    def count(self) -> int:
        return len(self._order)

    @property
    def last_sequence(self) -> int:
        return self._order[-1][0] if self._order else 0

    def prepare(self, notify: m.Notify, received_at: float) -> PendingRecord | None:
        """The record to write for ``notify``, or None (counted) if that version or a newer one
        of its resource is stored."""
        publication = notify.publication
        key = record_key(notify.owner, publication.id)
        if self._versions.get(key, -1) >= notify.version:
            self.duplicates += 1
            return None
        self._versions[key] = notify.version
        sequence = self._next_sequence
        self._next_sequence += 1
        record = {
            "format": RECORD_FORMAT,
            "sequence": sequence,
            "publication": publication.id,
            "version": notify.version,
            "kind": notify.kind,
            "owner": notify.owner,
            "subject": publication.subject.value,
            "ntriples": publication.to_text(),
            "subscriptions": list(notify.subscriptions),
            "access_point": notify.access_point,
            "origin": notify.origin,
            "hops": notify.hops,
            "published_at": notify.published_at,
            "received_at": received_at,
        }
        data = (json.dumps(record, indent=2, ensure_ascii=False) + "\n").encode()
        path = self.directory / f"{key}.json"
        return PendingRecord(key, sequence, path, data, notify.owner, notify.origin)

    def write(self, records: Sequence[PendingRecord]) -> None:
        """Write ``records`` durably (in a worker thread: it syncs), each file atomically: one
        alone with its own fsyncs, a group with two syncs in all. Of two records of one
        resource, the later (the newer version: ``prepare`` lets no older one through) is the
        one written."""
        if len(records) == 1:
            records[0].write()
        elif records:
            write_all_atomically(self.directory, {r.path.name: r.data for r in records})
        else:
            return
        self.writes += 1

    def find(self, publication_id: str) -> list[dict[str, Any]]:
        """The records of publication ``publication_id`` (one per owner that used the id)."""
        found = []
        for _, key in self._order:
            try:
                record = json.loads((self.directory / f"{key}.json").read_bytes())
            except (OSError, ValueError):
                continue
            if isinstance(record, dict) and record.get("publication") == publication_id:
                found.append(record)
        return found

    def commit(self, pending: PendingRecord) -> None:
        replaced = self._sequences.get(pending.key)
        if replaced is not None:
            del self._order[bisect.bisect_left(self._order, (replaced, pending.key))]
        self._sequences[pending.key] = pending.sequence
        self._order.append((pending.sequence, pending.key))
        self._note_origin(pending.owner, pending.origin, pending.sequence)

    def _note_origin(self, owner: str, origin: str, sequence: int) -> None:
        if origin and sequence > self._origins.get(owner, (0, ""))[0]:
            self._origins[owner] = (sequence, origin)

    def last_origin(self, owner: str) -> str:
        """The super-peer ``owner``'s latest notification in this inbox came from (empty: none
        is here)."""
        return self._origins.get(owner, (0, ""))[1]

    def records_after(self, sequence: int, *, max_bytes: int) -> list[dict[str, Any]]:
        """Records with a sequence above ``sequence``, in receive order, as many as fit in
        ``max_bytes`` of JSON (at least one, if there is one)."""
        start = bisect.bisect_right(self._order, (sequence, "\uffff"))
        records: list[dict[str, Any]] = []
        size = 0
        for _, key in self._order[start:]:
            path = self.directory / f"{key}.json"
            try:
                data = path.read_bytes()
                record = json.loads(data)
            except (OSError, ValueError) as error:
                # Removed or edited by hand since it was indexed: what is left is still listed.
                log.warning("event=unreadable_record file=%s error=%r", path, str(error))
                continue
            size += len(data)
            if records and size > max_bytes:
                break
            records.append(record)
        return records
