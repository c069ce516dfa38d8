"""Catch-up (``superpeer.node``, "Departures", "Restart"): asking origins for what was
published while routes were broken, and answering such requests from this origin's log.

An origin keeps its log ``log_seconds`` (and ``max_logged`` entries): a catch-up that must start
before the latest publication pruned from it (a partition, an access point down, longer than
that) cannot be answered whole. The origin then says so: each peer concerned gets a *gap notice*
in its inbox (a ``Notify`` of kind ``gap`` naming the origin and up to when its publications may
be missing), counted in ``superpeer_gap_notices``. Never silence.

An origin lost for good answers through the copies of its log (``superpeer._replication``):
asked of every live super-peer restricted to it (``CatchUp.origin``) when the asker knows it
gone, and in every answer from a whole log, which holds the copies too. Each holder decides
its own gaps, from what it can prove: it still holds every copy of an origin's entries it was
sent, or handed, later than its copies' floor for that origin (``_copies_floor``, rule 7); for
a window starting before it, it tells a gap notice naming that origin, in a restricted answer,
and in a whole log's answer for each origin that does not answer for itself (lost as far as
the holder knows, or as the asker says: ``CatchUp.lost``; an access point that was cut off
alone may not know, a holder that rejoined after the cut may not either). The decision is the
holder's, not the asker's: no holder knows which of the origin's entries went to others
(copies go to one neighbour at a time, which changes with failures and repairs, and a
leaver's log to two), so the answers are complete only if every holder vouches for its own
part, and one that cannot says so with its answer; the asker would decide no differently
with every holder's floor, and would wait for answers that a holder lost too never sends. An
entry acknowledged with the origin's copy alone (``superpeer._replication``, rule 3) and lost
with it before it was copied is beyond any holder: the README's "What is durable where"."""

from __future__ import annotations

import dataclasses
import datetime
import math
from typing import Final

import qel
from superpeer import versions
from superpeer._batches import fitting, messages_fitting
from superpeer._node_base import (
    AskedCatchUp,
    NodeBase,
    Output,
    PlannedCatchUp,
    decoded_as,
    log,
    tree_positions_between,
)
from superpeer.actions import (
    Replay,
)
from superpeer.mailroom import mail_key
from wire import messages as m

GAP_COMMENT: Final = qel.URI("http://www.w3.org/2000/01/rdf-schema#comment")


class CatchUps(NodeBase):
    """Asking origins for what was missed, and answering them."""

    def _plan_catchup(self, positions: tuple[int, ...], since: float, now: float) -> None:
        """Routes through ``positions`` broke: after the new ones settle, ask the origins whose
        trees ran through them for what was published since ``since``."""
        core = self.core
        if core is None or not (self.store.local_peers() or self._withdrawn):
            return
        lost = set(positions)
        mine = core.recent_positions()
        origins = set()
        for origin, position in core.origin_positions.items():
            if (
                any(lost & tree_positions_between(position, own) for own in mine)
                or position in lost
            ):
                origins.add(origin)
        if not origins:
            return
        due = now + self.config.routing.settle_seconds
        self._catchups.append(
            PlannedCatchUp(
                due, since - self.config.catchup_margin_seconds, None, frozenset(origins)
            )
        )

    def _ask_catchups(self, now: float, out: list[Output]) -> None:
        core = self.core
        if core is None:
            return
        due = [c for c in self._catchups if c.due <= now]
        self._catchups = [c for c in self._catchups if c.due > now]
        for catchup in due:
            peers = catchup.peers
            if peers is None:
                peers = set(self.store.local_peers()) | set(self._withdrawn)
            wanted: dict[str, list[tuple[str, str, qel.Subscription, float, float]]] = {}
            margin = self.config.catchup_margin_seconds
            # every super-peer it knows, not only the origins whose advertisements cover the
            # subscription now: a publisher that published while this node was away may have
            # left or moved since (its advertisement withdrawn there), and what it published
            # is still in that origin's log
            origins = sorted(
                {self.node_id, *core.origin_positions}
                | {n for n in self.addresses if not self._has_left(n)}
            )
            for peer in sorted(peers):
                if peer in self._moved_away:
                    continue  # it moved on: its new access point catches up for it
                if catchup.subscriptions is not None:
                    subscriptions = catchup.subscriptions.get(peer, {})
                else:
                    subscriptions = core.subscriptions_of(peer)
                for sid, subscription in sorted(subscriptions.items()):
                    since, until = catchup.since, catchup.until
                    # never before it was active (a moved peer's: where it came from, as it
                    # said: ``Subscribe.active_since``)
                    since = max(
                        since, self._subscribed_at.get(peer, {}).get(sid, -math.inf) - margin
                    )
                    if catchup.subscriptions is not None:
                        until = min(until, self._unsubscribed_at.get((peer, sid), math.inf))
                    entry = (peer, sid, subscription, since, until)
                    for origin in origins:
                        if catchup.origins is None or origin in catchup.origins:
                            wanted.setdefault(origin, []).append(entry)
                for sid, (subscription, made, ended) in sorted(
                    self._withdrawn.get(peer, {}).items()
                ):
                    # a moved peer's brought subscriptions are listed; its withdrawals (told
                    # again, or made here since) are not, and are owed in their windows too
                    if ended <= catchup.since:
                        continue
                    since = max(catchup.since, made - margin)
                    entry = (peer, sid, subscription, since, min(catchup.until, ended))
                    for origin in origins:
                        if catchup.origins is None or origin in catchup.origins:
                            wanted.setdefault(origin, []).append(entry)
            for origin, entries in sorted(wanted.items()):
                if origin == self.node_id:
                    self._catch_up_locally(entries, now, out)
                elif not self._gone(origin) and self._address_of(origin):
                    self._ask_catchup(origin, entries, now, out)
                elif catchup.origins is not None:
                    # declared failed and not heard of since, or known only from routes (a
                    # node that joined after it died): its log's copies are wherever it sent
                    # them (``superpeer._replication``), asked of every live super-peer
                    # (asking every one, the others' answers bring them already, and tell
                    # the gaps of its copies, naming it, where they know it gone)
                    self._ask_copy_holders(origin, entries, now, out)

    def _ask_copy_holders(
        self,
        origin: str,
        entries: list,
        now: float,
        out: list[Output],
        *,
        before: AskedCatchUp | None = None,
    ) -> None:
        """``origin`` is gone (or left): what its log held is wherever it copied it
        (``superpeer._replication``, ``AdoptLog``), so every live super-peer is asked for
        ``entries`` restricted to that origin, this one too (``before`` as ``_ask_catchup``)."""
        for holder in self._live_superpeers(origin):
            if holder == self.node_id:
                self._catch_up_locally(entries, now, out, of=origin)
            else:
                self._ask_catchup(holder, entries, now, out, of=origin, before=before)

    def _address_of(self, node: str) -> str:
        """Where ``node`` is, as far as this node knows ("": nowhere known)."""
        core = self.core
        known = core.origin_addresses.get(node, "") if core is not None else ""
        return known or self.addresses.get(node, "")

    def _gone(self, origin: str) -> bool:
        """Declared failed, and not heard of since: nobody to ask."""
        return self.departed.get(origin, -1) >= self._newest_incarnation(origin)

    def _out(self, node: str) -> bool:
        """Gone or left the cube: not asked, and its log answered for by the holders of its
        copies (``CatchUp.origin``, ``CatchUp.lost``)."""
        return self._gone(node) or self._has_left(node)

    def _live_superpeers(self, besides: str) -> list[str]:
        """Every super-peer this node knows of (and where) that is neither gone nor left,
        itself too."""
        core = self.core
        named = set(self.addresses) | (set(core.origin_addresses) if core is not None else set())
        known = {n for n in named if self._address_of(n)}
        return sorted({self.node_id} | {n for n in known if n != besides and not self._out(n)})

    def _ask_catchup(
        self,
        target: str,
        entries: list,
        now: float,
        out: list[Output],
        *,
        of: str = "",
        before: AskedCatchUp | None = None,
    ) -> None:
        """Ask ``target`` for what its log holds for ``entries`` (of origin ``of`` only); asked
        again as ``before`` was, if it is one more try of that."""
        address = self._address_of(target)
        lost: tuple[str, ...] = ()
        if not of:  # (a restricted answer names its origin anyway)
            lost = tuple(
                sorted(n for n in {*self.departed, *self._left} if n != target and self._out(n))
            )
        requests = messages_fitting(
            entries,
            lambda chunk: m.CatchUp(
                request=self._next_id(), entries=tuple(chunk), origin=of, lost=lost
            ),
            lambda entry: m.CatchUp(request="", entries=(entry,), origin=of, lost=lost),
            count=self.config.catchup_batch,
            frame_bytes=self.config.max_frame_bytes,
        )
        tries = 1 if before is None else before.tries + 1
        wait = self.config.catchup_retry_seconds * 2 ** (tries - 1)
        for request in requests:
            self.statistics.catchups_asked += 1
            self._unanswered[request.request] = AskedCatchUp(
                target=target,
                origin=of,
                entries=request.entries,
                waiting={entry[0] for entry in request.entries},
                asked_at=now if before is None else before.asked_at,
                due=now + wait,
                tries=tries,
            )
            self._send(target, request, now, out, address=address)

    def _ask_again(self, now: float, out: list[Output]) -> None:
        """Catch-ups not answered whole in time are asked again, of the same super-peer while
        it is not gone; of the holders of its log's copies once it is. Nothing else would: a
        request sent to a super-peer in the middle of a rejoin, or its answer, can be lost with
        a link, and the peers it was for silently miss what the origin published (an origin
        cut off from an access point, then crashed for good: 42 lost in a ten-minute chaos
        run). Repeats are dropped at the inbox. A super-peer that left is as gone: it handed
        its log to its successor and one more neighbour (``AdoptLog``), and asked again it would
        never answer."""
        for request, asked in list(self._unanswered.items()):
            if asked.due > now:
                continue
            del self._unanswered[request]
            entries = [entry for entry in asked.entries if entry[0] in asked.waiting]
            if not entries:
                continue
            self.statistics.catchups_asked_again += 1
            target = asked.target
            if not self._out(target) and self._address_of(target):
                self._ask_catchup(target, entries, now, out, of=asked.origin, before=asked)
            elif not asked.origin:
                self._ask_copy_holders(target, entries, now, out, before=asked)
            # (a holder of copies gone: every live super-peer was asked with it)

    def _newest_incarnation(self, origin: str) -> int:
        """The newest incarnation of ``origin`` this node heard of: on a link (``Hello``), from
        its advertisement (``Elements``) or its return (``sp.returned``). A publisher's access
        point cut off alone, whose publisher left or moved while it was, rejoins with nothing
        to advertise: only its return says it is back (chaos, issue 33)."""
        core = self.core
        advertised = core.origin_versions.get(origin, (0, 0))[0] if core is not None else 0
        return max(advertised, self.incarnations.get(origin, 0), self.returned.get(origin, 0))

    def _matches(
        self,
        entries: tuple[tuple[str, str, qel.Subscription, float, float], ...] | list,
        of: str = "",
    ) -> dict[str, list[m.Notify]]:
        """Per peer, the logged publications (of origin ``of`` only, if given) that its
        entries match, each in its window."""
        found: dict[str, list[m.Notify]] = {}
        if not entries:
            return found
        for data in self.store.logged_since(min(entry[3] for entry in entries)):
            notification = decoded_as(data, m.Notification)
            if notification is None or (of and notification.origin != of):
                continue
            matched: dict[str, dict[str, tuple[bool, bool]]] = {}
            for peer, sid, subscription, since, until in entries:
                if since <= notification.published_at < until:
                    old, new = versions.concerns(subscription, notification)
                    if old or new:
                        matched.setdefault(peer, {})[sid] = (old, new)
            for peer, sids in matched.items():
                notify = versions.notify_of(notification, sids)
                found.setdefault(peer, []).append(dataclasses.replace(notify, hops=0))
        return found

    def _replay_for_late(self, replay: Replay, now: float, out: list[Output]) -> None:
        """What this origin published since a late subscription was made, and it matches, to
        the neighbour it came from, marked ``replayed`` (relayed again down its new path). A
        subscription later than ``failure_seconds`` went over a link that was declared failed,
        and the repair's catch-up covers it: the replay goes back no further than that."""
        margin = self.config.catchup_margin_seconds
        horizon = self.config.failure_seconds + self.config.routing.settle_seconds + margin
        since = max(
            replay.since - (0.0 if replay.own_clock else margin),
            replay.not_before - margin,
            now - horizon,
        )  # a window on this node's clock
        sent = 0
        for data in self.store.logged_since(since):
            notification = decoded_as(data, m.Notification)
            if (
                notification is None
                or notification.published_at < since
                or not self._own_entry(notification)
            ):
                continue
            old, new = versions.concerns(replay.subscription, notification)
            if old or new:
                again = dataclasses.replace(notification, hops=notification.hops + 1, replayed=True)
                self._send(replay.neighbour, again, now, out)
                sent += 1
        self.statistics.replayed += sent

    def _catch_up_locally(
        self, entries: list, now: float, out: list[Output], *, of: str = ""
    ) -> None:
        found = self._matches(entries, of)
        for peer, notices in self._gaps(entries, of).items():
            found.setdefault(peer, []).extend(notices)
        for peer, notifications in found.items():
            for notify in notifications:
                self._recover(peer, notify, now, out)

    def _gaps(
        self, entries: tuple | list, of: str = "", lost: tuple[str, ...] = ()
    ) -> dict[str, list[m.Notify]]:
        """Per peer whose entries start before the floor of what this node answers them from,
        the gap notices that say so, each naming an origin: restricted to origin ``of``, its
        copies' floor (``superpeer._replication``, rule 7); else this log's own (the latest
        publication pruned from it), and the copies' floor of each origin whose copies it
        kept that does not answer for itself (``lost`` to the asker, or to this node)."""
        if of:
            floors = {of: self._copies_floor(of)}
        else:
            floors = {self.node_id: self.store.log_floor()}
            for origin in sorted(self._copies_record()):
                if origin and (origin in lost or not self._answers_for_itself(origin)):
                    floors[origin] = self._copies_floor(origin)
        notices: dict[str, list[m.Notify]] = {}
        for origin, floor in floors.items():
            missed: dict[str, list[str]] = {}
            for peer, sid, _, since, until in entries:
                if since < floor and since < until:
                    missed.setdefault(peer, []).append(sid)
            for peer, sids in missed.items():
                notice = self._gap_notice(floor, sids, "" if origin == self.node_id else origin)
                notices.setdefault(peer, []).append(notice)
        return notices

    def _answers_for_itself(self, origin: str) -> bool:
        """Whether ``origin`` is, as far as this node knows, a live origin of its cube, which
        a catch-up asks itself and which tells its own log's gaps: not gone, not left, and
        routed to. Otherwise (a node that rejoined may not know an origin died while it was
        away: chaos, issue 33) the gaps of its copies here are told naming it."""
        core = self.core
        return core is not None and origin in core.origin_positions and not self._out(origin)

    def _gap_notice(self, floor: float, subscriptions: list[str], of: str = "") -> m.Notify:
        """The gap notice of this node's log, or of its copies of origin ``of``'s."""
        origin = of or self.node_id
        when = datetime.datetime.fromtimestamp(floor, datetime.UTC).isoformat(timespec="seconds")
        kept = f"{self.config.log_seconds:g} s (or {self.config.max_logged} of them)"
        if of:
            where = (
                f"it is lost, and super-peer {self.node_id}, which answers from copies of its "
                f"log, keeps {kept}"
            )
        else:
            where = f"its log keeps {kept}"
        text = (
            f"Publications made through super-peer {origin} until {when} may be missing: "
            f"{where}, and this peer's access point was apart from it longer (a partition, a "
            "super-peer down)."
        )
        subject = qel.URI(f"urn:semantic-pubsub:gap:{origin}:{floor:.6f}")
        publication = qel.Publication(
            subject,
            frozenset({(GAP_COMMENT, qel.Literal(lexical=text, datatype=None, lang=None))}),
            origin,
            f"gap:{origin}:{floor:.6f}",
        )
        return m.Notify(
            publication=publication,
            subscriptions=tuple(sorted(set(subscriptions))),
            owner=origin,
            access_point=self.address,
            origin=origin,
            hops=0,
            published_at=floor,
            kind=m.GAP,
        )

    def _serve_catchup(
        self, sender: str, message: m.CatchUp, now: float, out: list[Output]
    ) -> None:
        self.statistics.catchups_served += 1
        found = self._matches(message.entries, message.origin)
        for peer, notices in self._gaps(message.entries, message.origin, message.lost).items():
            found.setdefault(peer, []).extend(notices)
        peers = sorted({peer for peer, *_ in message.entries})
        for peer in peers:
            self._send_mail(
                sender,
                peer,
                found.get(peer, []),
                now,
                out,
                request=message.request,
                purpose="catchup",
            )

    def _send_mail(
        self,
        target: str,
        peer: str,
        notifications: list[m.Notify],
        now: float,
        out: list[Output],
        *,
        request: str,
        purpose: str,
        address: str = "",
    ) -> None:
        chunks = fitting(
            notifications,
            lambda n: m.Mail(
                request=request, purpose=purpose, peer=peer, notifications=(n,), last=True
            ),
            count=self.config.mail_batch,
            frame_bytes=self.config.max_frame_bytes,
        )
        for number, chunk in enumerate(chunks):
            mail = m.Mail(
                request=request,
                purpose=purpose,
                peer=peer,
                notifications=tuple(chunk),
                last=number == len(chunks) - 1,
            )
            self._send(target, mail, now, out, address=address)

    def _mail_in(self, message: m.Mail, now: float, out: list[Output]) -> None:
        if message.purpose == "catchup":
            self._answered(message.request, message.peer, message.last, now)
        if message.purpose == "handover":
            self._handed_in.setdefault(message.request, set()).update(
                mail_key(n.owner, n.publication.id, n.version) for n in message.notifications
            )
            if message.request in self._handover_due:
                # a long answer is still coming: asking again now would only send it twice
                wait = now + self.config.handover_seconds
                self._handover_due[message.request] = max(self._handover_due[message.request], wait)
        if message.peer in self._moved_away:
            # a catch-up answer names what matched from the start of the window asked for,
            # not from when each subscription was made: it goes on as one, for the access
            # point where the peer is to keep the rule of order (chaos seed 771: forwarded as
            # mail kept here, six notifications older than their subscription were delivered)
            purpose = "catchup" if message.purpose == "catchup" else "forward"
            self._forward(
                message.peer, message.notifications, message.hops + 1, now, out, purpose=purpose
            )
            return
        # kept by another access point: it matched there while the subscription stood
        kept = message.purpose in ("handover", "forward", "adopt")
        for notify in message.notifications:
            self._recover(message.peer, notify, now, out, kept=kept)

    def _answered(self, request: str, peer: str, last: bool, now: float) -> None:
        """Part of the answer of a catch-up for ``peer`` is here: all of it, if ``last``. A
        long answer still coming is not asked again meanwhile."""
        asked = self._unanswered.get(request)
        if asked is None:
            return
        if last:
            asked.waiting.discard(peer)
            if not asked.waiting:
                del self._unanswered[request]
                return
        asked.due = max(asked.due, now + self.config.catchup_retry_seconds)

    def _prune_unanswered(self, now: float) -> None:
        """Catch-ups first asked more than ``log_seconds`` ago are no longer waited for: the
        origins' logs no longer hold what they asked for."""
        for request, asked in list(self._unanswered.items()):
            if now - asked.asked_at > self.config.log_seconds:
                del self._unanswered[request]

    def _unanswered_since(self, origin: str | None = None) -> float | None:
        """The earliest hybrid time a catch-up still to be asked, or asked and not answered
        whole, starts from (None: none is); of ``origin`` only, if given."""
        starts = [
            asked.since
            for asked in self._unanswered.values()
            if origin is None or asked.target == origin
        ]
        starts += [
            c.since
            for c in self._catchups
            if origin is None or c.origins is None or origin in c.origins
        ]
        return min(starts, default=None)

    def _recover(
        self, peer: str, notify: m.Notify, now: float, out: list[Output], *, kept: bool = False
    ) -> None:
        # a peer with nothing left here but a withdrawn subscription's window (detached, or
        # not reconnected yet after a rejoin) is owed what that window catches up on
        known = (self.core is not None and peer in self.core.peers) or peer in self._withdrawn
        if not known and peer not in self.store.local_peers() and peer not in self._moved_away:
            return
        if notify.kind == m.GAP:  # said to the peer as it is: it matches no subscription
            before = self.mail.statistics.repeats
            out += self.mail.deliver(peer, dataclasses.replace(notify, delivery=0), now)
            if self.mail.statistics.repeats == before:
                self.statistics.gaps += 1
                log.warning(
                    "event=gap_notice node=%s peer=%s origin=%s", self.node_id, peer, notify.origin
                )
            return
        before = self.mail.statistics.repeats
        self._deliver(peer, dataclasses.replace(notify, delivery=0), now, out, kept=kept)
        if self.mail.statistics.repeats == before:
            self.statistics.recovered += 1
