"""Delivery to local peers: durable mail and a window of unacknowledged notifications, sans-IO.

Every notification for a local peer, online or not, first goes into the peer's mail in the store
(``Store.put_mail``: numbered in arrival order, one copy per publication whatever way it came:
its tree, a catch-up, a handover). Then, while the peer is attached, the mail room sends it with
its number (``Notify.delivery``), as long as fewer than ``window`` notifications are waiting for
the peer's ``Delivered``; the peer acknowledges once the notification is durably in its inbox, and
only then is it dropped from the mail. So:

* a peer that stops (kill -9, clean stop, broken connection) loses nothing: what it had not
  acknowledged is sent again on its next connection, from the oldest; its inbox ignores repeats;
* the backlog of a peer that was away flows until it is empty, in order, at the rate the peer
  acknowledges, whatever its size;
* a slow peer slows only its own stream (its mail grows in the store); nobody else waits.

Mail is kept at most ``retention_seconds`` and ``max_kept`` per peer (oldest dropped first), and
not past its publication's own expiry (``superpeer.expiry``: dropped unsent when its turn comes);
what is dropped is counted, traced, and told to the peer (``Expired``) when it connects.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
from collections import Counter
from dataclasses import dataclass

import wire
from clocks import HybridClock
from superpeer.actions import ToConnection
from superpeer.core import trace_record
from superpeer.expiry import expired
from superpeer.store import Store, json_key
from superpeer.trace import TraceRecord
from wire import messages as m

MailOutput = ToConnection | TraceRecord
ALL = 2**62
"""A limit that is no limit (``Store.mail_after``)."""
WAITING = 4096
"""Notifications kept decoded while they wait in an attached peer's mail (``Mailroom._waiting``)."""


@functools.lru_cache(maxsize=4096)
def mail_key(owner: str, publication_id: str, version: int = 0) -> str:
    """One key per publication (its owner and id) and version: a change of a resource is mail of
    its own (the first version keeps the key it had before resources had versions). The recent
    ones are kept: a publication is mail for every peer it concerns, and the peers' stores then
    share one key string instead of a copy each."""
    named = (
        json_key(owner, publication_id)
        if version == 0
        else json_key(owner, publication_id, version)
    )
    return hashlib.sha256(named.encode()).hexdigest()[:32]


@dataclass
class _Window:
    connection: int
    kept_through: int
    """Mail numbered up to this was in the store before the peer attached (sending it is a
    flush)."""
    sent_through: int = 0
    """The highest delivery number sent on this connection."""
    unacknowledged: int = 0
    backlog: bool = True
    """The store may hold mail beyond ``sent_through`` (read it before sending new mail)."""


@dataclass
class MailStatistics:
    delivered: int = 0
    """Notifications sent to attached peers for the first time."""
    kept: int = 0
    """Notifications stored for detached peers."""
    flushed: int = 0
    """Kept notifications sent later, when their peer came back."""
    resent: int = 0
    """Notifications sent again because their peer had not acknowledged them."""
    acknowledged: int = 0
    repeats: int = 0
    """Notifications that reached the mail room a second time for one peer (ignored)."""
    expired: Counter[str] = dataclasses.field(default_factory=Counter)


class Mailroom:
    def __init__(
        self,
        node_id: str,
        store: Store,
        *,
        window: int,
        tracing: bool = True,
        clock: HybridClock | None = None,
        recoverable_seconds: float = 0.0,
    ) -> None:
        self.node_id = node_id
        self.clock = clock if clock is not None else HybridClock()
        """The node's hybrid clock: a publication's expiry is in hybrid time (``clocks``,
        rule 7)."""
        self.store = store
        self.window = window
        self.recoverable_seconds = recoverable_seconds
        """Mail for an attached peer (sent at once, or waiting for room in its window) whose
        publication is at most this much older than hybrid time now is *recoverable*
        (``Store.put_mail``): written only if it is not acknowledged before its peer's mail is
        changed or ``alive_at`` is written (``superpeer._unwritten``). At most the
        catch-up's margin, so that a restart's catch-up from the ``alive_at`` on disk finds
        whatever was not written (0: everything written as it comes)."""
        self.tracing = tracing
        self.statistics = MailStatistics()
        self._windows: dict[str, _Window] = {}
        self._highest_sent: dict[str, int] = {}
        self._last_number = store.last_delivery()
        self._floors: dict[str, float] = {}
        """Per peer, the earliest publication time (``Notify.published_at``) among the mail put
        for it since its mail was last found empty: no later than that of anything held for it
        (``floor``)."""
        self._floors_read: set[str] = set()
        """The peers whose floor includes the mail the store held when this mail room began
        (read once, when first asked: after a restart the store holds mail put before)."""
        self._waiting: dict[int, m.Notify] = {}
        """Mail put while its peer's window was full, by number, as it was before encoding
        (the store's copy is its encoding): the refill that sends it spares a decode. At most
        ``WAITING``, oldest dropped first (then read back from the store)."""

    def floor(self, peer: str) -> float | None:
        """The earliest publication time among what is held for ``peer`` and not acknowledged
        (None: nothing is held), or earlier: an access point lost for good with it leaves the
        peer's next access point to catch up on it from the origins (``Clock.missing_since``)."""
        if peer not in self._floors_read:
            self._floors_read.add(peer)
            for _, data in self.store.mail_after(peer, 0, ALL):
                self._lower_floor(peer, _decoded(data).published_at)
        return self._floors.get(peer)

    def _lower_floor(self, peer: str, published_at: float) -> None:
        floor = self._floors.get(peer)
        if floor is None or published_at < floor:
            self._floors[peer] = published_at

    def _maybe_empty(self, peer: str) -> None:
        """The peer's mail may be empty now: if the store says so, its floor goes."""
        if peer in self._floors and not self.store.mail_after(peer, 0, 1):
            del self._floors[peer]
            self._floors_read.add(peer)

    def attached(self, peer: str) -> bool:
        return peer in self._windows

    def unacknowledged(self) -> dict[str, int]:
        return {p: w.unacknowledged for p, w in sorted(self._windows.items()) if w.unacknowledged}

    def attach(self, peer: str, connection: int, now: float) -> list[MailOutput]:
        """The peer is on ``connection``: tell it what expired, then send its mail from the
        oldest (what an earlier connection left unacknowledged included)."""
        out: list[MailOutput] = []
        self._windows[peer] = _Window(connection, kept_through=self._last_number)
        expired = self.store.take_expired(peer)
        if expired:
            notice = m.Expired(
                count=expired,
                reason="kept longer than the retention period or beyond the per-peer cap",
            )
            out.append(ToConnection(connection, notice, wire.encode(notice)))
        self._refill(peer, now, out)
        return out

    def detach(self, peer: str) -> None:
        self._windows.pop(peer, None)

    def deliver(self, peer: str, notify: m.Notify, now: float) -> list[MailOutput]:
        out: list[MailOutput] = []
        hybrid = self.clock.read(now)
        if expired(notify, hybrid):
            self._count_expired(peer, 1, "its publication expired", now, out)
            return out
        key = mail_key(notify.owner, notify.publication.id, notify.version)
        data = wire.encode(notify)
        window = self._windows.get(peer)
        recoverable = (
            window is not None and notify.published_at >= hybrid - self.recoverable_seconds
        )
        # the publication is kept once for every peer's mail (and the log's entry, at its
        # origin): each row keeps the rest of the bytes (``superpeer.store``, bodies)
        number = self.store.put_mail(
            peer,
            key,
            data,
            now,
            wire.packed_publication(notify.publication),
            recoverable=recoverable,
            published_at=notify.published_at,
        )
        if number is None:
            self.statistics.repeats += 1
            if peer not in self._windows:
                self._lower_floor(peer, notify.published_at)
                # kept here already, and perhaps handed over: it came back with the peer's mail
                # from elsewhere, so it is held here anew. A new number keeps it out of the
                # range that the earlier handover's ``HandoverReceived`` deletes (``drop``).
                renewed = self.store.renew_mail(peer, key)
                if renewed is not None:
                    self._last_number = max(self._last_number, renewed)
            return out
        self._last_number = max(self._last_number, number)
        self._lower_floor(peer, notify.published_at)
        if window is None:
            self.statistics.kept += 1
            self._trace(out, now, "offline", notify, peer)
            return out
        if window.backlog or window.unacknowledged >= self.window:
            window.backlog = True
            if len(self._waiting) >= WAITING:
                del self._waiting[next(iter(self._waiting))]
            self._waiting[number] = notify
            self._refill(peer, now, out)
            return out
        self._send(peer, window, _numbered(notify, data, number), now, out)
        return out

    def acknowledged(self, peer: str, through: int, now: float) -> list[MailOutput]:
        """``Delivered(through)`` from the peer."""
        out: list[MailOutput] = []
        window = self._windows.get(peer)
        if window is None:
            return out
        done = self.store.acknowledge(peer, min(through, window.sent_through), now)
        self.statistics.acknowledged += done
        window.unacknowledged = max(0, window.unacknowledged - done)
        if not window.unacknowledged and not window.backlog:
            # every mail sent on this connection is acknowledged and the store holds none
            # after it (the window's refill found the end): the peer's mail is empty, as known
            # without reading (an acknowledgement with nothing waiting reads nothing)
            self._floors.pop(peer, None)
            self._floors_read.add(peer)
        if window.backlog:
            # else every mail kept since the window was last refilled was sent as it came
            # (``deliver``): the store holds nothing more to send, and is not asked
            self._refill(peer, now, out)
        return out

    def handed_over(self, peer: str) -> tuple[list[m.Notify], int]:
        """Everything kept for ``peer`` (it moved away), oldest first, and the highest number
        among it: the store keeps it until the new access point has it (``drop``)."""
        self._windows.pop(peer, None)
        found = self.store.mail_after(peer, 0, ALL)
        return [_decoded(data) for _, data in found], max((n for n, _ in found), default=0)

    def drop(self, peer: str, through: int) -> int:
        """Mail handed over up to ``through`` reached the new access point: forget it."""
        dropped = self.store.drop_mail(peer, through)
        self._maybe_empty(peer)
        return dropped

    def take(self, peer: str, now: float) -> list[m.Notify]:
        """Everything kept for ``peer`` (it moved away): the store forgets it. All of it, however
        late it arrived: its new access point drops what it already has."""
        self._windows.pop(peer, None)
        return [_decoded(data) for data in self.store.take_mail(peer, now)]

    def expire(self, before: float, cap: int, now: float) -> list[MailOutput]:
        """Drop mail older than ``before`` and beyond ``cap`` per peer; count it for the peer."""
        out: list[MailOutput] = []
        for peer, count in self.store.expire_mail(before, cap).items():
            self._count_expired(peer, count, "the per-peer cap of kept notifications", now, out)
        return out

    def _count_expired(
        self, peer: str, count: int, reason: str, now: float, out: list[MailOutput]
    ) -> None:
        self.statistics.expired[peer] += count
        window = self._windows.get(peer)
        if window is not None:
            notice = m.Expired(count=count, reason=reason)
            out.append(ToConnection(window.connection, notice, wire.encode(notice)))
            window.backlog = True
        else:
            self.store.add_expired(peer, count)
        if self.tracing:
            out.append(
                TraceRecord(
                    ts=now,
                    node=self.node_id,
                    event="expired",
                    kind=m.Expired.KIND,
                    peer=peer,
                    msg=str(count),
                )
            )

    def _refill(self, peer: str, now: float, out: list[MailOutput]) -> None:
        window = self._windows[peer]
        after = window.sent_through
        hybrid = self.clock.read(now)
        while (room := self.window - window.unacknowledged) > 0:
            found = self.store.mail_after(peer, after, room)
            dropped = 0
            for number, data in found:
                after = number
                held = self._waiting.pop(number, None)
                mail = _numbered(held or _decoded(data), data, number)
                if expired(mail[0], hybrid):
                    self.store.discard_mail(peer, number)
                    dropped += 1
                else:
                    self._send(peer, window, mail, now, out)
            if dropped:
                self._count_expired(peer, dropped, "their publications expired", now, out)
            window.backlog = len(found) == room
            if not window.backlog:
                return

    def _send(
        self,
        peer: str,
        window: _Window,
        mail: tuple[m.Notify, bytes],
        now: float,
        out: list[MailOutput],
    ) -> None:
        """Send ``mail``, a numbered notification and its encoding (``_numbered``)."""
        notify, data = mail
        number = notify.delivery
        out.append(ToConnection(window.connection, notify, data))
        window.sent_through = max(window.sent_through, number)
        window.unacknowledged += 1
        if number <= self._highest_sent.get(peer, 0):
            self.statistics.resent += 1
            event = "redeliver"
        elif number <= window.kept_through:
            self.statistics.flushed += 1
            event = "flush"
        else:
            self.statistics.delivered += 1
            event = "deliver"
        self._highest_sent[peer] = max(self._highest_sent.get(peer, 0), number)
        self._trace(out, now, event, notify, peer, size=len(data))

    def _trace(
        self,
        out: list[MailOutput],
        now: float,
        event: str,
        notify: m.Notify,
        peer: str,
        *,
        size: int = 0,
    ) -> None:
        if self.tracing:
            out.append(trace_record(self.node_id, now, event, notify, peer=peer, size=size))


def _numbered(notify: m.Notify, data: bytes, number: int) -> tuple[m.Notify, bytes]:
    """``notify`` as mail number ``number``, and its encoding, made of ``data`` (the encoding the
    store keeps, unnumbered) by changing the number (``wire.renumbered``): a notification is
    encoded once on its way through an access point, not once for the store and again to send."""
    numbered = dataclasses.replace(notify, delivery=number)
    return numbered, wire.renumbered(data, m.Notify, number) or wire.encode(numbered)


def _decoded(data: bytes) -> m.Notify:
    message, _ = wire.decode(data)
    assert isinstance(message, m.Notify)
    return message
