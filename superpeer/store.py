"""What a super-peer keeps across restarts, behind one interface with two implementations.

``SuperPeerNode`` calls the store synchronously (a store is a local file, not a socket) and the
runtime calls ``commit`` after the inputs that arrived together (``superpeer._commits``), *before*
it sends any byte they produced: an ``Ack`` to a publisher, a ``Delivered`` answered by dropping
mail, a handover accepted, all go out only once what they promise is on disk. ``SqliteStore``
serves the daemon (one database, ``<data>/state.sqlite``, WAL, and its redo journal
``<data>/state.sqlite-redo``, of which a commit is one frame: ``superpeer.redo``; with
``sync="full"``, the default, one fsync per commit, so a burst of inputs read together costs one);
``MemoryStore`` serves the simulator and the tests, and survives a simulated restart because the
simulator keeps the object.

What is kept:

* ``meta``: the incarnation counter (every start and every rejoin takes the next number), the
  time the node was last known alive (``alive_at``, written every few seconds: after a crash the
  node asks origins for what was published since), the last neighbour table (to tell the old
  neighbours quickly that this node restarted);
* registrations (``crypto.Registry``: public key, identifier, hash of the private identifier);
* each local peer's advertisement, schemas and subscriptions, as encoded ``Advertise`` /
  ``PublishSchema`` / ``Subscribe`` messages (the codec validates them again when they are read
  back);
* mail: per peer, the notifications not yet acknowledged by the peer, numbered in arrival order
  (the ``delivery`` number), with a key (owner, publication id) that is unique per peer (in
  ``SqliteStore`` an attached peer's may be held in memory until it is read or ``alive_at`` is
  written, and never written if acknowledged first: ``superpeer._unwritten``); and the
  keys delivered recently (``delivered``), so that a notification reaching the access point twice
  (catch-up, handover, a repaired route) is kept once;
* the publication log: every publication this node accepted as origin, for catch-up and for
  replay after a crash, pruned by age and count;
* bodies, the part of a notification that is the same wherever it is kept (its publication,
  about a kilobyte), once per key (owner, publication id, version: ``mailroom.mail_key``): a
  mail row, a log entry and a version record (a ``pending`` value with a ``body`` entry) keep
  the rest of their bytes and refer to the body, so N subscribers' mail and the log share one
  copy (issue 37, "write once"). A body is counted by what refers to it and dropped by
  ``drop_bodies`` (the node's housekeeping) once nothing does. Rows an earlier version wrote
  whole (no body) are read as they are;
* the large tables (the log, the bodies and their counts, ``delivered``) appended in the order
  rows come and indexed by a 64-bit hash of their keys, not by the keys' text, so that a fold
  writes fewer index pages (``superpeer.storeschema``, which also rebuilds the tables an
  earlier version keyed by text);
* pending work that must survive a crash: handovers not yet answered, peers that moved away
  (forwarding addresses);
* rendezvous files (``superpeer.rendezvous``): ``SqliteStore`` keeps each in a plain file of its
  own (``<data>/state.sqlite-rendezvous/<key>``), written in place as chunks come, not as rows:
  a 192 KiB row per chunk went through sqlite's log and again into the database, with a commit
  each (BENCHMARKS.md, "Resource transfer"). A file's bytes are made durable by the next
  ``sync`` (before the log's, so a record committed with it never counts bytes that a power
  loss could take; the rendezvous checks what it finds after a restart anyway).
"""

from __future__ import annotations

import heapq
import itertools
import json
import math
import os
import sqlite3
import struct
import threading
from collections import Counter, OrderedDict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from json.encoder import encode_basestring_ascii
from pathlib import Path
from typing import Final, Protocol

from crypto import PeerRecord
from superpeer import redo, storeschema
from superpeer._unwritten import Held, UnwrittenMail
from superpeer.storeschema import key_hash


def json_key(*parts: str | int) -> str:
    """``json.dumps(list(parts))``: the key of a store's record, made of strings and integers in
    JSON. The same text, without the encoder ``json.dumps`` makes for every call (most of the
    microsecond it takes), for the keys a super-peer makes for every publication."""
    texts = []
    for part in parts:
        if type(part) is str:
            texts.append(encode_basestring_ascii(part))
        elif type(part) is int:
            texts.append(int.__repr__(part))
        else:
            return json.dumps(list(parts))
    return "[" + ", ".join(texts) + "]"


@dataclass(frozen=True, slots=True)
class LocalPeerState:
    """A local peer's routing state as stored: encoded ``Advertise`` (or None) and ``Subscribe``
    messages by subscription id, and the public key of a peer adopted from a leaving super-peer
    (to check its signature when it moves on; None otherwise)."""

    advertisement: bytes | None
    subscriptions: dict[str, bytes]
    public_key: bytes | None = None
    subscribed_at: dict[str, float] = field(default_factory=dict)
    """When each subscription was first made here, where known: a catch-up after a restart
    asks for nothing published before it."""
    schema: bytes | None = None
    """An encoded ``PublishSchema`` with the union of the peer's schemas (None: it published
    none)."""


_OFFSET: Final = struct.Struct(">I")
_PROBE: Final = 16
BODY: Final = "body"
"""The entry of a ``pending`` value that names the body it refers to (``Store.body``)."""


def hollowed(data: bytes, body: bytes) -> bytes | None:
    """``data`` less ``body`` (where it first is), the offset it was at in front: what a row
    keeps when ``body`` is kept once elsewhere (``filled`` makes ``data`` again). None if
    ``body`` is not in ``data``."""
    if not body:
        return None
    # found by its first bytes and checked whole: a search for a kilobyte-long needle prepares
    # it first, at twice the cost of the rest of a mail row's work in Python
    probe = body[:_PROBE]
    at = data.find(probe)
    while at >= 0 and not data.startswith(body, at):
        at = data.find(probe, at + 1)
    if at < 0:
        return None
    return b"".join((_OFFSET.pack(at), data[:at], data[at + len(body) :]))


def filled(shell: bytes, body: bytes) -> bytes:
    """The bytes ``hollowed`` made ``shell`` of, with ``body`` back in its place."""
    (at,) = _OFFSET.unpack_from(shell)
    start = _OFFSET.size
    return b"".join((shell[start : start + at], body, shell[start + at :]))


def referred_body(value: dict | None) -> str | None:
    """The key of the body a ``pending`` value refers to (``BODY``), if any."""
    return None if value is None else value.get(BODY)


class Store(Protocol):
    # -- the node ------------------------------------------------------------------------------
    def next_incarnation(self) -> int: ...
    def get_meta(self, key: str) -> str | None: ...
    def set_meta(self, key: str, value: str) -> None: ...

    # -- registrations (crypto.Registry) --------------------------------------------------------
    def get(self, public_id: str) -> PeerRecord | None: ...
    def add(self, record: PeerRecord) -> bool: ...
    def update_address(self, public_id: str, address: str) -> None: ...
    def remove(self, public_id: str) -> bool: ...
    def registered(self) -> list[str]: ...

    # -- local peers ---------------------------------------------------------------------------
    def local_peers(self) -> list[str]: ...
    def local_state(self, peer: str) -> LocalPeerState: ...
    def set_advertisement(self, peer: str, data: bytes | None) -> None: ...
    def set_schema(self, peer: str, data: bytes | None) -> None: ...
    def set_subscription(
        self, peer: str, subscription_id: str, data: bytes | None, made: float | None = None
    ) -> None: ...
    def set_public_key(self, peer: str, data: bytes | None) -> None: ...
    def forget_local(self, peer: str, *, keep_mail: bool = False) -> None: ...

    # -- mail ----------------------------------------------------------------------------------
    def put_mail(
        self,
        peer: str,
        key: str,
        data: bytes,
        now: float,
        body: bytes | None = None,
        *,
        recoverable: bool = False,
        published_at: float = -math.inf,
    ) -> int | None:
        """Keeps ``data`` as ``peer``'s mail under ``key`` (None: a repeat); ``body``, a part
        of ``data``, is kept once under ``key`` for every row that has it. ``recoverable``: it is
        for an attached peer and a restart's catch-up would bring it back, so it may be held
        unwritten until its peer's mail changes or ``flush_mail`` (``superpeer._unwritten``);
        ``published_at``, its publication's hybrid time, tells ``flush_mail`` when."""
        ...

    def flush_mail(self, before: float = math.inf) -> None:
        """Writes the mail held unwritten (``put_mail``'s ``recoverable``) that was published
        before ``before`` (all of it by default); before ``alive_at``, with ``alive_at`` less the
        catch-up's margin (``superpeer._unwritten``)."""
        ...

    def last_delivery(self) -> int: ...
    def mail_after(self, peer: str, after: int, limit: int) -> list[tuple[int, bytes]]: ...
    def acknowledge(self, peer: str, through: int, now: float) -> int: ...
    def take_mail(self, peer: str, now: float) -> list[bytes]: ...
    def drop_mail(self, peer: str, through: int) -> int: ...
    def renew_mail(self, peer: str, key: str) -> int | None: ...
    def discard_mail(self, peer: str, number: int) -> None: ...
    def mail_counts(self) -> dict[str, int]: ...
    def expire_mail(self, before: float, cap: int) -> dict[str, int]: ...
    def forget_delivered(self, before: float) -> None: ...
    def add_expired(self, peer: str, count: int) -> None: ...
    def take_expired(self, peer: str) -> int: ...

    # -- the publication log -------------------------------------------------------------------
    def log_publication(self, key: str, data: bytes, at: float, body: bytes | None = None) -> bool:
        """Logs ``data`` under ``key``; ``body``, a part of it, kept once under ``key``.
        Whether the store holds ``body`` under ``key`` (a version record may then refer to
        it: ``pending`` values with ``{"body": key}``).

        An entry under ``key`` logged at an earlier time ``at`` stays, and ``data`` is not
        logged: one version accepted twice (its publisher sent again one acknowledged alone,
        through another access point: ``superpeer._replication``, rule 8) keeps its first
        acceptance's time in every log, whichever entry comes last (``clocks``, rule 1). The
        later one, in its place, moved the publication past a withdrawal that followed it, and
        the catch-up of that subscription's window no longer found it (stop 87's chaos run,
        seed 871). One logged at the same time or later is replaced (an adopted log, a
        replay)."""
        ...

    def body(self, key: str) -> bytes | None:
        """The body kept under ``key`` (None: none)."""
        ...

    def drop_bodies(self) -> int:
        """Drops the bodies that nothing refers to any longer; how many."""
        ...

    def logged_since(self, since: float) -> Iterator[bytes]: ...
    def logged_between(self, since: float, until: float, limit: int) -> list[tuple[float, bytes]]:
        """The first ``limit`` entries logged at ``since`` to ``until`` (both included), in
        the order of their times, each with its time: a span read a part at a time."""
        ...

    def is_logged(self, key: str) -> bool:
        """Whether the log holds an entry under ``key``."""
        ...

    def latest_logged(self) -> float | None: ...
    def prune_log(self, before: float, keep: int) -> int: ...
    def log_floor(self) -> float: ...

    # -- pending work --------------------------------------------------------------------------
    def pending(self, kind: str) -> dict[str, dict]: ...
    def set_pending(self, kind: str, key: str, value: dict | None) -> None: ...
    def pending_value(self, kind: str, key: str) -> dict | None: ...
    def pending_range(self, kind: str, low: str, high: str) -> dict[str, dict]: ...
    def count_pending(self, kind: str, low: str, high: str) -> int: ...
    def iter_pending(self, kind: str) -> Iterator[tuple[str, dict]]:
        """Every record of ``kind``, read as it goes (a table too large to hold at once)."""
        ...

    # -- rendezvous files (``superpeer.rendezvous``) --------------------------------------------
    def put_chunk(self, key: str, offset: int, data: bytes) -> None: ...
    def chunks(self, key: str, start: int, end: int) -> list[tuple[int, bytes]]: ...
    def drop_chunks(self, key: str) -> None: ...

    def commit(self) -> None: ...
    def close(self) -> None: ...


# -- in memory ---------------------------------------------------------------------------------


@dataclass
class _Mailbox:
    items: OrderedDict[int, tuple[str, bytes, float, bool]] = field(default_factory=OrderedDict)
    """By number: the key, the bytes (a shell if the body is kept apart), when, and whether it
    is a shell (its body ``MemoryStore._bodies[key]``)."""
    keys: dict[str, int] = field(default_factory=dict)


class MemoryStore:
    """The simulator's store: the same contract as ``SqliteStore``, in dictionaries."""

    def __init__(self) -> None:
        self._meta: dict[str, str] = {}
        self._records: dict[str, PeerRecord] = {}
        self._ads: dict[str, bytes] = {}
        self._schemas: dict[str, bytes] = {}
        self._subs: dict[str, dict[str, bytes]] = {}
        self._made: dict[str, dict[str, float]] = {}
        self._keys: dict[str, bytes] = {}
        self._mail: dict[str, _Mailbox] = {}
        self._delivered: dict[str, dict[str, float]] = {}
        """Per peer, the mail keys it acknowledged, with when (one dictionary per peer, not a
        pair per key: at 1,000 super-peers and 8K publications there are some 3 million)."""
        self._expired: dict[str, int] = {}
        self._log: OrderedDict[str, tuple[bytes, float, bool]] = OrderedDict()
        self._bodies: dict[str, list] = {}
        """By key: the body and how many rows refer to it (``SqliteStore``'s ``bodies``)."""
        self._floor = -math.inf
        self._pending: dict[str, dict[str, dict]] = {}
        self._chunks: dict[str, dict[int, bytes]] = {}
        self._next_delivery = 1

    def next_incarnation(self) -> int:
        number = int(self._meta.get("incarnation", "0")) + 1
        self._meta["incarnation"] = str(number)
        return number

    def get_meta(self, key: str) -> str | None:
        return self._meta.get(key)

    def set_meta(self, key: str, value: str) -> None:
        self._meta[key] = value

    def get(self, public_id: str) -> PeerRecord | None:
        return self._records.get(public_id)

    def add(self, record: PeerRecord) -> bool:
        if record.public_id in self._records:
            return False
        self._records[record.public_id] = record
        return True

    def update_address(self, public_id: str, address: str) -> None:
        record = self._records.get(public_id)
        if record is not None:
            self._records[public_id] = PeerRecord(
                public_id=record.public_id,
                public_key=record.public_key,
                private_id_hash=record.private_id_hash,
                address=address,
            )

    def remove(self, public_id: str) -> bool:
        return self._records.pop(public_id, None) is not None

    def registered(self) -> list[str]:
        return sorted(self._records)

    def local_peers(self) -> list[str]:
        return sorted(
            set(self._ads)
            | set(self._schemas)
            | set(self._keys)
            | {p for p, subs in self._subs.items() if subs}
        )

    def local_state(self, peer: str) -> LocalPeerState:
        return LocalPeerState(
            self._ads.get(peer),
            dict(self._subs.get(peer, {})),
            self._keys.get(peer),
            dict(self._made.get(peer, {})),
            self._schemas.get(peer),
        )

    def set_public_key(self, peer: str, data: bytes | None) -> None:
        if data is None:
            self._keys.pop(peer, None)
        else:
            self._keys[peer] = data

    def set_advertisement(self, peer: str, data: bytes | None) -> None:
        if data is None:
            self._ads.pop(peer, None)
        else:
            self._ads[peer] = data

    def set_schema(self, peer: str, data: bytes | None) -> None:
        if data is None:
            self._schemas.pop(peer, None)
        else:
            self._schemas[peer] = data

    def set_subscription(
        self, peer: str, subscription_id: str, data: bytes | None, made: float | None = None
    ) -> None:
        subs = self._subs.setdefault(peer, {})
        times = self._made.setdefault(peer, {})
        if data is None:
            subs.pop(subscription_id, None)
            times.pop(subscription_id, None)
        else:
            subs[subscription_id] = data
            if made is not None:
                times[subscription_id] = made

    def forget_local(self, peer: str, *, keep_mail: bool = False) -> None:
        self._ads.pop(peer, None)
        self._schemas.pop(peer, None)
        self._subs.pop(peer, None)
        self._made.pop(peer, None)
        self._keys.pop(peer, None)
        if not keep_mail:
            self._unrefer_mail(self._mail.pop(peer, None))
        self._expired.pop(peer, None)

    def _hold_body(self, key: str, data: bytes, body: bytes | None) -> tuple[bytes, bool]:
        """What a row keeps of ``data`` (a shell, and True, if ``body`` is held once under
        ``key``, counted for the row), as ``SqliteStore._held``."""
        shell = None if body is None else hollowed(data, body)
        if shell is None:
            return data, False
        held = self._bodies.setdefault(key, [body, 0])
        if held[0] != body:
            return data, False
        held[1] += 1
        return shell, True

    def _whole(self, key: str, data: bytes, shell: bool) -> bytes:
        return filled(data, self._bodies[key][0]) if shell else data

    def _unrefer(self, key: str | None) -> None:
        if key is not None:
            self._bodies[key][1] -= 1

    def _pop_mail(self, box: _Mailbox, number: int) -> str:
        """Takes mail ``number`` out of ``box`` (its body counted down); its key."""
        key, _, _, shell = box.items.pop(number)
        del box.keys[key]
        if shell:
            self._unrefer(key)
        return key

    def _unrefer_mail(self, box: _Mailbox | None) -> None:
        for key, _, _, shell in box.items.values() if box is not None else ():
            if shell:
                self._unrefer(key)

    def body(self, key: str) -> bytes | None:
        held = self._bodies.get(key)
        return None if held is None else held[0]

    def drop_bodies(self) -> int:
        unused = [key for key, (_, refs) in self._bodies.items() if refs <= 0]
        for key in unused:
            del self._bodies[key]
        return len(unused)

    def put_mail(
        self,
        peer: str,
        key: str,
        data: bytes,
        now: float,
        body: bytes | None = None,
        *,
        recoverable: bool = False,
        published_at: float = -math.inf,
    ) -> int | None:
        # ``recoverable`` changes nothing here: the simulator keeps this store through a restart
        box = self._mail.setdefault(peer, _Mailbox())
        if key in box.keys or key in self._delivered.get(peer, ()):
            return None
        number = self._next_delivery
        self._next_delivery += 1
        kept, shell = self._hold_body(key, data, body)
        box.items[number] = (key, kept, now, shell)
        box.keys[key] = number
        return number

    def flush_mail(self, before: float = math.inf) -> None:
        """Nothing is held unwritten."""

    def last_delivery(self) -> int:
        return self._next_delivery - 1

    def mail_after(self, peer: str, after: int, limit: int) -> list[tuple[int, bytes]]:
        box = self._mail.get(peer)
        if box is None:
            return []
        found = []
        for number, (key, data, _, shell) in box.items.items():
            if number > after:
                found.append((number, self._whole(key, data, shell)))
                if len(found) >= limit:
                    break
        return found

    def acknowledge(self, peer: str, through: int, now: float) -> int:
        done = self._remove_mail(peer, through)
        if done:
            delivered = self._delivered.setdefault(peer, {})
            for key in done:
                delivered[key] = now
        return len(done)

    def take_mail(self, peer: str, now: float) -> list[bytes]:
        # not marked delivered: handed over is not acknowledged, and the peer may come back
        # here with them still unacknowledged (they must then be kept again)
        box = self._mail.pop(peer, None)
        if box is None:
            return []
        taken = [self._whole(key, data, shell) for key, data, _, shell in box.items.values()]
        self._unrefer_mail(box)
        return taken

    def drop_mail(self, peer: str, through: int) -> int:
        # handed over and received there: not delivered (see take_mail)
        return len(self._remove_mail(peer, through))

    def renew_mail(self, peer: str, key: str) -> int | None:
        box = self._mail.get(peer)
        if box is None or key not in box.keys:
            return None
        item = box.items.pop(box.keys[key])
        number = self._next_delivery
        self._next_delivery += 1
        box.items[number] = item
        box.keys[key] = number
        return number

    def discard_mail(self, peer: str, number: int) -> None:
        # an expired publication: not delivered, and a repeat of it is no longer owed either
        box = self._mail.get(peer)
        if box is not None and number in box.items:
            self._pop_mail(box, number)

    def _remove_mail(self, peer: str, through: int) -> list[str]:
        """Removes ``peer``'s mail numbered up to ``through``; the keys removed."""
        box = self._mail.get(peer)
        if box is None:
            return []
        keys = []
        for number in [n for n in box.items if n <= through]:
            keys.append(self._pop_mail(box, number))
        return keys

    def mail_counts(self) -> dict[str, int]:
        return {peer: len(box.items) for peer, box in sorted(self._mail.items()) if box.items}

    def expire_mail(self, before: float, cap: int) -> dict[str, int]:
        dropped: dict[str, int] = {}
        for peer, box in self._mail.items():
            old = [n for n, (_, _, at, _) in box.items.items() if at < before]
            excess = max(0, len(box.items) - len(old) - cap)
            old += [n for n in box.items if n not in set(old)][:excess]
            for number in old:
                self._pop_mail(box, number)
            if old:
                dropped[peer] = len(old)
        return dropped

    def forget_delivered(self, before: float) -> None:
        for peer, delivered in list(self._delivered.items()):
            for key in [k for k, at in delivered.items() if at < before]:
                del delivered[key]
            if not delivered:
                del self._delivered[peer]

    def add_expired(self, peer: str, count: int) -> None:
        self._expired[peer] = self._expired.get(peer, 0) + count

    def take_expired(self, peer: str) -> int:
        return self._expired.pop(peer, 0)

    def log_publication(self, key: str, data: bytes, at: float, body: bytes | None = None) -> bool:
        logged = self._log.get(key)
        if logged is not None and logged[1] < at:
            return logged[2]  # its first acceptance stays
        if logged is not None and logged[2]:
            self._unrefer(key)  # replaced in its place, as a row is
        kept, shell = self._hold_body(key, data, body)
        self._log[key] = (kept, at, shell)
        return shell

    def _unlog(self, key: str) -> float:
        """Takes the logged ``key`` out of the log; its time."""
        _, at, shell = self._log.pop(key)
        if shell:
            self._unrefer(key)
        return at

    def is_logged(self, key: str) -> bool:
        return key in self._log

    def logged_since(self, since: float) -> Iterator[bytes]:
        return iter(
            [
                self._whole(key, data, shell)
                for key, (data, at, shell) in self._log.items()
                if at >= since
            ]
        )

    def logged_between(self, since: float, until: float, limit: int) -> list[tuple[float, bytes]]:
        spanned = sorted(
            (at, key, data, shell)
            for key, (data, at, shell) in self._log.items()
            if since <= at <= until
        )[:limit]
        return [(at, self._whole(key, data, shell)) for at, key, data, shell in spanned]

    def latest_logged(self) -> float | None:
        return max((at for _, at, _ in self._log.values()), default=None)

    def prune_log(self, before: float, keep: int) -> int:
        doomed = [k for k, (_, at, _) in self._log.items() if at < before]
        excess = len(self._log) - len(doomed) - keep
        if excess > 0:
            doomed += [k for k in self._log if k not in set(doomed)][:excess]
        for key in doomed:
            self._floor = max(self._floor, self._unlog(key))
        return len(doomed)

    def log_floor(self) -> float:
        return self._floor

    def pending(self, kind: str) -> dict[str, dict]:
        return dict(self._pending.get(kind, {}))

    def set_pending(self, kind: str, key: str, value: dict | None) -> None:
        table = self._pending.setdefault(kind, {})
        referred = referred_body(value)
        if referred is not None:
            self._bodies[referred][1] += 1  # held: ``log_publication`` said so
        self._unrefer(referred_body(table.pop(key, None)))
        if value is not None:
            table[key] = value

    def pending_value(self, kind: str, key: str) -> dict | None:
        return self._pending.get(kind, {}).get(key)

    def pending_range(self, kind: str, low: str, high: str) -> dict[str, dict]:
        return {k: v for k, v in self._pending.get(kind, {}).items() if low <= k < high}

    def count_pending(self, kind: str, low: str, high: str) -> int:
        return sum(1 for k in self._pending.get(kind, {}) if low <= k < high)

    def iter_pending(self, kind: str) -> Iterator[tuple[str, dict]]:
        return iter(list(self._pending.get(kind, {}).items()))

    def put_chunk(self, key: str, offset: int, data: bytes) -> None:
        self._chunks.setdefault(key, {})[offset] = data

    def chunks(self, key: str, start: int, end: int) -> list[tuple[int, bytes]]:
        held = self._chunks.get(key, {})
        return [
            (offset, held[offset])
            for offset in sorted(held)
            if offset < end and offset + len(held[offset]) > start
        ]

    def drop_chunks(self, key: str) -> None:
        self._chunks.pop(key, None)

    def commit(self) -> None:
        """Nothing to flush: memory is as durable as the simulation."""

    def close(self) -> None:
        """Nothing to release."""


# -- sqlite ------------------------------------------------------------------------------------

_BODY: Final = "SELECT id, data FROM bodies WHERE hash = ? AND key = ?"
_LOGGED: Final = "SELECT 1 FROM publications WHERE hash = ? AND key = ?"
_LOGGED_AT: Final = "SELECT at, body FROM publications WHERE hash = ? AND key = ?"
_DELIVERED: Final = "SELECT 1 FROM delivered WHERE hash = ? AND peer = ? AND key = ?"
_MAILED: Final = "SELECT 1 FROM mail WHERE peer = ? AND key = ?"
_WITH_BODY: Final = "LEFT JOIN bodies ON bodies.id = {0}.body"
"""The join of a row (of the table named) with the body it refers to, if any."""
HELD_MAIL: Final = 4096
"""Mail ``SqliteStore`` holds unwritten at most (``put_mail``'s ``recoverable``; about a kilobyte
each): beyond, recoverable mail is written as it comes (peers slow to acknowledge, by thousands)."""
HELD_BODIES: Final = 4096
"""Body keys ``SqliteStore`` remembers putting in (``_held``): a notification is mail for each
of its subscribers, and each asks."""
_FOLDED: Final = "redo_folded"
"""The meta key of the last generation of the redo journal the database holds."""
_ADVERTISEMENT = "advertisement"
_PEER_SCHEMA = "schema"
_PUBLIC_KEY = "public_key"
_SUBSCRIPTION = "subscription:"
_SUBSCRIBED_AT = "subscribed_at:"


def _whole(data: bytes, body_id: int | None, body: bytes | None) -> bytes:
    """A row's bytes as they were given: ``data`` whole (no ``body_id``), or a shell filled with
    the body of that id."""
    if body_id is None:
        return bytes(data)
    if body is None:
        raise sqlite3.IntegrityError(f"the body {body_id} a row refers to is gone")
    return filled(data, body)


def _fsync_path(path: Path) -> None:
    """fsync the file or directory at ``path``; nothing if it is gone (a file dropped since)."""
    try:
        descriptor = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


FOLD_BYTES: Final = 4 * 1024 * 1024
"""``SqliteStore``'s redo journal's size (``fold_bytes``): sqlite commits its transaction (the
fold) when the next commit's frame would not fit in it."""
CACHE_BYTES: Final = 64 * 1024 * 1024
"""``SqliteStore``'s page cache at most (``cache_bytes``; sqlite's own default is 2 MiB)."""

SYNC_MODES: Final = ("full", "normal")
"""``SqliteStore``'s ``sync``: ``full`` (the log is fsync'd before a commit counts) survives a
power loss or an operating-system crash; ``normal`` (no fsync but the folds') survives the
process being killed, since what was committed is in the kernel's cache, but a power loss may
take the last commits back, after their acknowledgements left."""


class SqliteStore:
    """The daemon's store in one sqlite database (created if missing). Writes join one
    transaction, made durable by ``commit`` (how durable: ``sync``, one of ``SYNC_MODES``).

    A commit is one frame of the redo journal (``superpeer.redo``, ``<path>-redo``): the
    statements run since the last one, a few kilobytes, while sqlite's own transaction stays
    open; sqlite commits it (the *fold*, its log fsync'd) only when the next frame would not fit
    in the journal's ``fold_bytes``, so each page thousands of commits changed is written once
    (BENCHMARKS.md, issue 37, stop 71). Opening the store runs the frames of the generation the
    database does not hold yet again, then folds (``replayed`` says how many statements ran).

    The database runs in WAL mode with ``synchronous=NORMAL``. With ``sync="full"`` a commit
    counts once the journal is fsync'd, split in two so that group commit (``superpeer._commits``)
    can run the fsync on another thread while the trio thread goes on: ``commit(synced=False)``
    writes the frame, ``sync`` (which touches only file descriptors, never the sqlite
    connection) makes every frame written so far durable. A fold fsyncs sqlite's log in both
    modes before the journal starts again over the frames it holds, then checkpoints it
    (``_copy``)."""

    def __init__(
        self,
        path: str | Path,
        *,
        sync: str = "full",
        max_log_bytes: int = 16 * 1024 * 1024,
        fold_bytes: int = FOLD_BYTES,
        cache_bytes: int = CACHE_BYTES,
    ) -> None:
        if sync not in SYNC_MODES:
            raise ValueError(f"sync must be one of {SYNC_MODES}, got {sync!r}")
        self.syncs = sync == "full"
        """Whether a commit counts only once ``sync`` ran after it."""
        self._db = sqlite3.connect(str(path), isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        # the log is checkpointed by every fold (``_copy``), not by sqlite as it grows, and
        # truncated back to ``max_log_bytes`` when it starts over, so it never grows past what
        # the disk guard keeps in reserve (``StoreSettings.log_bound``). The transaction's
        # pages are never spilled to the log before its ``COMMIT`` (which could start the log
        # over before ``_sync_copied``): a fold's pages stay in memory until the fold.
        self._db.execute("PRAGMA wal_autocheckpoint=0")
        self._db.execute("PRAGMA cache_spill=OFF")
        self._db.execute(f"PRAGMA journal_size_limit={int(max_log_bytes)}")
        self._db.execute(f"PRAGMA cache_size={-max(1, int(cache_bytes) // 1024)}")  # (KiB)
        self._db.execute("PRAGMA recursive_triggers=ON")
        keyed_by_text = storeschema.prepare(self._db)
        self._refs: dict[int, int] = {}
        """Per body (its ``id``), the rows that came to refer to it less those that went, since
        the last ``_count`` (at the commit: within the transaction it adds to); 0 for a body put
        in (its count begins)."""
        self._held: OrderedDict[str, tuple[int, bytes]] = OrderedDict()
        """Bodies put in since the last ``drop_bodies`` (the most recent ``HELD_BODIES``), by
        key, with their ids: in the store, whatever their count."""
        self._files = Path(f"{path}-rendezvous")
        """The rendezvous files, one per key."""
        self._files.mkdir(mode=0o700, exist_ok=True)
        self._written: set[str] = set()
        """Rendezvous files written since the last ``sync`` (which fsyncs them)."""
        self._written_lock = threading.Lock()
        self._writing: tuple[str, int] | None = None
        """The rendezvous file written last and its open descriptor: a file comes chunk after
        chunk, so it is opened once per transfer, not once per chunk (one kept: a node
        receiving several files at once opens each again when it switches)."""
        self._open = False
        """Whether sqlite's transaction is open (it stays open across commits, to the fold)."""
        self._lost = False
        """sqlite undid its transaction (a statement or a fold's ``COMMIT`` that found the disk
        full may): the database is back at the last fold, and only the journal, run again at
        the next open, holds the commits since. Nothing more is written, nor folded."""
        self._committed = self._synced = 0
        """Commits made, and of those the ones a finished ``sync`` covers."""
        self._unwritten = UnwrittenMail()
        """Mail held, not yet written (``put_mail``'s ``recoverable``: ``superpeer._unwritten``)."""
        self._next_delivery: int | None = None
        """The number the next mail takes (read from the table when first needed): numbered
        here, not by sqlite, since mail held unwritten takes its number when it comes."""
        self._tabled: dict[str, int] | None = None
        """Per peer that may have mail rows, a number no lower than the highest of them: an
        acknowledgement of mail only held asks the table nothing (read when first needed)."""
        # the log exists while the connection is open (a checkpoint rewrites it in place); its
        # directory entry is made durable once
        self._db.execute("BEGIN IMMEDIATE")
        self._db.execute("COMMIT")
        log = Path(f"{path}-wal")
        self._wal = os.open(log, os.O_RDONLY)
        _fsync_path(log.parent)
        self._copier = sqlite3.connect(str(path), isolation_level=None)
        """The connection the checkpoints run on: with ``synchronous=OFF`` sqlite copies the
        log's pages into the database without fsyncing either file (``_copy``)."""
        self._copier.execute("PRAGMA synchronous=OFF")
        self._database = os.open(path, os.O_RDONLY)
        self._copied = False
        """Whether the database file holds pages a checkpoint copied that no fsync covers yet
        (``_sync_copied``)."""
        self._copied_lock = threading.Lock()
        self.checkpoints_failed = 0
        """Folds whose checkpoint did not copy the whole log (``_copy``)."""
        # a fold's transaction adds the pages it changed to the log: half the log's bound at most
        folded = self.get_meta(_FOLDED)
        self.journal = redo.RedoJournal(
            Path(f"{path}-redo"),
            size=max(4096, min(fold_bytes, max_log_bytes // 2)),
            generation=int(folded or 0) + 1,
        )
        """The redo journal (``superpeer.redo``): read, not written, outside the store (its
        ``offset`` and ``generation`` say where the commits and the folds are)."""
        self.replayed = 0
        """Statements the journal ran again when the store opened (what a crash left there)."""
        if folded is None:
            self.journal.discard()
        else:
            frames = redo.frames(self.journal.path)
            if frames and frames[0].generation == self.journal.generation:
                self._begin()
                self.replayed = redo.replay(self._db, frames)
        self.fold()  # so that a generation is never written twice
        self.rebuilt: list[str] = []
        """The tables an earlier version keyed by text, rebuilt when the store opened
        (``storeschema.rehash``), after that version's frames ran on them."""
        if keyed_by_text:
            # the rebuild's pages outgrow the cache: they may go to the log before its COMMIT,
            # which may start the log over, so what the last checkpoint copied is synced first
            self._sync_copied()
            self._db.execute("PRAGMA cache_spill=ON")
            self._begin()
            self.rebuilt = storeschema.rehash(self._db)
            self.fold()
            self._db.execute("PRAGMA cache_spill=OFF")
        self.sync()
        self._move_chunk_rows()

    def _check_transaction(self) -> None:
        """Raises once sqlite's transaction is gone from under the store: a write would then
        run outside it, on the database of the last fold, and a fold would name a generation
        whose commits the database does not hold."""
        if self._open and not self._db.in_transaction:
            self._lost = True
        if self._lost:
            raise sqlite3.OperationalError(
                "sqlite undid the store's transaction (a full disk?): the commits since the "
                "last fold are in the redo journal; open the store again to run them"
            )

    def _begin(self) -> None:
        self._check_transaction()
        if not self._open:
            self._db.execute("BEGIN")
            self._open = True

    def _write(self, sql: str, arguments: Iterable[object] = ()) -> sqlite3.Cursor:
        """Runs a write, and records it for the next commit's frame once it ran (a statement
        that failed changed nothing)."""
        self._begin()
        values = tuple(arguments)
        cursor = self._db.execute(sql, values)
        self.journal.record(sql, values)
        return cursor

    def _write_many(self, sql: str, rows: list[tuple]) -> None:
        """Runs a write once per row, and records it for the next commit's frame."""
        self._begin()
        self._db.executemany(sql, rows)
        self.journal.record_many(sql, rows)

    def _read(self, sql: str, arguments: Iterable[object] = ()) -> list[tuple]:
        return self._db.execute(sql, tuple(arguments)).fetchall()

    @property
    def uncommitted(self) -> bool:
        """Whether anything was written since the last commit."""
        return self.journal.pending

    @property
    def unsynced(self) -> bool:
        """Whether a commit was made that no finished ``sync`` covers yet."""
        return self._synced < self._committed

    @property
    def deferrable(self) -> bool:
        """Whether the commits since the last ``sync`` may wait for a later one: no rendezvous
        file was written since (``superpeer._commits``: a sync fsyncs those files before the
        journal, so that a commit naming a file's bytes is never durable without them)."""
        with self._written_lock:
            return not self._written

    def commit(self, *, synced: bool = True) -> None:
        """Writes what was written since the last commit as a frame of the journal (or folds,
        when the frame does not fit). Unless ``synced`` is False, every commit made so far is
        durable on return; else only once a ``sync`` begun after this returned."""
        if self.journal.pending:
            self._check_transaction()  # else the frame would hold writes the database no longer has
            self._count()
            if not self.journal.write():
                self.fold()
            self._committed += 1
        if synced and self._synced < self._committed:
            self.sync()

    def fold(self) -> None:
        """Commits sqlite's transaction with the generation it completes, makes sqlite's log
        durable, and starts the journal's next generation over the frames the fold holds."""
        generation = self.journal.generation
        self._begin()
        self._db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (_FOLDED, str(generation)))
        self._sync_copied()  # this COMMIT may start the log over the frames last copied
        try:
            self._db.execute("COMMIT")
        except sqlite3.Error:
            # a full disk: sqlite may have undone the transaction, what the journal still holds
            self._lost = not self._db.in_transaction
            raise
        self._open = False
        os.fsync(self._wal)
        self.journal.restart(generation + 1)
        self._copy()

    def _copy(self) -> None:
        """Checkpoints the log: copies the fold's pages into the database file, without an
        fsync, so that the next fold's ``COMMIT`` starts the log over (sqlite does once every
        frame is copied) and the log holds one fold's pages. sqlite's own checkpoint (once the
        log held ``max_log_bytes``) fsynced the log and the database on the loop's thread, 37
        to 48 ms every third fold or so (BENCHMARKS.md, issue 37, stop 79); the log is durable
        here already (the fold fsynced it), and the database's fsync is left to the next
        ``sync``, on the group commit's thread (``_sync_copied``). A frame is overwritten only
        by a ``COMMIT`` (no spills), and every ``COMMIT`` is a fold's, after ``_sync_copied``:
        so the log never starts over frames whose pages the database does not hold durably. A
        checkpoint that fails (a full disk) copies less and leaves the rest in the log: the log
        does not start over, and the next fold's checkpoint copies it; ``checkpoints_failed``
        counts them (``superpeer_store_checkpoints_failed``: a log that keeps growing)."""
        try:
            _, log, copied = self._copier.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
            whole = copied == log
        except sqlite3.Error:
            whole = False
        if not whole:
            self.checkpoints_failed += 1
        with self._copied_lock:
            self._copied = True

    def _sync_copied(self) -> None:
        """fsyncs the database file if a checkpoint copied pages into it since the last time;
        on whichever thread asks first (holding the others until it is done)."""
        with self._copied_lock:
            if self._copied:
                os.fsync(self._database)
                self._copied = False

    def sync(self) -> None:
        """Makes every transaction committed so far durable (with ``sync="normal"``: nothing),
        and the rendezvous files written before it first. Safe on any thread: it fsyncs file
        descriptors, never the connection."""
        through = self._committed
        if self.syncs:
            with self._written_lock:
                written, self._written = self._written, set()
            for key in written:
                _fsync_path(self._files / key)
            if written:  # and their names, for the files created since
                _fsync_path(self._files)
            self.journal.sync()
            self._sync_copied()
        self._synced = max(self._synced, through)

    def reclaim(self) -> bool:
        """Gives the write-ahead log's space back to the file system: a fold, then a checkpoint
        that copies the log into the database (sqlite fsyncs the log before and the database
        after, so every commit stays durable, a ``sync`` still to come included) and truncates
        the log to nothing. What a nearly full disk asks first (``superpeer.diskspace``). False
        when it did not: something was written since the last commit, or the fold or the
        checkpoint could not finish (no room for the pages they write: the store as it was)."""
        if self.journal.pending:
            return False
        try:
            self.fold()
            busy, _, _ = self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        except sqlite3.Error:
            if self._lost:
                raise
            return False
        return busy == 0

    def close(self) -> None:
        """Commits and folds (the journal is then empty of anything to run again), and closes.
        Once sqlite undid its transaction only the files are closed: the next open runs the
        journal again."""
        try:
            if not self._lost:
                self.flush_mail()
                self.commit()
                self.fold()
        finally:
            self._stop_writing()
            self._copier.close()
            self._db.close()
            self.journal.close()
            os.close(self._wal)
            os.close(self._database)

    # -- the node ------------------------------------------------------------------------------
    def next_incarnation(self) -> int:
        number = int(self.get_meta("incarnation") or "0") + 1
        self.set_meta("incarnation", str(number))
        self.commit()
        return number

    def get_meta(self, key: str) -> str | None:
        rows = self._read("SELECT value FROM meta WHERE key = ?", (key,))
        return rows[0][0] if rows else None

    def set_meta(self, key: str, value: str) -> None:
        self._write("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, value))

    # -- registrations -------------------------------------------------------------------------
    def get(self, public_id: str) -> PeerRecord | None:
        rows = self._read("SELECT * FROM registrations WHERE public_id = ?", (public_id,))
        if not rows:
            return None
        public, key, hashed, address = rows[0]
        return PeerRecord(
            public_id=public, public_key=bytes(key), private_id_hash=bytes(hashed), address=address
        )

    def add(self, record: PeerRecord) -> bool:
        cursor = self._write(
            "INSERT OR IGNORE INTO registrations VALUES (?, ?, ?, ?)",
            (record.public_id, record.public_key, record.private_id_hash, record.address),
        )
        self.commit()  # the peer is told its private identifier is kept only once it is
        return cursor.rowcount == 1

    def update_address(self, public_id: str, address: str) -> None:
        self._write(
            "UPDATE registrations SET address = ? WHERE public_id = ?", (address, public_id)
        )

    def remove(self, public_id: str) -> bool:
        cursor = self._write("DELETE FROM registrations WHERE public_id = ?", (public_id,))
        return cursor.rowcount == 1

    def registered(self) -> list[str]:
        return [row[0] for row in self._read("SELECT public_id FROM registrations ORDER BY 1")]

    # -- local peers ---------------------------------------------------------------------------
    def local_peers(self) -> list[str]:
        return [row[0] for row in self._read("SELECT DISTINCT peer FROM local_state ORDER BY 1")]

    def local_state(self, peer: str) -> LocalPeerState:
        advertisement = public_key = schema = None
        subscriptions = {}
        made = {}
        for item, data in self._read("SELECT item, data FROM local_state WHERE peer = ?", (peer,)):
            if item == _ADVERTISEMENT:
                advertisement = bytes(data)
            elif item == _PUBLIC_KEY:
                public_key = bytes(data)
            elif item == _PEER_SCHEMA:
                schema = bytes(data)
            elif item.startswith(_SUBSCRIBED_AT):
                (made[item.removeprefix(_SUBSCRIBED_AT)],) = struct.unpack(">d", data)
            else:
                subscriptions[item.removeprefix(_SUBSCRIPTION)] = bytes(data)
        return LocalPeerState(advertisement, subscriptions, public_key, made, schema)

    def _set_item(self, peer: str, item: str, data: bytes | None) -> None:
        if data is None:
            self._write("DELETE FROM local_state WHERE peer = ? AND item = ?", (peer, item))
        else:
            self._write("INSERT OR REPLACE INTO local_state VALUES (?, ?, ?)", (peer, item, data))

    def set_advertisement(self, peer: str, data: bytes | None) -> None:
        self._set_item(peer, _ADVERTISEMENT, data)

    def set_schema(self, peer: str, data: bytes | None) -> None:
        self._set_item(peer, _PEER_SCHEMA, data)

    def set_subscription(
        self, peer: str, subscription_id: str, data: bytes | None, made: float | None = None
    ) -> None:
        self._set_item(peer, _SUBSCRIPTION + subscription_id, data)
        if data is None or made is not None:
            packed = None if data is None else struct.pack(">d", made)
            self._set_item(peer, _SUBSCRIBED_AT + subscription_id, packed)

    def set_public_key(self, peer: str, data: bytes | None) -> None:
        self._set_item(peer, _PUBLIC_KEY, data)

    def forget_local(self, peer: str, *, keep_mail: bool = False) -> None:
        self._write("DELETE FROM local_state WHERE peer = ?", (peer,))
        if not keep_mail:
            self._unwritten.take_peer(peer)  # forgotten with the rest: not written to be deleted
            self._tables().pop(peer, None)
            self._delete_mail("peer = ?", (peer,))
        self._write("DELETE FROM expired WHERE peer = ?", (peer,))

    # -- mail ----------------------------------------------------------------------------------
    def _bodied(
        self, key: str, data: bytes, body: bytes | None, hashed: int | None = None
    ) -> tuple[bytes, int | None]:
        """What a row keeps of ``data``, and the id of its body: a shell and the id if ``body``
        is held once under ``key`` (put in now if it is not), else ``data``, whole.
        ``hashed``: ``key_hash(key)``, if the caller has it."""
        shell = None if body is None else hollowed(data, body)
        if shell is None or body is None:
            return data, None
        held = self._held.get(key)
        if held is None:
            hashed = key_hash(key) if hashed is None else hashed
            found = self._read(_BODY, (hashed, key))
            if found:
                held = (found[0][0], bytes(found[0][1]))
            else:
                cursor = self._write(
                    "INSERT INTO bodies (key, hash, data) VALUES (?, ?, ?)", (key, hashed, body)
                )
                held = (cursor.lastrowid, body)
                self._refs.setdefault(held[0], 0)
            if len(self._held) >= HELD_BODIES:
                del self._held[next(iter(self._held))]
            self._held[key] = held
        return (shell, held[0]) if held[1] == body else (data, None)

    def _body_id(self, key: str) -> int | None:
        """The id of the body kept under ``key`` (None: none)."""
        held = self._held.get(key)
        if held is not None:
            return held[0]
        found = self._read(_BODY, (key_hash(key), key))
        return found[0][0] if found else None

    def _count(self) -> None:
        """Adds what rows did to their bodies' counts since the last time."""
        if self._refs:
            changes, self._refs = self._refs, {}
            sql = (
                "INSERT INTO body_refs VALUES (?, ?) "
                "ON CONFLICT (body) DO UPDATE SET refs = refs + excluded.refs"
            )
            self._write_many(sql, list(changes.items()))

    def _refer(self, body: int | None, delta: int = 1) -> None:
        if body is not None:
            self._refs[body] = self._refs.get(body, 0) + delta

    def _delete(self, table: str, where: str, arguments: tuple) -> int:
        """Deletes the rows of ``table`` (mail or the log) that ``where`` selects; how many
        (their bodies counted down)."""
        rows = self._write(f"DELETE FROM {table} WHERE {where} RETURNING body", arguments)
        count = 0
        for (body,) in rows.fetchall():
            self._refer(body, -1)
            count += 1
        return count

    def _delete_mail(self, where: str, arguments: tuple) -> int:
        return self._delete("mail", where, arguments)

    def put_mail(
        self,
        peer: str,
        key: str,
        data: bytes,
        now: float,
        body: bytes | None = None,
        *,
        recoverable: bool = False,
        published_at: float = -math.inf,
    ) -> int | None:
        if self._unwritten.holds(peer, key):
            return None
        hashed = key_hash(peer, key)
        if not recoverable or len(self._unwritten) >= HELD_MAIL:
            return self._insert_mail(peer, Held(key, data, now, body, hashed), self._number())
        if self._read(_DELIVERED, (hashed, peer, key)):
            return None
        if peer in self._tables() and self._read(_MAILED, (peer, key)):
            return None
        number = self._number()
        self._next_delivery = number + 1
        self._unwritten.hold(peer, number, Held(key, data, now, body, hashed, published_at))
        return number

    def _insert_mail(self, peer: str, held: Held, number: int) -> int | None:
        """Writes ``held`` as ``peer``'s mail row ``number`` unless it repeats a row or a
        delivered key (None)."""
        kept, body_id = self._bodied(held.key, held.data, held.body)
        row = (number, peer, held.key, kept, held.at, body_id, held.hashed)
        # one statement: the check for a repeat of what the peer acknowledged is in it
        cursor = self._write(
            "INSERT OR IGNORE INTO mail (delivery, peer, key, data, at, body, hash)"
            f" SELECT ?, ?, ?, ?, ?, ?, ? WHERE NOT EXISTS ({_DELIVERED})",
            (*row, held.hashed, peer, held.key),
        )
        if cursor.rowcount != 1:
            return None
        self._refer(body_id)
        self._next_delivery = max(self._number(), number + 1)
        tables = self._tables()
        tables[peer] = max(tables.get(peer, 0), number)
        return number

    def _number(self) -> int:
        if self._next_delivery is None:
            rows = self._read("SELECT seq FROM sqlite_sequence WHERE name = 'mail'")
            self._next_delivery = (int(rows[0][0]) if rows else 0) + 1
        return self._next_delivery

    def _tables(self) -> dict[str, int]:
        if self._tabled is None:
            rows = self._read("SELECT peer, MAX(delivery) FROM mail GROUP BY peer")
            self._tabled = {peer: int(high) for peer, high in rows}
        return self._tabled

    def flush_mail(self, before: float = math.inf) -> None:
        for peer, number, held in self._unwritten.take_before(before):
            self._insert_mail(peer, held, number)
        self._keep_numbering()

    def _flush_peer(self, peer: str) -> None:
        """Writes ``peer``'s mail held unwritten: its mail is about to change."""
        for number, held in self._unwritten.take_peer(peer):
            self._insert_mail(peer, held, number)

    def _keep_numbering(self) -> None:
        """The table's sequence says the last number taken, those of mail acknowledged before it
        was written included: after a restart the numbers go on from there, as they did when
        sqlite numbered mail (an insert refused as a repeat moves sqlite's sequence too)."""
        if self._next_delivery is None:
            return
        last = self._next_delivery - 1
        cursor = self._write("UPDATE sqlite_sequence SET seq = ? WHERE name = 'mail'", (last,))
        if cursor.rowcount == 0 and last:
            self._write("INSERT INTO sqlite_sequence (name, seq) VALUES ('mail', ?)", (last,))

    def last_delivery(self) -> int:
        return self._number() - 1

    def mail_after(self, peer: str, after: int, limit: int) -> list[tuple[int, bytes]]:
        # held mail is read as it is, not written: a window's refill reads the mail that waits
        # for room, and a row written now would be deleted at the next ``Delivered``
        held = [(number, mail.data) for number, mail in self._unwritten.after(peer, after, limit)]
        if self._tables().get(peer, 0) <= after:
            return held  # no row after ``after``: not asked
        rows = self._read(
            f"SELECT delivery, mail.data, body, bodies.data FROM mail "
            f"{_WITH_BODY.format('mail')} WHERE peer = ? AND delivery > ? "
            "ORDER BY delivery LIMIT ?",
            (peer, after, limit),
        )
        written = [(number, _whole(*row)) for number, *row in rows]
        return list(itertools.islice(heapq.merge(held, written), limit))

    def acknowledge(self, peer: str, through: int, now: float) -> int:
        held = self._unwritten.take_through(peer, through)
        if held:
            self._write_many(
                "INSERT INTO delivered VALUES (?, ?, ?, ?)",
                [(peer, mail.key, now, mail.hashed) for mail in held],
            )
        tables = self._tables()
        if peer not in tables:
            return len(held)
        self._write(
            "INSERT INTO delivered SELECT peer, key, ?, hash FROM mail "
            "WHERE peer = ? AND delivery <= ?",
            (now, peer, through),
        )
        if through >= tables[peer]:
            del tables[peer]
        return len(held) + self._delete_mail("peer = ? AND delivery <= ?", (peer, through))

    def take_mail(self, peer: str, now: float) -> list[bytes]:
        self._flush_peer(peer)
        self._tables().pop(peer, None)
        rows = self._read(
            f"SELECT mail.data, body, bodies.data FROM mail {_WITH_BODY.format('mail')} "
            "WHERE peer = ? ORDER BY delivery",
            (peer,),
        )
        # not marked delivered (see MemoryStore.take_mail)
        self._delete_mail("peer = ?", (peer,))
        return [_whole(*row) for row in rows]

    def drop_mail(self, peer: str, through: int) -> int:
        # not marked delivered (see MemoryStore.take_mail)
        self._flush_peer(peer)
        tables = self._tables()
        if through >= tables.get(peer, through):
            tables.pop(peer, None)
        return self._delete_mail("peer = ? AND delivery <= ?", (peer, through))

    def renew_mail(self, peer: str, key: str) -> int | None:
        self._flush_peer(peer)
        rows = self._read(
            "SELECT data, at, body, hash FROM mail WHERE peer = ? AND key = ?", (peer, key)
        )
        if not rows:
            return None
        # the same row under a new number: its body's count is as it was
        self._write("DELETE FROM mail WHERE peer = ? AND key = ?", (peer, key))
        number = self._number()
        self._write(
            "INSERT INTO mail (delivery, peer, key, data, at, body, hash)"
            " VALUES (?, ?, ?, ?, ?, ?, ?)",
            (number, peer, key, *rows[0]),
        )
        self._next_delivery = number + 1
        self._tables()[peer] = number
        return number

    def discard_mail(self, peer: str, number: int) -> None:
        self._flush_peer(peer)
        self._delete_mail("peer = ? AND delivery = ?", (peer, number))

    def mail_counts(self) -> dict[str, int]:
        # held mail counted, not written: a status page's read changes nothing
        counts = Counter(self._unwritten.counts())
        counts.update(dict(self._read("SELECT peer, COUNT(*) FROM mail GROUP BY peer")))
        return dict(sorted(counts.items()))

    def expire_mail(self, before: float, cap: int) -> dict[str, int]:
        self.flush_mail()
        dropped: dict[str, int] = {}
        for peer, count in self._read(
            "SELECT peer, COUNT(*) FROM mail WHERE at < ? GROUP BY peer", (before,)
        ):
            dropped[peer] = count
        self._delete_mail("at < ?", (before,))
        for peer, count in self._read(
            "SELECT peer, COUNT(*) FROM mail GROUP BY peer HAVING COUNT(*) > ?", (cap,)
        ):
            excess = count - cap
            self._delete_mail(
                "delivery IN (SELECT delivery FROM mail WHERE peer = ? ORDER BY delivery LIMIT ?)",
                (peer, excess),
            )
            dropped[peer] = dropped.get(peer, 0) + excess
        return dropped

    def forget_delivered(self, before: float) -> None:
        self._write("DELETE FROM delivered WHERE at < ?", (before,))

    def add_expired(self, peer: str, count: int) -> None:
        self._write(
            "INSERT INTO expired VALUES (?, ?) ON CONFLICT (peer) DO UPDATE SET "
            "count = count + excluded.count",
            (peer, count),
        )

    def take_expired(self, peer: str) -> int:
        rows = self._read("SELECT count FROM expired WHERE peer = ?", (peer,))
        if not rows:
            return 0
        self._write("DELETE FROM expired WHERE peer = ?", (peer,))
        return int(rows[0][0])

    # -- the publication log -------------------------------------------------------------------
    def log_publication(self, key: str, data: bytes, at: float, body: bytes | None = None) -> bool:
        hashed = key_hash(key)
        logged = self._read(_LOGGED_AT, (hashed, key))
        if logged and logged[0][0] < at:
            return logged[0][1] is not None  # its first acceptance stays
        kept, body_id = self._bodied(key, data, body, hashed)
        if logged:
            # logged already at that time or later (an adopted log, a replay): replaced.
            # (Asked apart: an insert that asked the table it inserts into would copy each row
            # to a temporary table.)
            self._delete("publications", "hash = ? AND key = ?", (hashed, key))
        self._write(
            "INSERT INTO publications (key, data, at, body, hash) VALUES (?, ?, ?, ?, ?)",
            (key, kept, at, body_id, hashed),
        )
        self._refer(body_id)
        return body_id is not None

    def is_logged(self, key: str) -> bool:
        return bool(self._read(_LOGGED, (key_hash(key), key)))

    def logged_since(self, since: float) -> Iterator[bytes]:
        rows = self._read(
            "SELECT publications.data, body, bodies.data FROM publications "
            f"{_WITH_BODY.format('publications')} WHERE at >= ? ORDER BY at",
            (since,),
        )
        return iter([_whole(*row) for row in rows])

    def logged_between(self, since: float, until: float, limit: int) -> list[tuple[float, bytes]]:
        rows = self._read(
            "SELECT at, publications.data, body, bodies.data FROM publications "
            f"{_WITH_BODY.format('publications')} WHERE at BETWEEN ? AND ? ORDER BY at LIMIT ?",
            (since, until, limit),
        )
        return [(float(at), _whole(*rest)) for at, *rest in rows]

    def body(self, key: str) -> bytes | None:
        rows = self._read(_BODY, (key_hash(key), key))
        return bytes(rows[0][1]) if rows else None

    def drop_bodies(self) -> int:
        self._held.clear()
        self._count()
        dropped = self._write(
            "DELETE FROM bodies WHERE id IN (SELECT body FROM body_refs WHERE refs <= 0)"
        ).rowcount
        self._write("DELETE FROM body_refs WHERE refs <= 0")
        return dropped

    def latest_logged(self) -> float | None:
        """The latest time in the publication log (a restarted origin's hybrid clock goes on
        from there: ``clocks``, rule 1)."""
        return self._read("SELECT MAX(at) FROM publications")[0][0]

    def prune_log(self, before: float, keep: int) -> int:
        floor = self._read("SELECT MAX(at) FROM publications WHERE at < ?", (before,))[0][0]
        removed = self._delete("publications", "at < ?", (before,))
        (count,) = self._read("SELECT COUNT(*) FROM publications")[0]
        if count > keep:
            (cut,) = self._read(
                "SELECT MAX(at) FROM (SELECT at FROM publications ORDER BY at LIMIT ?)",
                (count - keep,),
            )[0]
            floor = cut if floor is None else max(floor, cut)
            removed += self._delete(
                "publications",
                "rowid IN (SELECT rowid FROM publications ORDER BY at LIMIT ?)",
                (count - keep,),
            )
        if floor is not None and floor > self.log_floor():
            self.set_meta("log_floor", repr(float(floor)))
        return removed

    def log_floor(self) -> float:
        """The latest publication time pruned from the log: a catch-up from before it may
        have missed something (``superpeer._catchup``, gap notices)."""
        return float(self.get_meta("log_floor") or "-inf")

    # -- pending work --------------------------------------------------------------------------
    def pending(self, kind: str) -> dict[str, dict]:
        rows = self._read("SELECT key, value FROM pending WHERE kind = ?", (kind,))
        return {key: json.loads(value) for key, value in rows}

    def set_pending(self, kind: str, key: str, value: dict | None) -> None:
        if value is None:
            self._write("DELETE FROM pending WHERE kind = ? AND key = ?", (kind, key))
        else:
            self._write(
                "INSERT OR REPLACE INTO pending VALUES (?, ?, ?)", (kind, key, json.dumps(value))
            )
            named = referred_body(value)
            if named is not None:  # (the one it replaced: ``pending_unrefers``)
                self._refer(self._body_id(named))

    def pending_value(self, kind: str, key: str) -> dict | None:
        rows = self._read("SELECT value FROM pending WHERE kind = ? AND key = ?", (kind, key))
        return json.loads(rows[0][0]) if rows else None

    def pending_range(self, kind: str, low: str, high: str) -> dict[str, dict]:
        rows = self._read(
            "SELECT key, value FROM pending WHERE kind = ? AND key >= ? AND key < ?",
            (kind, low, high),
        )
        return {key: json.loads(value) for key, value in rows}

    def count_pending(self, kind: str, low: str, high: str) -> int:
        return self._read(
            "SELECT COUNT(*) FROM pending WHERE kind = ? AND key >= ? AND key < ?",
            (kind, low, high),
        )[0][0]

    def iter_pending(self, kind: str) -> Iterator[tuple[str, dict]]:
        for key, value in self._db.execute(
            "SELECT key, value FROM pending WHERE kind = ?", (kind,)
        ):
            yield key, json.loads(value)

    # -- rendezvous files ----------------------------------------------------------------------
    def put_chunk(self, key: str, offset: int, data: bytes) -> None:
        if self._writing is None or self._writing[0] != key:
            self._stop_writing()
            descriptor = os.open(self._files / key, os.O_WRONLY | os.O_CREAT, 0o600)
            self._writing = (key, descriptor)
        os.pwrite(self._writing[1], data, offset)
        if self.syncs:
            with self._written_lock:
                self._written.add(key)

    def chunks(self, key: str, start: int, end: int) -> list[tuple[int, bytes]]:
        try:
            descriptor = os.open(self._files / key, os.O_RDONLY)
        except FileNotFoundError:
            return []
        try:
            data = os.pread(descriptor, max(0, end - start), start)
        finally:
            os.close(descriptor)
        return [(start, data)] if data else []

    def drop_chunks(self, key: str) -> None:
        if self._writing is not None and self._writing[0] == key:
            self._stop_writing()
        (self._files / key).unlink(missing_ok=True)

    def _stop_writing(self) -> None:
        if self._writing is not None:
            os.close(self._writing[1])
            self._writing = None

    def _move_chunk_rows(self) -> None:
        """Rendezvous bytes an earlier version kept as rows go to their files, once."""
        rows = self._read("SELECT key, start, data FROM rendezvous_chunks")
        for key, start, data in rows:
            self.put_chunk(key, start, bytes(data))
        if rows:
            self.sync()
            self._write("DELETE FROM rendezvous_chunks")
            self.commit()
