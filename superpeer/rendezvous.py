"""Resources and rendezvous at the access points, sans-IO (seed 004, Section 5.1, Fig. 6).

A peer A that wants the resource of a publication owned by B sends ``Fetch`` to its access point
AP. AP keeps a durable *incoming* record and sends ``RendezvousRequest`` to B's access point AP2
(named in the notification), routed over the cube by bit-fixing: each hop passes it to its parent
in the spanning tree rooted at AP2's position, at most log2 N hops, no network-wide look-up (only
the fallback when B is not where the notification said and left no forwarding address: see the
rules). AP2 keeps the newest request durably as an *outgoing* record and, whenever B is attached
(now, or when it reconnects), tells it ``UploadWanted``; B answers with ``Upload`` frames, which
AP2 relays to AP (``RendezvousChunk``, same routing). AP writes them to the file it keeps for the
rendezvous (the store's chunks), hashing them as they come, and keeps ``windows_in_flight``
windows of ``window_bytes`` asked for: the next request leaves when a window's worth of room is
free, while the bytes of the windows before it are still on their way (a pipeline, not a round
trip per window), so at most ``windows_in_flight x window_bytes`` of one file are in flight
anywhere: memory stays bounded. AP2 extends its record with each next window (the bytes of the
earlier ones still pass). The record's progress is written when a window is asked for, not at
every chunk, and the store makes the file's bytes durable before that record (``Store.sync``); a
transfer cut anywhere resumes from what the record counts and the file holds (AP asks again after
``retry_seconds`` without progress; B, reconnecting, is asked again; after a restart AP hashes the
bytes it holds once, then goes on). When the file is complete AP checks size and SHA-256 against
what A's notification said and keeps the file, or drops it and tells A (``FetchFailed``). A
collects it (``FileReady`` -> ``Collect`` -> ``FileChunk`` windows -> ``Collected``), online now
or when it comes back. A attached while the file comes is told ``FileReady`` when its fetch is
accepted and collects at once: a ``Collect`` of bytes not here yet waits (in memory) and is
served as they arrive, so the two relays overlap instead of the second starting when the first
ends; A checks size and SHA-256 itself before it keeps the file (a file AP refuses is refused
at A too, and A is told why).

The owner online and the owner offline are the same path; only the wait differs. The transfer is
relayed through the access points rather than direct between peers: peers need no listening
socket reachable from outside, the rendezvous needs the relay anyway, and every hop is already
TLS-authenticated (peer sessions by secure identification, super-peers by the network CA).

Rules:

* One rendezvous per (requester, owner, publication): its key is a hash of the three, the same at
  every access point, so a repeated or re-sent ``Fetch`` is the same rendezvous, and a requester
  that migrated and fetches again through its new access point redirects the owner's side to it.
* Only the owner answers: AP2 accepts an ``Upload`` only from the authenticated session of the
  record's owner. Only the requester collects: AP serves a file only to the authenticated session
  of the record's requester.
* A peer re-sends its unfinished fetches after every connection (``peer.resources``): that is how
  a migrated requester's rendezvous follows it.
* Requests travel by bit-fixing (``superpeer.routes``) to the access point the notification
  named. If the owner is attached there, it keeps the request; if the owner moved away, the
  request follows its forwarding address (the one the migration left, ``superpeer.node``), and
  the chunks say where they came from (``RendezvousChunk.superpeer``), so the next windows go
  there directly; if it knows nothing of the owner (its forwarding address expired, or the owner
  left), it answers ``not_here`` and the requester's access point looks the owner up
  network-wide (``SuperPeerCore.look_up``, at most once per ``retry_seconds``; an owner online
  nowhere is looked up again then) and asks the access point it is online at. If the named
  super-peer left the cube, the route ends at whoever holds its position now, which answers
  the same way from what it knows of the owner (adopted there, moved on, or "not here").
* An owner that moves takes the requests waiting for it along: its old access point sends them
  on to the new one (``moved_away``) with the rest of the handover.
* Limits: ``max_bytes`` (the rendezvous directory's quota, counted by the sizes announced when
  fetches are accepted; a fetch that does not fit is refused) and ``retention_seconds`` (a record
  older than that is dropped, with its bytes); both shown in ``superpeer status``.

Following a requester that moves (like its kept notifications). Its old access point may hold
a file for it, complete or in part, that the owner may never upload again. The migration's
``HandoverDone`` lists those files (key, bytes held) and the old access point keeps them
(``HANDED``); the new one *pulls* them: for the peer's record (its fetch, re-sent after it
connected, makes it; an offer that comes first waits in ``OFFERED``) it asks the old access
point, window by window, with the ``RendezvousRequest`` s and chunks the owner's side uses
(``held``), then asks the owner for whatever is left. When it holds all the old one had, durably,
it says so (a request from the end of those bytes) and only then does the old one delete its
copy; a pull cut off anywhere is asked again after ``retry_seconds``, from what the new one
holds, and a copy nobody asks for goes after ``retention_seconds``. Pulling rather than pushing
with the handover: the new access point already drives windows for every transfer (bounded
memory, resumable, retried), so the handover needs no flow control of its own and the old
access point sends nothing it was not asked for; and it reuses the confirmation rule of mail
(deleted only once the receiver has it). A record with no bytes yet is not kept: the peer's
re-sent fetch redirects the owner's side to the new access point.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from qel.resources import rendezvous_key
from superpeer.actions import ToPeer
from superpeer.core import TopologyView
from superpeer.routes import HERE, UNKNOWN_POSITION, Hop, Whereabouts, aim, pass_on, step
from wire import encode
from wire import messages as m
from wire.requests import request_label

INCOMING: Final = "rendezvous-in"
"""Records at the requester's access point, by rendezvous key."""
OUTGOING: Final = "rendezvous-out"
"""Records at the owner's access point, by rendezvous key."""
OFFERED: Final = "rendezvous-offered"
"""At a requester's new access point, by rendezvous key: what its previous one holds for it
(``HandoverDone.rendezvous``), until a fetch of it comes (the peer re-sends its fetches)."""
RECEIVING: Final = "receiving"
READY: Final = "ready"
FAILED: Final = "failed"
HANDED: Final = "handed"
"""At a requester's previous access point: the bytes held for it, kept for its new access point
until that one says it has them."""
MAX_WAITING_COLLECTS: Final = 4
"""``Collect`` s of bytes not here yet kept per rendezvous (a requester asks for two windows at
most, ``peer.resources``): beyond it the oldest is forgotten, so a requester that asks again and
again holds no more of this node's memory."""
MAX_HOPS: Final = 64
"""A request that followed forwarding addresses for longer than this is answered "not here"
(the chain is wrong; the requester's access point looks the owner up)."""

Send = Callable[..., None]
"""How the node sends a backbone message (``SuperPeerNode._send``: target, message, now, out,
and the target's address for a super-peer that is not a neighbour)."""
LookUp = Callable[[str, str, float, list], None]
"""How the node looks a peer up network-wide for a rendezvous (owner, rendezvous key, now, out;
answered by ``Rendezvous.found``)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RendezvousConfig:
    chunk_bytes: int = 192 * 1024
    """Bytes per ``FileChunk`` (under the wire's binary limit)."""
    window_bytes: int = 4 * 1024 * 1024
    """Bytes asked for in one request, of an owner or by a requester (at most this much is
    served for one ``Collect``)."""
    windows_in_flight: int = 2
    """Requests of one transfer outstanding at once: the next window is asked for while the
    bytes of the previous ones are still on their way, so a transfer is not one round trip
    (and a commit at each end) per window. What one transfer may hold in flight is this many
    windows; 1 is stop-and-wait."""
    max_bytes: int = 1024 * 1024 * 1024
    """The rendezvous directory's quota (sum of the sizes of the files being received or kept)."""
    retention_seconds: float = 7 * 86400.0
    """A rendezvous not completed and collected within this time is dropped."""
    retry_seconds: float = 30.0
    """A file being received that made no progress for this long is asked for again."""


@dataclass(slots=True)
class _Receiving:
    """A file being received, as far as it came: ahead of its durable record (which is written
    when a window is asked for, not at every chunk) and hashed as it comes, so completing it
    reads nothing back. Lost with a restart: rebuilt from the record and the bytes held."""

    received: int
    digest: hashlib._Hash
    progress_at: float


@dataclass(slots=True)
class _Collector:
    """A requester's ``Collect`` of bytes not here yet: served as they come, from ``next`` up
    to ``end`` (its window). In memory: a requester that reconnects collects again."""

    peer: str
    next: int
    end: int


@dataclass
class RendezvousStatistics:
    requested: int = 0
    relayed: int = 0
    completed: int = 0
    collected: int = 0
    corrupted: int = 0
    refused: int = 0
    """Uploads or collections from a peer that is not the owner or the requester."""
    unroutable: int = 0
    expired: int = 0
    forwarded: int = 0
    """Requests passed on along an owner's forwarding address."""
    not_here: int = 0
    """Requests answered "not here" (the owner unknown where they were routed)."""
    looked_up: int = 0
    """Owners looked up network-wide after a "not here"."""
    handed: int = 0
    """Files (or parts) held for a requester that moved, released by its new access point."""


class Rendezvous:
    """One super-peer's part in resource transfers; see the module docstring."""

    def __init__(
        self,
        node_id: str,
        store,  # superpeer.store.Store
        *,
        send: Send,
        where: Callable[[], tuple[TopologyView, dict[str, int]] | None],
        whereabouts: Callable[[str], Whereabouts],
        look_up: LookUp,
        config: RendezvousConfig | None = None,
    ) -> None:
        self.node_id = node_id
        self._where = where
        self._whereabouts = whereabouts
        self._look_up = look_up
        """The cube as this node sees it now and the origins' root positions (None while it is
        not a member)."""
        self.store = store
        self._send = send
        self.config = config or RendezvousConfig()
        self.statistics = RendezvousStatistics()
        self._attached: set[str] = set()
        self._receiving: dict[str, _Receiving] = {}
        self._collectors: dict[str, list[_Collector]] = {}
        self._relayed: dict[str, int] = {}
        """At the owner's access point, per rendezvous: where the owner's last upload relayed
        ended (how far the record's start moves when a next window extends it)."""
        self._tables: dict[str, dict[str, dict]] = {}
        """The records of each kind (``INCOMING``, ``OUTGOING``, ``OFFERED``), read from the
        store once and written through to it (``_put``): a chunk relayed or received, and the
        timer's deadline asked after each group commit, read no row and decode no JSON. This
        object is the only writer of those kinds, so the copy is the store's, plus what is
        ahead of it in memory anyway (a file's progress between two writes of its record)."""

    # -- the requester's access point -----------------------------------------------------------
    def fetch(
        self,
        peer: str,
        message: m.Fetch,
        now: float,
        out: list,
    ) -> None:
        request = request_label(message)
        key = rendezvous_key(peer, message.owner, message.publication)
        incoming = self._incoming()
        record = incoming.get(key)
        if message.owner == peer:
            self._to_peer(peer, m.Refused(request=request, reason="you own this resource"), out)
            return
        if record is None or record["state"] == FAILED:
            held = sum(r["size"] for k, r in incoming.items() if k != key and r["state"] != FAILED)
            if message.size < 0 or held + message.size > self.config.max_bytes:
                reason = (
                    f"the rendezvous directory cannot take {message.size} more bytes "
                    f"({held} held, max_bytes = {self.config.max_bytes})"
                )
                self._to_peer(peer, m.Refused(request=request, reason=reason), out)
                return
            if record is not None:
                self._drop_bytes(key)
            record = {
                "requester": peer,
                "owner": message.owner,
                "publication": message.publication,
                "sha256": message.sha256,
                "size": message.size,
                "received": 0,
                "state": RECEIVING,
                "reason": "",
                "at": now,
            }
        if record["state"] == HANDED:  # the requester came back before its new access point
            record["state"] = READY if record["received"] == record["size"] else RECEIVING
        record.setdefault("superpeer", message.superpeer)
        record["progress_at"] = now
        offered = self._get(OFFERED, key)
        if offered is not None:
            self._put(OFFERED, key, None)
            record["pull"] = offered
        self._put(INCOMING, key, record)
        self.statistics.requested += 1
        self._to_peer(peer, m.Ack(request=request), out)
        if record["state"] == READY:
            self._release(key, record, now, out)
            self._ready(key, record, out)
        elif record["size"] == 0:
            self._complete(key, record, now, out)
        else:
            self._ask(key, record, now, out)
            self._ready(key, record, out)  # it collects the bytes as they come

    def _ask(self, key: str, record: dict, now: float, out: list, *, more: bool = False) -> None:
        """Ask for the next window from what is held (a new start, a retry, a redirection), or
        with ``more`` the windows beyond what was asked for already, up to
        ``windows_in_flight`` of them beyond what is held: of the requester's previous access
        point while it holds bytes not yet here (``pull``), else of the owner's access point."""
        where = self._where()
        if where is None:
            self.statistics.unroutable += 1
            return  # not a member (a rejoin): asked again after ``retry_seconds``
        view, positions = where
        self._release(key, record, now, out)
        pull = record.get("pull")
        if pull is not None:
            target, address, end = pull["node"], pull["address"], pull["held"]
        else:
            target, address, end = record["superpeer"], "", record["size"]
            if target != self.node_id and target not in positions:
                # the owner's access point advertises nothing any more (it left the cube, or
                # the owner's advertisement went): where is the owner now?
                self._owner_elsewhere(key, record, now, out)
                return
        window = self.config.window_bytes
        # a new start asks for one window: the others follow once its first bytes say that
        # the owner is where the request went (no windows sent after an owner that moved)
        ahead = (self.config.windows_in_flight - 1) * window if more else 0
        offset = record["asked_until"] if more else record["received"]
        requests = []
        while offset < end and offset - record["received"] <= ahead:
            length = min(window, end - offset)
            requests.append(
                m.RendezvousRequest(
                    rendezvous=key,
                    target=target,
                    target_position=positions.get(target, UNKNOWN_POSITION),
                    requester=record["requester"],
                    requester_superpeer=self.node_id,
                    requester_position=view.root_position,
                    owner=record["owner"],
                    publication=record["publication"],
                    offset=offset,
                    length=length,
                    hops=0,
                    held=pull is not None,
                )
            )
            offset += length
        if not requests:
            return
        record["asked_until"] = offset
        self._put(INCOMING, key, record)
        for request in requests:
            self._toward(request, address, now, out)

    def _release(self, key: str, record: dict, now: float, out: list) -> None:
        """The bytes the previous access point held are here, durably: tell it to forget its
        copy (a request from the end of what it holds), and ask the owner from now on."""
        pull = record.get("pull")
        if pull is None or (record["received"] < pull["held"] and record["state"] == RECEIVING):
            return
        del record["pull"]
        self._put(INCOMING, key, record)
        where = self._where()
        if where is None:
            return
        view, positions = where
        release = m.RendezvousRequest(
            rendezvous=key,
            target=pull["node"],
            target_position=positions.get(pull["node"], UNKNOWN_POSITION),
            requester=record["requester"],
            requester_superpeer=self.node_id,
            requester_position=view.root_position,
            owner=record["owner"],
            publication=record["publication"],
            offset=pull["held"],
            length=0,
            hops=0,
            held=True,
        )
        self._toward(release, pull["address"], now, out)

    def _owner_elsewhere(self, key: str, record: dict, now: float, out: list) -> None:
        """The owner is not at the access point the record names: look it up network-wide
        (once per ``retry_seconds``); ``found`` redirects the record."""
        if now - record.get("looked_up_at", -math.inf) < self.config.retry_seconds:
            return
        record["looked_up_at"] = now
        self._put(INCOMING, key, record)
        self.statistics.looked_up += 1
        self._look_up(record["owner"], key, now, out)

    def found(self, key: str, superpeer: str, now: float, out: list) -> None:
        """The network-wide look-up for rendezvous ``key``: the owner is online at
        ``superpeer`` (empty: nowhere; asked again after ``retry_seconds``)."""
        record = self._incoming_record(key)
        if record is None or record["state"] != RECEIVING or not superpeer:
            return
        record["superpeer"] = superpeer
        record["progress_at"] = now
        self._put(INCOMING, key, record)
        self._ask(key, record, now, out)

    def chunk_in(
        self,
        message: m.RendezvousChunk,
        now: float,
        out: list,
    ) -> None:
        key = message.rendezvous
        record = self._incoming_record(key)
        if record is None or record["state"] != RECEIVING:
            return  # a repeat after completion, or a record dropped meanwhile
        if message.not_here:
            if record.get("pull", {}).get("node") == message.superpeer:
                # the previous access point lost its copy: ask the owner
                del record["pull"]
                self._put(INCOMING, key, record)
                self._ask(key, record, now, out)
            else:
                self._owner_elsewhere(key, record, now, out)
            return
        if message.error:
            self._fail(key, record, f"the owner could not serve it: {message.error}", out)
            return
        receiving = self._receiving_of(key, record)
        if message.offset != receiving.received:
            return  # a repeat of what is already held (a window asked twice)
        end = message.offset + len(message.data)
        if end > record["size"]:
            self._fail(key, record, "the upload is larger than the notification said", out)
            return
        self.store.put_chunk(key, message.offset, message.data)
        receiving.digest.update(message.data)
        receiving.received = record["received"] = end
        receiving.progress_at = record["progress_at"] = now
        self.statistics.relayed += 1
        self._serve_collectors(key, message.offset, message.data, out)
        if message.superpeer and message.superpeer != record["superpeer"]:
            # from the owner, which moved: the next windows go where it is now
            record["superpeer"] = message.superpeer
            self._put(INCOMING, key, record)
        if end == record["size"]:
            self._complete(key, record, now, out)
        elif (
            record.get("asked_until", 0) - end
            <= (self.config.windows_in_flight - 1) * self.config.window_bytes
        ):
            self._ask(key, record, now, out, more=True)

    def _complete(self, key: str, record: dict, now: float, out: list) -> None:
        digest = self._receiving_of(key, record).digest
        self._receiving.pop(key, None)
        if record["received"] != record["size"] or digest.hexdigest() != record["sha256"]:
            self.statistics.corrupted += 1
            self._fail(
                key, record, "the uploaded file does not match the notification's SHA-256", out
            )
            return
        record["state"] = READY
        self._put(INCOMING, key, record)
        self.statistics.completed += 1
        self._release(key, record, now, out)
        self._ready(key, record, out)

    def _receiving_of(self, key: str, record: dict) -> _Receiving:
        """The progress of the file being received for ``key``; after a restart, rebuilt from
        the bytes its record counts (read and hashed once), as far as they are all here."""
        receiving = self._receiving.get(key)
        if receiving is None:
            digest = hashlib.sha256()
            held = 0
            for start in range(0, record["received"], self.config.window_bytes):
                stop = min(record["received"], start + self.config.window_bytes)
                for offset, data in self._read(key, start, stop):
                    if offset != held:
                        break
                    digest.update(data)
                    held += len(data)
                if held != stop:
                    break
            record["received"] = held
            receiving = _Receiving(
                received=held, digest=digest, progress_at=record.get("progress_at", 0.0)
            )
            self._receiving[key] = receiving
        return receiving

    def _drop_bytes(self, key: str) -> None:
        self.store.drop_chunks(key)
        self._receiving.pop(key, None)
        self._collectors.pop(key, None)

    def _serve_collectors(self, key: str, offset: int, data: bytes, out: list) -> None:
        """The requester collecting ``key`` while it is received gets the bytes that just came
        (``data``, from ``offset``), as far as its ``Collect`` s asked for them (without reading
        them back: the file is written and read at once only when they were not waiting)."""
        collectors = self._collectors.get(key)
        if not collectors:
            return
        end = offset + len(data)
        for collector in collectors:
            stop = min(end, collector.end)
            if collector.next >= stop:
                continue
            if collector.next >= offset:
                pieces = [(collector.next, data[collector.next - offset : stop - offset])]
            else:  # asked for from before these bytes (a Collect repeated): from the file
                pieces = self._read(key, collector.next, stop)
            self._send_pieces(collector.peer, key, pieces, collector.end, out)
            collector.next = stop
        collectors[:] = [c for c in collectors if c.next < c.end]

    def _table(self, kind: str) -> dict[str, dict]:
        """The records of ``kind`` by rendezvous key (read from the store the first time)."""
        table = self._tables.get(kind)
        if table is None:
            table = self._tables[kind] = self.store.pending(kind)
        return table

    def _get(self, kind: str, key: str) -> dict | None:
        return self._table(kind).get(key)

    def _put(self, kind: str, key: str, value: dict | None) -> None:
        """Write ``value`` (None: delete) through to the store, durable with its transaction."""
        self.store.set_pending(kind, key, value)
        table = self._table(kind)
        if value is None:
            table.pop(key, None)
        else:
            table[key] = value

    def _incoming(self) -> dict[str, dict]:
        """The requesters' records, with the progress of the files being received."""
        records = dict(self._table(INCOMING))
        for key, receiving in self._receiving.items():
            self._overlay(records.get(key), receiving)
        return records

    def _incoming_record(self, key: str) -> dict | None:
        record = self._get(INCOMING, key)
        receiving = self._receiving.get(key)
        if receiving is not None:
            self._overlay(record, receiving)
        return record

    @staticmethod
    def _overlay(record: dict | None, receiving: _Receiving) -> None:
        if record is not None and record["state"] == RECEIVING:
            record["received"] = receiving.received
            record["progress_at"] = max(record.get("progress_at", 0.0), receiving.progress_at)

    def _fail(self, key: str, record: dict, reason: str, out: list) -> None:
        self._drop_bytes(key)
        record.update(state=FAILED, reason=reason, received=0)
        self._put(INCOMING, key, record)
        if record["requester"] in self._attached:
            self._failed_notice(key, record, out)

    def _failed_notice(self, key: str, record: dict, out: list) -> None:
        notice = m.FetchFailed(
            rendezvous=key,
            publication=record["publication"],
            owner=record["owner"],
            reason=record["reason"],
        )
        self._to_peer(record["requester"], notice, out)

    def _ready(self, key: str, record: dict, out: list) -> None:
        if record["requester"] not in self._attached:
            return  # told when it comes back
        ready = m.FileReady(
            rendezvous=key,
            publication=record["publication"],
            owner=record["owner"],
            sha256=record["sha256"],
            size=record["size"],
        )
        self._to_peer(record["requester"], ready, out)

    def collect(self, peer: str, message: m.Collect, out: list) -> None:
        """Serve a window of the requester's file: what is here now, and (while the file is
        still being received) the rest of the window as it comes."""
        key = message.rendezvous
        record = self._incoming_record(key)
        if (
            record is None
            or record["requester"] != peer
            or record["state"] not in (READY, RECEIVING)
        ):
            if record is not None and record["requester"] != peer:
                self.statistics.refused += 1
            notice = m.FetchFailed(
                rendezvous=key,
                publication="",
                owner="",
                reason="no rendezvous file of yours under that key",
            )
            self._to_peer(peer, notice, out)
            return
        start = max(0, message.offset)
        end = min(record["size"], start + min(message.length, self.config.window_bytes))
        here = min(end, record["received"])
        pieces = self._read(key, start, here)
        if sum(len(piece) for _, piece in pieces) < here - start:
            # the record counts bytes its file no longer has (a data directory restored without
            # its rendezvous files): the requester would wait for them for ever
            self._fail(key, record, "the access point lost the file's bytes; fetch again", out)
            return
        self._send_pieces(peer, key, pieces, end, out)
        if here < end:
            collectors = self._collectors.setdefault(key, [])
            collectors.append(_Collector(peer=peer, next=max(start, here), end=end))
            del collectors[:-MAX_WAITING_COLLECTS]

    def _send_pieces(
        self, peer: str, key: str, pieces: list[tuple[int, bytes]], window_end: int, out: list
    ) -> None:
        """``FileChunk`` s of at most ``chunk_bytes`` for the (offset, bytes) ``pieces``."""
        size = self.config.chunk_bytes
        for first, piece in pieces:
            for at in range(0, len(piece), size):
                chunk = m.FileChunk(
                    rendezvous=key,
                    offset=first + at,
                    data=piece[at : at + size],
                    window_end=window_end,
                )
                self._to_peer(peer, chunk, out)

    def _read(self, key: str, start: int, end: int) -> list[tuple[int, bytes]]:
        """The bytes held for ``key`` in [start, end), as (offset, bytes) pieces in order."""
        pieces = []
        for offset, data in self.store.chunks(key, start, end):
            pieces.append((max(offset, start), data[max(0, start - offset) : end - offset]))
        return pieces

    def collected(self, peer: str, message: m.Collected) -> None:
        record = self._incoming_record(message.rendezvous)
        if record is None or record["requester"] != peer:
            return
        self._drop_bytes(message.rendezvous)
        self._put(INCOMING, message.rendezvous, None)
        self.statistics.collected += 1

    # -- the owner's access point ---------------------------------------------------------------
    def request_in(self, message: m.RendezvousRequest, now: float, out: list) -> None:
        """A request reached the super-peer it names: keep it for the owner attached here,
        follow the owner's forwarding address, or answer that it is not here."""
        if message.held:
            self._serve_held(message, now, out)
            return
        whereabouts = self._whereabouts(message.owner)
        if whereabouts.forward and message.hops < MAX_HOPS:
            self._follow(message, whereabouts, now, out)
            return
        if not whereabouts.attached:
            self._not_here(message, now, out)
            return
        record = self._get(OUTGOING, message.rendezvous)
        if (
            record is not None
            and record["superpeer"] == message.requester_superpeer
            and record["offset"] + record["length"] == message.offset
        ):
            # the next window of a transfer under way (``windows_in_flight``): the bytes of the
            # windows before it still pass, and the owner is asked for this one only; the
            # record starts where the uploads reached (an owner that reconnects is asked for
            # the windows in flight, not for the whole file again)
            start = max(record["offset"], self._relayed.get(message.rendezvous, 0))
            end = message.offset + message.length
            record.update(offset=start, length=end - start, at=now)
            wanted = {**record, "offset": message.offset, "length": message.length}
        else:
            self._relayed.pop(message.rendezvous, None)
            record = wanted = {
                "requester": message.requester,
                "owner": message.owner,
                "publication": message.publication,
                "superpeer": message.requester_superpeer,
                "position": message.requester_position,
                "offset": message.offset,
                "length": message.length,
                "at": now,
            }
        self._put(OUTGOING, message.rendezvous, record)
        if message.owner in self._attached:
            self._want(message.rendezvous, wanted, out)

    def _follow(
        self, message: m.RendezvousRequest, whereabouts: Whereabouts, now: float, out: list
    ) -> None:
        """The owner moved away from here: the request goes where it went."""
        where = self._where()
        positions = {} if where is None else where[1]
        self.statistics.forwarded += 1
        onward = dataclasses.replace(
            message,
            target=whereabouts.forward,
            target_position=positions.get(whereabouts.forward, UNKNOWN_POSITION),
        )
        self._toward(onward, whereabouts.forward_address, now, out)

    def _not_here(self, message: m.RendezvousRequest, now: float, out: list) -> None:
        self.statistics.not_here += 1
        answer = m.RendezvousChunk(
            rendezvous=message.rendezvous,
            target=message.requester_superpeer,
            target_position=message.requester_position,
            offset=message.offset,
            data=b"",
            error="",
            hops=0,
            superpeer=self.node_id,
            not_here=True,
        )
        self.route(answer, now, out)

    def _serve_held(self, message: m.RendezvousRequest, now: float, out: list) -> None:
        """The requester's new access point pulls the bytes held here for the requester (a
        window of them), or says it has them all: then they go."""
        key = message.rendezvous
        record = self._incoming_record(key)
        if record is None or record["state"] != HANDED:
            if message.length:
                self._not_here(message, now, out)
            return
        if message.offset >= record["received"]:
            self._drop_bytes(key)
            self._put(INCOMING, key, None)
            self.statistics.handed += 1
            return
        end = min(
            record["received"], message.offset + min(message.length, self.config.window_bytes)
        )
        for first, piece in self._read(key, message.offset, end):
            for at in range(0, len(piece), self.config.chunk_bytes):
                chunk = m.RendezvousChunk(
                    rendezvous=key,
                    target=message.requester_superpeer,
                    target_position=message.requester_position,
                    offset=first + at,
                    data=piece[at : at + self.config.chunk_bytes],
                    error="",
                    hops=0,
                )
                self.route(chunk, now, out)

    def _want(self, key: str, record: dict, out: list) -> None:
        wanted = m.UploadWanted(
            rendezvous=key,
            publication=record["publication"],
            requester=record["requester"],
            offset=record["offset"],
            length=record["length"],
        )
        self._to_peer(record["owner"], wanted, out)

    def upload(self, peer: str, message: m.Upload, now: float, out: list) -> None:
        record = self._get(OUTGOING, message.rendezvous)
        if record is None:
            return  # answered already (a repeat), or never asked
        if record["owner"] != peer:
            self.statistics.refused += 1
            return
        start, end = record["offset"], record["offset"] + record["length"]
        if not message.error and not start <= message.offset < end:
            return  # outside the window asked for (an older request's)
        chunk = m.RendezvousChunk(
            rendezvous=message.rendezvous,
            target=record["superpeer"],
            target_position=record["position"],
            offset=message.offset,
            data=message.data,
            error=message.error,
            hops=0,
            superpeer=self.node_id,
        )
        self._relayed[message.rendezvous] = message.offset + len(message.data)
        if message.error or message.offset + len(message.data) >= end:
            self._put(OUTGOING, message.rendezvous, None)
            del self._relayed[message.rendezvous]
        self.route(chunk, now, out)

    # -- both -------------------------------------------------------------------------------------
    def route(
        self,
        message: m.RendezvousRequest | m.RendezvousChunk,
        now: float,
        out: list,
    ) -> None:
        """Handle ``message`` here if this node is its target, else pass it one hop on."""
        where = self._where()
        if where is None and message.target != self.node_id:
            self.statistics.unroutable += 1
            return  # not a member (a rejoin): the requester's access point asks again
        view, positions = where or (None, {})
        found = (
            HERE
            if message.target == self.node_id
            else step(view, positions, self.node_id, message.target, message.target_position)
        )
        if isinstance(found, Hop):
            self._pass(found, message, now, out)
        elif found == HERE and isinstance(message, m.RendezvousRequest):
            self.request_in(message, now, out)
        elif found == HERE:
            self.chunk_in(message, now, out)
        elif isinstance(message, m.RendezvousRequest):
            # the super-peer it names is out of the cube and this one holds its position now:
            # it answers from what it knows of the owner (attached here by an adoption, moved
            # on) or says "not here"
            self.request_in(message, now, out)
        else:
            # the requester's access point is out of the cube: it asks again, if it comes back
            self.statistics.unroutable += 1

    def _toward(self, message: m.RendezvousRequest, address: str, now: float, out: list) -> None:
        """Send a request on its way to its target: over the cube when its position is known,
        else straight to it at ``address`` (a forwarding address or a previous access point,
        which need not advertise anything)."""
        where = self._where()
        if where is None:
            return
        view, positions = where
        first = aim(view, positions, self.node_id, message.target)
        if isinstance(first, Hop):
            self._pass(first, message, now, out, address=address)
        else:
            self.request_in(message, now, out)

    def _pass(
        self,
        hop: Hop,
        message: m.RendezvousRequest | m.RendezvousChunk,
        now: float,
        out: list,
        *,
        address: str = "",
    ) -> None:
        pass_on(self._send, hop, message, now, out, address=address)

    def attached(self, peer: str, out: list) -> None:
        """``peer`` connected here: what waits for it, as owner and as requester."""
        self._attached.add(peer)
        for key, record in sorted(self._table(OUTGOING).items()):
            if record["owner"] == peer:
                self._want(key, record, out)
        for key, record in sorted(self._incoming().items()):
            if record["requester"] != peer:
                continue
            if record["state"] == READY:
                self._ready(key, record, out)
            elif record["state"] == FAILED:
                self._failed_notice(key, record, out)
                self._put(INCOMING, key, None)

    def detached(self, peer: str) -> None:
        self._attached.discard(peer)
        for key, collectors in list(self._collectors.items()):
            collectors[:] = [c for c in collectors if c.peer != peer]
            if not collectors:
                del self._collectors[key]

    def moved_away(
        self, peer: str, whereabouts: Whereabouts, now: float, out: list
    ) -> tuple[tuple[str, int], ...]:
        """``peer`` moved to ``whereabouts.forward``. As owner: the requests waiting here for it
        go there. As requester: the bytes held here for it wait for its new access point, which
        pulls them (``offered``), and are deleted only when it says it has them (a file lost
        with an interrupted handover would have to be uploaded again, and the owner may never
        come back); a record with no bytes goes (its new access point asks the owner itself:
        the peer re-sends its fetches). Returns what is held here for it: (key, bytes), for
        ``HandoverDone.rendezvous`` (again in full when the handover is asked again)."""
        for key, record in sorted(self._table(OUTGOING).items()):
            if record["owner"] != peer:
                continue
            self._put(OUTGOING, key, None)
            self._relayed.pop(key, None)
            request = m.RendezvousRequest(
                rendezvous=key,
                target=self.node_id,
                target_position=UNKNOWN_POSITION,
                requester=record["requester"],
                requester_superpeer=record["superpeer"],
                requester_position=record["position"],
                owner=peer,
                publication=record["publication"],
                offset=record["offset"],
                length=record["length"],
                hops=0,
            )
            self._follow(request, whereabouts, now, out)
        held = []
        for key, record in sorted(self._incoming().items()):
            if record["requester"] != peer:
                continue
            if record["received"] == 0 or record["state"] == FAILED:
                self._drop_bytes(key)
                self._put(INCOMING, key, None)
                continue
            if record["state"] != HANDED:
                record.update(state=HANDED, at=now)
                self._put(INCOMING, key, record)
                self._receiving.pop(key, None)
            held.append((key, record["received"]))
        return tuple(held)

    def offered(
        self, node: str, address: str, held: tuple[tuple[str, int], ...], now: float, out: list
    ) -> None:
        """The previous access point ``node`` of one of our peers holds these rendezvous bytes
        for it (``moved_away``): pull them into the peer's record (its fetch, re-sent after it
        connected, made it or will), or release them at once if the record has as much."""
        incoming = self._incoming()
        for key, size in held:
            pull = {"node": node, "address": address, "held": size, "at": now}
            record = incoming.get(key)
            if record is None or record["state"] == FAILED:
                self._put(OFFERED, key, pull)
                continue
            record["pull"] = pull
            self._put(INCOMING, key, record)
            if record["state"] == RECEIVING and record["received"] < size:
                record["progress_at"] = now
                self._ask(key, record, now, out)
            else:
                self._release(key, record, now, out)

    def timer(self, now: float, out: list) -> None:
        """Ask again for stalled transfers; drop what outlived ``retention_seconds``."""
        horizon = now - self.config.retention_seconds
        for kind in (INCOMING, OUTGOING, OFFERED):
            for key, record in list(self._table(kind).items()):
                if record["at"] < horizon:
                    self.statistics.expired += 1
                    self._put(kind, key, None)
                    if kind == INCOMING:
                        self._drop_bytes(key)
        for key, record in self._incoming().items():
            if (
                record["state"] == RECEIVING
                and now - record["progress_at"] >= self.config.retry_seconds
            ):
                record["progress_at"] = now
                self._put(INCOMING, key, record)
                self._ask(key, record, now, out)

    def next_deadline(self) -> float | None:
        due = [
            r["progress_at"] + self.config.retry_seconds
            for r in self._incoming().values()
            if r["state"] == RECEIVING
        ]
        return min(due, default=None)

    def status(self) -> dict[str, object]:
        incoming = self._incoming()
        return {
            "files": len(incoming),
            "ready": sum(1 for r in incoming.values() if r["state"] == READY),
            "handed": sum(1 for r in incoming.values() if r["state"] == HANDED),
            "bytes": sum(r["received"] for r in incoming.values()),
            "reserved_bytes": sum(r["size"] for r in incoming.values() if r["state"] != FAILED),
            "max_bytes": self.config.max_bytes,
            "retention_seconds": self.config.retention_seconds,
            "waiting_for_owners": len(self._table(OUTGOING)),
            "in_progress": self.in_progress(),
            "statistics": {
                "requested": self.statistics.requested,
                "relayed": self.statistics.relayed,
                "completed": self.statistics.completed,
                "collected": self.statistics.collected,
                "corrupted": self.statistics.corrupted,
                "refused": self.statistics.refused,
                "unroutable": self.statistics.unroutable,
                "expired": self.statistics.expired,
                "forwarded": self.statistics.forwarded,
                "not_here": self.statistics.not_here,
                "looked_up": self.statistics.looked_up,
                "handed": self.statistics.handed,
            },
        }

    def in_progress(self) -> int:
        """Transfers waiting only for a peer that is attached here (an owner asked to upload, a
        requester told to collect): work under way, not a wait for someone to come back. A
        network whose access points all say 0, with no backbone frame in flight, has moved
        every byte it can move (``deploy.driver.quiet_problems``)."""
        uploads = sum(1 for r in self._table(OUTGOING).values() if r["owner"] in self._attached)
        collections = sum(
            1
            for r in self._incoming().values()
            if r["state"] == READY and r["requester"] in self._attached
        )
        return uploads + collections

    def _to_peer(self, peer: str, message: object, out: list) -> None:
        out.append(ToPeer(peer, message, encode(message)))
