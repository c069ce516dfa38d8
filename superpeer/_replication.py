"""Copies of the publication log (``superpeer.node``, "Copies"): what an origin accepted
survives the origin's loss, disk and all.

An origin's log is where catch-ups find what a route did not carry (a partition, an access
point down, a subscriber offline). Kept in one place, it goes with a super-peer that crashes
for good: a ten-minute chaos run lost 39 acknowledged publications that way (issue 33). So:

1. **Before the ``Ack``.** An origin that logs a publication sends a ``LogCopy`` of the entry
   to one neighbour: the first by name of those it heard from within ``failure_seconds`` and
   has not declared failed or seen leave. The publisher's ``Ack`` waits for that neighbour's
   ``LogCopied``, which leaves there only once the copy is synced (group commit). The
   notification itself does not wait: it goes down the trees at once, so an online
   subscriber never waits for the copy. A publication sent again while its copy is awaited (a
   peer whose connection broke repeats its unanswered requests), which the origin finds logged
   already, is acknowledged only once that copy is answered too (``_answer_repeat``).
2. **Copies travel together.** While a copy to a neighbour is unanswered, the entries logged
   meanwhile for it wait, and go in one ``LogCopy`` when that copy is answered (or given up
   on): as many entries as arrive during a round trip and the neighbour's fsync share one
   ``LogCopy``, one ``LogCopied`` and one input at each end, as a TCP sender's small segments
   wait for the acknowledgement of the one in flight (Nagle) and a Kafka producer's records
   for the batch in flight. A quiet origin's copy leaves at once. A batch whose encodings
   would pass half of ``max_frame_bytes`` leaves at once, a second one in flight.
3. **A neighbour that does not answer.** Unanswered after ``copy_wait_seconds``, the copy goes
   to the next such neighbour, and so do the entries queued behind it; after
   ``COPY_ATTEMPTS`` of them, or with none (a super-peer cut off from all its neighbours), the
   ``Ack`` leaves with the origin's copy alone, counted (``superpeer_unreplicated_acks``) and
   logged: each side of a partition keeps working, and what a super-peer cut off alone accepts
   is as durable as its disk (README, "What is durable where").
4. **A copy is a log entry** like the holder's own: pruned with them (``log_seconds``,
   ``max_logged``), answered in catch-ups, handed over with the log when the holder leaves
   (``AdoptLog``). It is never sent down the trees as the holder's own (a late subscription's
   replay, a restart's): its origin does that while it lives, and once it is gone, catch-ups
   restricted to it (``CatchUp.origin``, ``superpeer._catchup``) find the copies wherever they
   are.
5. **Answers keep their order.** A peer matches its access point's answers (``Ack``,
   ``Refused``) to its requests in order (``peer.session``): an answer made while an earlier
   one on the same connection waits for its copy waits behind it (``_answer``). A connection
   that ends drops what it held: its peer sends the requests again on the next one.
6. **Copies owed are made late.** An entry acknowledged with the origin's copy alone (rule 3)
   is recorded durably as owed a copy (the store's ``uncopied`` records, so a restart keeps
   the debt). Whenever a neighbour is live again (the timer looks at each tick), the owed
   entries go to it, one ``LogCopy`` of up to half a frame at a time, and leave the record
   when it answers. An origin cut off alone is then exposed to a crash for good only until
   its side heals, not for as long as its log keeps them: in a chaos run (stop 58, seed 581)
   a super-peer cut off alone acknowledged publications so, stayed 30 s in the healed cube
   and then crashed for good, and a subscriber lost 46 notifications with it. An entry older
   than ``log_seconds`` is dropped from the record unsent (its origin's log prunes it too).
   A super-peer alone in its cube for now (cut off, repaired into a cube of one, mid-rejoin)
   owes its copies too; one that never knew another super-peer owes none (nobody to copy
   to).
7. **What copies can vouch for.** A holder keeps every copy of an origin's entries it was
   sent, or handed, later than its *copies' floor* for that origin (``_copies_floor``),
   which is the latest of: the latest time pruned from its log, if a copy of that origin
   that old was kept (copies are pruned with the holder's own entries, so the log's floor
   bounds what was pruned of each origin; the store records the earliest copy kept of each
   origin, so a holder that started keeping an origin's copies after its floor vouches for
   all of them); and the floor of any log a leaver handed it (``AdoptLog.floor``: what the
   leaver pruned, or held and did not hand over). A catch-up answered from the copies of a
   lost origin tells a gap naming it for a window starting before that floor
   (``superpeer._catchup``).
8. **The publisher keeps what has one copy.** Rule 6 leaves an origin cut off alone exposed
   until its side heals: a chaos run (stop 61, seed 611) lost 45 publications acknowledged by
   a super-peer cut off alone that crashed for good 0.5 s after the heal. So the ``Ack`` of
   an entry owed a copy says so (``Ack.alone``: given with the origin's copy alone, or for a
   repeat whose entry is still owed one), and the publisher keeps the publication and sends
   it again on every connection and now and then (``peer.kept``) until an ``Ack`` without it.
   Here a repeat is answered from the record of copies owed; after a failover, the next
   access point accepts it as its own (a first version it never saw is a new publication
   there, with the same version number, which a subscriber that had it from here drops: an
   inbox keeps one per owner, id and version). What a super-peer cut off alone accepted is
   then lost only with its publisher too.
9. **Copies lost with their holder are made again.** An origin records the spans of its
   entries' times each holder answered for, in order (stored when a span begins; after a
   restart the last one reaches the latest entry logged). Once a holder is gone (declared
   failed and not heard of since), its spans are copied again to a live neighbour, a part
   at a time, one copy in flight, after the copies owed (rule 6): else the origin's own log
   is the last, and its loss takes them. A chaos run (stop 79, seed 795) lost nine so: the
   holder crashed for good, then the origin, and a subscriber away meanwhile caught up from
   neither. A span may hold entries copied elsewhere too (copies that alternate between
   neighbours): they are copied twice, and kept once. A holder that left handed its log
   over (``AdoptLog``, to two): its spans are dropped; spans older than the log are too.
   Copying again costs what the log holds of those spans, and a neighbour declared failed
   behind a cut counts as gone: after a partition, an origin copies again what it had copied
   across it, in the background.
10. **A leaver keeps no copy after its hand-over.** Its log went to its holders when it
   handed over; a copy kept after that would go with it (the same run lost thirteen so: the
   leave took three seconds, and the origin kept copying to the leaver). It answers none,
   so the origin goes on to its next neighbour (rule 3), and an origin that heard of the
   leave copies to another at once (``_live_neighbour``).
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections import deque
from typing import Final

import wire
from superpeer._node_base import NodeBase, Output, PendingCopy, decoded_as, log
from superpeer.actions import Repeated, ToConnection, ToPeer
from superpeer.mailroom import mail_key
from wire import messages as m
from wire.requests import request_label

COPY_ATTEMPTS: Final = 2
"""Neighbours a copy is sent to, one after the other, before the ``Ack`` leaves without one."""
UNCOPIED: Final = "uncopied"
"""The store's records of log entries acknowledged without a copy, by log key (rule 6)."""
HANDED_FLOOR: Final = "handed_floor"
"""The store's meta key of the latest floor of a log a leaver handed to this node (rule 7)."""
COPIED_ORIGINS: Final = "copied_origins"
"""The store's meta key of the earliest time of a copy kept per origin (rule 7), a JSON
object; under ``UNRECORDED``, the latest time in the log when the record began (copies kept
before, by an older version, are not in it)."""
UNRECORDED: Final = ""
COPY_SPANS: Final = "copy_spans"
"""The store's meta key of where this origin's entries are copied, and what is to be copied
again (rule 9), a JSON object: ``held``, a ``[holder, first, last]`` per span of entries'
times one holder answered for, in order; ``again``, a ``[first, last]`` per span to copy
again."""
AGAIN_ROWS: Final = 256
"""Log entries read at a time for a copy made again (rule 9)."""
AGAIN_READS: Final = 16
"""Reads of the log per tick for a copy made again that find only other origins' copies."""


class Replication(NodeBase):
    """Copying this origin's log entries to a neighbour, and keeping neighbours' copies."""

    def _replicate(
        self, notification: m.Notification, ack: ToPeer | None, now: float, out: list[Output]
    ) -> None:
        """``notification`` is in this origin's log (rule 1): copy it, and hold ``ack``."""
        connection = self._peer_connection.get(ack.peer) if ack is not None else None
        target = self._live_neighbour([], now) if self.config.log_copy else None
        if target is None:
            # a lone super-peer, or cut off from every neighbour
            owed = self.config.log_copy and self._unreplicated([notification], [], out)
            if ack is not None and connection is not None:
                self._answer(
                    _told_alone(ToConnection(connection, ack.message, ack.data), owed), out
                )
            return
        size = len(wire.encode(notification))  # (the log's encoding, kept by the codec)
        batch = self._copies_queued.get(target)
        if batch is not None and batch.size + size > self.config.max_frame_bytes // 2:
            del self._copies_queued[target]
            self._copy_to(target, batch, now, out)  # full: a second copy in flight (rule 2)
            batch = None
        send = False
        if batch is None:
            batch = PendingCopy(self._next_id(), [], 0)
            send = not self._in_flight_to(target)
            if not send:
                self._copies_queued[target] = batch
        batch.notifications.append(notification)
        batch.size += size
        if ack is not None and connection is not None:
            if connection not in batch.connections:
                batch.connections.append(connection)
            item = ToConnection(connection, ack.message, ack.data)
            self._answer(item, out, waits_for=batch.request)
        if send:
            self._copy_to(target, batch, now, out)

    def _kept_logged_here(
        self, peer: str, message: m.Publish, now: float, out: list[Output]
    ) -> bool:
        """A first version sent again by its publisher because it was acknowledged ``alone``
        (rule 8), which this node logged: answered as a repeat, whether it has its copy by now.
        Published again, it would replace its log entry with one of a later time, which the
        catch-ups of the cut it was published in no longer find: a chaos run lost one so (a
        subscription withdrawn after the publication and before the heal; stop 62, seed 621).
        Whether it was answered so."""
        core = self.core
        if not message.again or message.change != "publish" or core is None:
            return False
        resource = message.publication.id
        held = core.versions.current(peer, resource)
        if (
            held is None
            or not held.live(self.clock.now(now))
            or held.publication.triples != message.publication.triples
            or not self.store.is_logged(mail_key(peer, resource, held.number))
        ):
            return False
        ack = m.Ack(request=request_label(message))
        self._answer_repeat(Repeated(ToPeer(peer, ack, wire.encode(ack)), resource, True), out)
        return True

    def _answer_repeat(self, repeated: Repeated, out: list[Output]) -> None:
        """The ``Ack`` of a version logged already (rule 1: an ``Ack`` means two copies): it
        waits for that version's copy as the first ``Ack`` does, if it is still awaited; it
        says ``alone`` while the entry is owed a copy, and to a publication kept for that
        (``Repeated.again``) when this node does not log it (a version handed over by the
        previous access point: it vouches for no copy)."""
        ack = repeated.ack
        connection = self._peer_connection.get(ack.peer)
        if connection is None:
            return  # (it asks again on its next connection)
        item = ToConnection(connection, ack.message, ack.data)
        current = (
            self.core.versions.current(ack.peer, repeated.publication_id) if self.core else None
        )
        if current is not None:
            key = mail_key(ack.peer, repeated.publication_id, current.number)
            # still owed its copy (rule 6): the publisher keeps it and asks again (rule 8)
            owed = self.store.pending_value(UNCOPIED, key) is not None
            unknown = repeated.again and not self.store.is_logged(key)
            item = _told_alone(item, owed or unknown)
        for batch in (*self._copies.values(), *self._copies_queued.values()):
            if not batch.late and any(  # (a copy made late releases no answer: rule 6)
                n.owner == ack.peer and n.publication.id == repeated.publication_id
                for n in batch.notifications
            ):
                if connection not in batch.connections:
                    batch.connections.append(connection)
                self._answer(item, out, waits_for=batch.request)
                return
        self._answer(item, out)

    def _in_flight_to(self, target: str) -> bool:
        return any(p.tried[-1] == target for p in self._copies.values())

    def _answer(self, item: ToConnection, out: list[Output], *, waits_for: str = "") -> None:
        """``item``, an answer to a peer's request, leaves now unless it waits for the copy
        ``waits_for`` or an earlier answer on its connection waits (rule 5)."""
        queue = self._answers_held.get(item.connection)
        if queue is None and not waits_for:
            out.append(item)
            return
        if queue is None:
            queue = self._answers_held[item.connection] = deque()
        queue.append([waits_for, item])

    def _release_answers(
        self, batch: PendingCopy, out: list[Output], *, alone: bool = False
    ) -> None:
        """The copy ``batch`` was answered, or given up on (``alone``: its entries are owed a
        copy, and their ``Ack`` s say so, rule 8): the answers that waited for it, and those
        behind them that wait for nothing, leave."""
        for connection in batch.connections:
            queue = self._answers_held.get(connection)
            if queue is None:
                continue  # (the connection ended: its peer asks again)
            for entry in queue:
                if entry[0] == batch.request:
                    entry[0] = ""
                    entry[1] = _told_alone(entry[1], alone)
            while queue and not queue[0][0]:
                out.append(queue.popleft()[1])
            if not queue:
                del self._answers_held[connection]

    def _copy_to_next(self, batch: PendingCopy, now: float, out: list[Output]) -> None:
        """The copy ``batch`` went unanswered (rule 3): to the next neighbour, or none. A copy
        made late is not passed on: its entries stay owed, for the next tick (rule 6); nor is
        one made again (rule 9)."""
        if batch.late:
            self._copy_owed_in_flight = None
            return
        target = self._live_neighbour(batch.tried, now)
        if target is None or len(batch.tried) >= COPY_ATTEMPTS:
            owed = self._unreplicated(batch.notifications, batch.tried, out)
            self._release_answers(batch, out, alone=owed)
            return
        self._copy_to(target, batch, now, out)

    def _copy_to(self, target: str, batch: PendingCopy, now: float, out: list[Output]) -> None:
        batch.tried.append(target)
        batch.deadline = now + self.config.copy_wait_seconds
        self._copies[batch.request] = batch
        self.statistics.copies_sent += len(batch.notifications)
        copy = m.LogCopy(request=batch.request, notifications=tuple(batch.notifications))
        self._send(target, copy, now, out)

    def _copy_freed(self, target: str, now: float, out: list[Output]) -> None:
        """No copy is in flight to ``target`` any more: what was queued for it goes (rule 2)."""
        batch = self._copies_queued.pop(target, None)
        if batch is not None:
            if batch.tried:  # queued behind a copy given up on: that neighbour failed it too
                self._copy_to_next(batch, now, out)
            else:
                self._copy_to(target, batch, now, out)

    def _unreplicated(
        self, notifications: list[m.Notification], tried: list[str], out: list[Output]
    ) -> bool:
        """``Ack`` s leave with the origin's copy alone: counted, said once (not once per
        publication, for a lone super-peer), and their entries owed a copy (rule 6). Whether
        they are owed one (not by a super-peer that never knew another)."""
        self.statistics.unreplicated += len(notifications)
        owes = bool(set(self.addresses) - {self.node_id})
        if owes:
            # (a super-peer that never knew another has nobody to owe a copy to: alone in
            # its network, its log is the only one. One alone in its cube for now, mid-rejoin
            # or cut off, owes them: chaos, stop 59)
            owed = self.copies_owed()
            for notification in notifications:
                owner, publication = notification.owner, notification.publication.id
                key = mail_key(owner, publication, notification.version)
                owed += self.store.pending_value(UNCOPIED, key) is None
                self.store.set_pending(UNCOPIED, key, {"entry": wire.encode(notification).hex()})
            self._owed_copies = owed
        if self._copying:
            self._copying = False
            log.warning(
                "event=acks_unreplicated node=%s tried=%s",
                self.node_id,
                ",".join(tried) or "no neighbour heard from",
            )
        return owes

    def _live_neighbour(self, besides: list[str], now: float) -> str | None:
        """The first neighbour by name, but ``besides``, heard from within ``failure_seconds``
        (any, without supervision), not declared failed and not leaving: where a copy goes
        next (rule 1, rule 10), and who adopts a leaver's peers. A neighbour dead and not yet
        repaired is still in the table."""
        core = self.core
        if core is None:
            return None
        supervised = self.config.heartbeat_seconds is not None
        recent = now - self.config.failure_seconds
        for node in sorted(core.view.neighbours()):
            if (
                node != self.node_id
                and node not in besides
                and node not in self._suspected
                and (not supervised or self._last_heard.get(node, -1e18) > recent)
                and not self._leaving(node)
            ):
                return node
        return None

    def _copy_in(self, sender: str, message: m.LogCopy, now: float, out: list[Output]) -> None:
        """Keep a neighbour's log entries (rule 4) and say so; the answer leaves once they are
        synced, as every output that promises something (``superpeer._commits``). Not after
        this node handed its log over, leaving (rule 10): it would go with it."""
        if self.adopter is not None:
            self._trace(
                out, now, "drop", message, neighbour=sender,
                reason="leaving: its log is handed over, a copy kept now would go with it",
            )  # fmt: skip
            return
        self._record_copies(message.notifications)
        for notification in message.notifications:
            self._keep_logged(notification)
        self.statistics.copies_kept += len(message.notifications)
        self._send(sender, m.LogCopied(request=message.request), now, out)

    def _copied(self, sender: str, message: m.LogCopied, now: float, out: list[Output]) -> None:
        """``sender`` holds the copy ``message`` answers: the neighbour asked last, or one
        asked before that answered late (rule 9 records who holds it)."""
        batch = self._copies.pop(message.request, None)
        if batch is None:
            return
        target = batch.tried[-1]
        self._copies_held_by(sender, batch.notifications)
        if batch.remade_through is not None:
            self._copied_again(batch, now, out)
            return
        if batch.owed:
            self._copied_late(batch, now, out)
            return
        if not self._copying:
            self._copying = True
            log.warning("event=acks_replicated node=%s", self.node_id)
        self._release_answers(batch, out)
        if not self._in_flight_to(target):
            self._copy_freed(target, now, out)

    def _copy_timeouts(self, now: float, out: list[Output]) -> None:
        """Copies unanswered for ``copy_wait_seconds`` go to the next neighbour, and so do the
        entries queued behind them (rule 3)."""
        for request, batch in sorted(self._copies.items()):
            if batch.deadline <= now:
                del self._copies[request]
                target = batch.tried[-1]
                self._copy_to_next(batch, now, out)
                queued = self._copies_queued.get(target)
                if queued is not None and not self._in_flight_to(target):
                    queued.tried.append(target)
                    self._copy_freed(target, now, out)

    def _copy_owed(self, now: float, out: list[Output]) -> None:
        """Entries owed a copy go to a live neighbour, one batch at a time (rule 6)."""
        if not self.config.log_copy or self._copy_owed_in_flight is not None:
            return
        if not self.copies_owed():
            return
        target = self._live_neighbour([], now)
        if target is None:
            return
        floor = self.clock.now(now) - self.config.log_seconds
        batch = PendingCopy(self._next_id(), [], 0)
        keys = []
        for key, record in sorted(self.store.pending(UNCOPIED).items()):
            data = bytes.fromhex(record["entry"])
            notification = decoded_as(data, m.Notification)
            if notification is None or notification.published_at < floor:
                self.store.set_pending(UNCOPIED, key, None)  # pruned from the log by now
                continue
            if batch.notifications and batch.size + len(data) > self.config.max_frame_bytes // 2:
                break
            batch.notifications.append(notification)
            batch.size += len(data)
            keys.append(key)
        self._owed_copies = None  # counted again from the store
        if not keys:
            return
        batch.owed = tuple(keys)
        self._copy_owed_in_flight = batch.request
        self._copy_to(target, batch, now, out)

    def _copied_late(self, batch: PendingCopy, now: float, out: list[Output]) -> None:
        """A neighbour holds the owed entries of ``batch`` now: they leave the record, and
        the next batch goes at once."""
        for key in batch.owed:
            self.store.set_pending(UNCOPIED, key, None)
        self.statistics.copied_late += len(batch.owed)
        log.info(
            "event=copies_made_late node=%s count=%d to=%s",
            self.node_id,
            len(batch.owed),
            batch.tried[-1],
        )
        self._owed_copies = None
        self._copy_owed_in_flight = None
        target = batch.tried[-1]
        if not self._in_flight_to(target):
            self._copy_freed(target, now, out)
        self._copy_owed(now, out)

    def _copy_spans_record(self) -> dict[str, list]:
        """Where this origin's entries are copied, and what is to be copied again (rule 9),
        read once."""
        if self._copy_spans is None:
            kept = self.store.get_meta(COPY_SPANS)
            spans = {"held": [], "again": []} if kept is None else json.loads(kept)
            latest = self.store.latest_logged()
            if spans["held"] and latest is not None:
                # the last span grew without being stored: to the latest entry at most
                spans["held"][-1][2] = max(spans["held"][-1][2], latest)
            self._copy_spans = spans
        return self._copy_spans

    def _keep_copy_spans(self) -> None:
        self.store.set_meta(COPY_SPANS, json.dumps(self._copy_spans_record()))

    def _copies_held_by(self, holder: str, notifications: list[m.Notification]) -> None:
        """``holder`` answered for ``notifications``: the span of this origin's entries it
        holds grows, or a new one begins (rule 9)."""
        times = [n.published_at for n in notifications if n.origin == self.node_id]
        if not times:
            return
        first, last = min(times), max(times)
        held = self._copy_spans_record()["held"]
        if held and held[-1][0] == holder and first >= held[-1][1]:
            held[-1][2] = max(held[-1][2], last)
            return
        held.append([holder, first, last])
        self._keep_copy_spans()

    def _copies_lost(self) -> None:
        """The spans of holders gone are to be copied again; those of holders that left, and
        those older than the log, are dropped (rule 9)."""
        spans = self._copy_spans_record()
        floor = self.store.log_floor()
        held, again = [], [span for span in spans["again"] if span[1] > floor]
        lost: dict[str, int] = {}
        for holder, first, last in spans["held"]:
            if last <= floor or self._has_left(holder):
                continue
            if self._gone(holder):
                again.append([first, last])
                lost[holder] = lost.get(holder, 0) + 1
                continue
            held.append([holder, first, last])
        if held == spans["held"] and again == spans["again"]:
            return
        for holder, count in sorted(lost.items()):
            log.warning("event=copies_lost node=%s holder=%s spans=%d", self.node_id, holder, count)
        spans["held"], spans["again"] = held, again
        self._keep_copy_spans()

    def _copy_again(self, now: float, out: list[Output]) -> None:
        """The first span to copy again goes to a live neighbour, a part at a time, once no
        copy made late is owed or in flight (rule 9)."""
        if not self.config.log_copy:
            return
        spans = self._copy_spans_record()
        if spans["held"] or spans["again"]:
            self._copies_lost()
        if not spans["again"] or self._copy_owed_in_flight is not None or self.copies_owed():
            return
        target = self._live_neighbour([], now)
        if target is None:
            return
        for _ in range(AGAIN_READS):
            if not spans["again"]:
                return
            batch = self._part_to_copy_again()
            if batch.notifications:
                self._copy_owed_in_flight = batch.request
                self._copy_to(target, batch, now, out)
                return
            self._copied_through(batch)  # (others' copies only, or nothing left)

    def _part_to_copy_again(self) -> PendingCopy:
        """The next part of the first span to copy again: this origin's entries in up to
        ``AGAIN_ROWS`` of the log, half a frame at most (rule 2)."""
        first, last = self._copy_spans_record()["again"][0]
        rows = self.store.logged_between(first, last, AGAIN_ROWS)
        batch = PendingCopy(self._next_id(), [], 0, remade_through=last)
        if len(rows) == AGAIN_ROWS:
            batch.remade_through = rows[-1][0]
        for at, data in rows:
            if batch.notifications and batch.size + len(data) > self.config.max_frame_bytes // 2:
                batch.remade_through = math.nextafter(at, -math.inf)  # from this one, next
                break
            notification = decoded_as(data, m.Notification)
            if notification is not None and notification.origin == self.node_id:
                batch.notifications.append(notification)
                batch.size += len(data)
        return batch

    def _copied_through(self, batch: PendingCopy) -> None:
        """The first span to copy again begins after ``batch`` (stored)."""
        assert batch.remade_through is not None
        again = self._copy_spans_record()["again"]
        if not again:
            return
        through = math.nextafter(batch.remade_through, math.inf)
        if through > again[0][1]:
            again.pop(0)
        else:
            again[0][0] = max(again[0][0], through)
        self._keep_copy_spans()

    def _copied_again(self, batch: PendingCopy, now: float, out: list[Output]) -> None:
        """A neighbour holds ``batch``, made again: the next part goes at once (rule 9)."""
        self._copied_through(batch)
        self.statistics.copied_again += len(batch.notifications)
        self._copy_owed_in_flight = None
        target = batch.tried[-1]
        if not self._in_flight_to(target):
            self._copy_freed(target, now, out)
        self._copy_again(now, out)

    def copies_to_remake(self) -> int:
        """Spans of this origin's entries to copy again, their holder gone (rule 9)."""
        return len(self._copy_spans_record()["again"])

    def copies_owed(self) -> int:
        """Log entries acknowledged with this origin's copy alone and not copied since."""
        if self._owed_copies is None:
            self._owed_copies = len(self.store.pending(UNCOPIED))
        return self._owed_copies

    def _copy_deadline(self) -> float | None:
        return min((p.deadline for p in self._copies.values()), default=None)

    def copies_waiting(self) -> int:
        """Log entries whose ``Ack`` waits for their copy (sent, or queued behind one in
        flight); those owed a copy made late are ``copies_owed``."""
        batches = (*self._copies.values(), *self._copies_queued.values())
        return sum(len(batch.notifications) for batch in batches if not batch.late)

    def _handed_floor(self) -> float:
        """The latest floor of a log a leaver handed to this node (rule 7), read once."""
        if self._handed is None:
            handed = self.store.get_meta(HANDED_FLOOR)
            self._handed = -math.inf if handed is None else float(handed)
        return self._handed

    def _copies_floor(self, origin: str) -> float:
        """The time up to which a copy this node was sent, or handed, of ``origin``'s log
        entries may be missing from its log (rule 7)."""
        record = self._copies_record()
        floor = self.store.log_floor()
        earliest = record.get(origin, math.inf)
        pruned = floor if earliest <= floor else min(floor, record[UNRECORDED])
        return max(pruned, self._handed_floor())

    def _log_floor_handed(self) -> float:
        """What this whole log may lack: its own floor, or a handed log's (rule 7)."""
        return max(self.store.log_floor(), self._handed_floor())

    def _copies_record(self) -> dict[str, float]:
        """The earliest time of a copy kept per origin (rule 7), begun at first need."""
        if self._copied_origins is None:
            kept = self.store.get_meta(COPIED_ORIGINS)
            if kept is None:
                latest = self.store.latest_logged()
                record = {UNRECORDED: -math.inf if latest is None else latest}
                self.store.set_meta(COPIED_ORIGINS, json.dumps(record))
            else:
                record = json.loads(kept)
            self._copied_origins = record
        return self._copied_origins

    def _record_copies(self, notifications: tuple[m.Notification, ...]) -> None:
        """Copies of other origins' entries kept here, sent or handed: the earliest of each
        origin's is recorded (rule 7)."""
        record = self._copies_record()
        changed = False
        for notification in notifications:
            origin, at = notification.origin, notification.published_at
            if origin != self.node_id and at < record.get(origin, math.inf):
                record[origin] = at
                changed = True
        if changed:
            self.store.set_meta(COPIED_ORIGINS, json.dumps(record, sort_keys=True))

    def _keep_handed_floor(self, message: m.AdoptLog) -> None:
        """A leaver handed its log over (rule 7): what it lacked lowers what this node's copies
        vouch for. An older leaver does not say; every entry it held later than the first it
        handed is in the hand-over (its log is handed in order, pruned oldest first)."""
        floor = message.floor
        if floor is None:
            floor = min((n.published_at for n in message.notifications), default=-math.inf)
        if floor > self._handed_floor():
            self.store.set_meta(HANDED_FLOOR, repr(float(floor)))
            self._handed = float(floor)
        self._record_copies(message.notifications)

    def _own_entry(self, notification: m.Notification) -> bool:
        """Whether a log entry goes down the trees as this node's (rule 4): its own, or one a
        leaver handed over, not a live origin's copy."""
        origin = notification.origin
        return origin == self.node_id or self._has_left(origin) or origin in self.departed


def _told_alone(item: ToConnection, alone: bool) -> ToConnection:
    """``item`` as it leaves: a publication's ``Ack`` says when its entry is owed a copy
    (rule 8); any other answer is unchanged."""
    if not alone or not isinstance(item.message, m.Ack):
        return item
    ack = dataclasses.replace(item.message, alone=True)
    return ToConnection(item.connection, ack, wire.encode(ack))
