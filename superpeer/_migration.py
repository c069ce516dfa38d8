"""Migration (``superpeer.node``, "Migration", seed 004 Section 5.1): handovers between the
previous and the new access point of a peer, forwarding addresses, and move statements."""

from __future__ import annotations

import dataclasses
import logging

import crypto
import wire
from clocks import earliest
from superpeer import versions
from superpeer._batches import fitting
from superpeer._node_base import (
    ADOPTED,
    ATTACHED,
    HANDED,
    HANDOVERS,
    MOVED,
    MOVES,
    ForwardingAddress,
    NodeBase,
    Output,
    PlannedCatchUp,
    RefusedForNow,
    decoded_as,
    log,
)
from superpeer.routes import Whereabouts
from wire import messages as m

QUICK_HANDOVER_TRIES = 3
"""A handover answered with less than it said it sent is asked again at once this many times
(mail lost on a link that broke); after that, when its timer says (``_ask_handover``)."""

UNKNOWN_HERE = "the peer is unknown here"
"""The answer of a super-peer that holds nothing of the peer: expected of most of those asked
when the previous access point is silent (``_ask_handover``), so not worth a warning."""
ATTACHED_HERE = "the peer is attached here now"
"""The one refusal that may not last (``HandoverDone.retry``): the connection a previous access
point holds may be dead without its knowing yet (a partition cut it from the peer)."""


class Migrations(NodeBase):
    """The peer's previous and new access points, and the mail between them."""

    def _moved(self, peer: str, message: m.Moved, now: float, out: list[Output]) -> None:
        """The peer was attached to ``message.previous`` before: fetch what it kept."""
        if message.previous in ("", self.node_id):
            return
        request = f"{self.node_id}:{peer}:{self._next_id()}"
        entry = {
            "request": request,
            "peer": peer,
            "previous": message.previous,
            "address": message.previous_address,
            "since": message.since,
            "missing": message.missing_since,
            "signature": message.signature.hex(),
            "caught_up": False,
            "asked_at": now,
            "asked_clock": self.clock.now(now),
            "subscriptions": {
                sid: wire.encode(m.Subscribe(id=sid, subscription=q)).hex()
                for sid, q in sorted(self.core.subscriptions_of(peer).items())
            }
            if self.core is not None
            else {},
        }
        for key, old in self.store.pending(HANDOVERS).items():
            if old["peer"] == peer and old["previous"] == message.previous:
                self._forget_handover(key)
        self.store.set_pending(HANDOVERS, request, entry)
        self.store.set_pending(MOVES, peer, entry)
        self._awaiting.add(request)
        self.addresses.setdefault(message.previous, message.previous_address)
        self._ask_handover(request, entry, now, out)

    def _ask_handover(self, request: str, entry: dict, now: float, out: list[Output]) -> None:
        """Ask the previous access point (again): the first wait is ``handover_seconds``, then
        it doubles (up to ten minutes) while the previous one does not answer.

        Asked again, every other live super-peer this node knows is asked too: the previous
        one may have left the cube before this node joined it (or while it was cut off), so
        that this node never heard which successor adopted its peers (``Departed.successor``),
        and a successor adopts a detached peer's state whole: its mail, its subscriptions and
        the versions of its resources. Without that, a publisher that came back through a
        newcomer could change none of its resources, for good ("may be kept by your previous
        access point"). The holder answers as the previous one would (``_check_handover``:
        inherited, or adopted from it); no other does, not even one holding an older copy of
        the peer's state from before ``previous`` (``Handover.search``: its answer would end
        the request, and a lost answer of the real holder would then not be asked for again);
        the others' refusals do not end the request (``_handover_done``)."""
        self.statistics.handovers_in += 1
        tries = self._handover_tries.get(request, 0)
        self._handover_tries[request] = tries + 1
        wait = min(self.config.handover_seconds * 2**tries, 600.0)
        self._handover_due[request] = now + wait
        handover = self._handover_request(request, entry["peer"], entry)
        holder, address = self._holder(entry["previous"], entry["address"])
        if holder == self.node_id:  # the peer's state came here with an adoption
            if self.store.pending_value(ADOPTED, entry["peer"]) is None:
                # or should have, and did not: the leaver named this node its successor while
                # it was down (``left_unacknowledged``), and what it kept for the peer is lost
                # with it; the origins have what the peer was owed since its statement's start
                self._catch_up_meanwhile(request, entry, now)
            self._forget_handover(request)
            self._release_held(now, out)
            return
        self._send(holder, handover, now, out, address=address)
        if tries:
            search = dataclasses.replace(handover, search=True)
            for other in self._live_superpeers(holder):
                if other != self.node_id:
                    self._send(other, search, now, out, address=self._address_of(other))

    def _handover_request(self, request: str, peer: str, statement: dict) -> m.Handover:
        """Ask for ``peer``'s state, showing its stored move statement (the one handover asks
        with, and the one a claim shows)."""
        return m.Handover(
            request=request,
            peer=peer,
            moved_at=statement.get("asked_clock", statement["asked_at"]),
            previous=statement["previous"],
            superpeer=self.node_id,
            address=self.address,
            since=statement["since"],
            signature=bytes.fromhex(statement["signature"]),
        )

    def _holder(self, previous: str, address: str) -> tuple[str, str]:
        """Who keeps what ``previous`` kept: itself, or the super-peer that adopted its peers
        when it left (and so on)."""
        holder = previous
        for _ in range(16):
            if holder not in self.successors:
                break
            holder = self.successors[holder]
            address = self.addresses.get(holder, "")
        return holder, address

    def _returned(self, message: m.Returned, now: float, out: list[Output]) -> None:
        """``message.origin`` is back with the state of some peers: ask again at once for the
        ones it still holds that moved here; and claim the peers it holds an older copy of
        (they moved on, maybe through access points that are gone): showing the peer's latest
        move statement, which names this node and postdates their time there."""
        if message.address:
            self.addresses.setdefault(message.origin, message.address)
        wanted = set(message.peers)
        asked = set()
        for request, entry in sorted(self.store.pending(HANDOVERS).items()):
            if entry["peer"] in wanted and entry["previous"] == message.origin:
                self._handover_tries[request] = 0
                self._ask_handover(request, entry, now, out)
                asked.add(entry["peer"])
        local = set(self.store.local_peers()) | set(self._peer_connection)
        for peer, statement in sorted(self.store.pending(MOVES).items()):
            if peer in wanted and peer in local and peer not in asked:
                request = f"{self.node_id}:claim:{self._next_id()}"
                claim = self._handover_request(request, peer, statement)
                self._send(message.origin, claim, now, out)

    def _forget_handover(self, request: str) -> None:
        self.store.set_pending(HANDOVERS, request, None)
        self._handed_in.pop(request, None)
        self._handover_due.pop(request, None)
        self._handover_tries.pop(request, None)
        self._awaiting.discard(request)

    def _handover_timer(self, now: float, out: list[Output]) -> None:
        self._close_silent(now, out)
        pending = self.store.pending(HANDOVERS)
        for request, due in sorted(self._handover_due.items()):
            if due > now:
                continue
            entry = pending.get(request)
            if entry is None:
                self._forget_handover(request)
                continue
            self._awaiting.discard(request)
            self._catch_up_meanwhile(request, entry, now)
            if now - entry["asked_at"] > self.config.retention_seconds:
                self._forget_handover(request)
                continue
            self._ask_handover(request, entry, now, out)
        self._release_held(now, out)

    def _catch_up_meanwhile(self, request: str, entry: dict, now: float) -> None:
        """The previous access point does not answer, or refuses for now: take from the
        origins what was published since the peer last heard from it (once); the request stays,
        and what it kept comes when it answers (repeats are dropped)."""
        if entry["caught_up"]:
            return
        entry["caught_up"] = True
        self.store.set_pending(HANDOVERS, request, entry)
        self._catchups.append(self._moved_catchup(entry, now))

    def _moved_catchup(
        self, entry: dict, now: float, *, since: float | None = None
    ) -> PlannedCatchUp:
        """What a moved peer may have missed: what its subscriptions (as it brought them)
        matched since it last heard from its previous access point (or since ``since``, from
        when that one could not vouch for the mail it handed over: possibly earlier, when the
        peer's move there was not handed over yet)."""
        subscriptions = {}
        for sid, data in entry.get("subscriptions", {}).items():
            subscribe = decoded_as(bytes.fromhex(data), m.Subscribe)
            if subscribe is not None:
                subscriptions[sid] = subscribe.subscription
        # hybrid times (``clocks``, rules 5 and 6): from when the peer arrived at its previous
        # access point, until it was here and routes had settled for it
        settled = self.config.routing.settle_seconds + self.config.catchup_margin_seconds
        arrived_here = entry.get("asked_clock", entry["asked_at"])
        if since is None:
            since = self._unvouched_before(entry)
        return PlannedCatchUp(
            now,
            since,
            frozenset({entry["peer"]}),
            None,
            {entry["peer"]: subscriptions},
            until=arrived_here + settled,
        )

    def _handover_out(
        self, sender: str, message: m.Handover, now: float, out: list[Output]
    ) -> None:
        """A peer of ours moved to ``sender``: hand over what we keep and forget it."""
        refusal = self._check_handover(sender, message)
        if refusal is not None:
            retry = refusal == ATTACHED_HERE
            if retry:
                self._refuse_for_now(sender, message, now, out)
            log.log(
                logging.INFO if refusal == UNKNOWN_HERE else logging.WARNING,
                "event=handover_refused node=%s peer=%s to=%s reason=%r",
                self.node_id,
                message.peer,
                sender,
                refusal,
            )
            done = m.HandoverDone(
                request=message.request,
                peer=message.peer,
                accepted=False,
                reason=refusal,
                expired=0,
                retry=retry,
            )
            self._send(sender, done, now, out, address=message.address)
            return
        peer = message.peer
        self.statistics.handovers_out += 1
        self._refused_for_now.pop(peer, None)
        unvouched = self._unvouched_since(peer)  # before the handover drops its pending parts
        for request, asked in self._handovers_of(peer).items():
            if self._holder(asked["previous"], asked["address"])[0] == sender:
                # the peer went back to the super-peer this node was asking for its state: what
                # that one keeps is the peer's own there again (it would refuse as stale)
                self._forget_handover(request)
        kept, through = self.mail.handed_over(peer)
        expired = self.store.take_expired(peer)
        self._send_mail(
            sender,
            peer,
            kept,
            now,
            out,
            request=message.request,
            purpose="handover",
            address=message.address,
        )
        handed = self._hand_versions(
            peer, sender, now, out, request=message.request, address=message.address
        )
        if kept or handed:
            entry = {"peer": peer, "to": sender, "through": through, "versions": handed}
            self.store.set_pending(HANDED, message.request, entry)
        forward = ForwardingAddress(
            sender,
            message.address,
            forget_at=now + self.config.routing.settle_seconds,
            expires_at=now + self.config.retention_seconds,
        )
        self._moved_away[peer] = forward
        self.store.set_pending(MOVED, peer, forward.saved())
        self.store.remove(peer)  # its registration moves: moving back registers again
        self.store.set_pending(ADOPTED, peer, None)
        produced: list = []
        held = self.rendezvous.moved_away(
            peer, Whereabouts(forward=sender, forward_address=message.address), now, produced
        )
        self._core(produced, now, out)
        done = m.HandoverDone(
            request=message.request,
            peer=peer,
            accepted=True,
            reason="",
            expired=expired,
            count=len(kept) + len(handed),
            rendezvous=held,
            unvouched_since=unvouched,
        )
        self._send(sender, done, now, out, address=message.address)
        log.info(
            "event=handover node=%s peer=%s to=%s kept=%d", self.node_id, peer, sender, len(kept)
        )

    def _refuse_for_now(
        self, sender: str, message: m.Handover, now: float, out: list[Output]
    ) -> None:
        """Remember the latest handover refused because ``message.peer`` is attached here, and
        find out whether it is: a signed move statement says the peer went elsewhere, and a
        connection cut by a partition looks alive until the operating system gives up on it,
        many minutes later. The peer is sent a ``Clock``, which a live peer answers; a
        connection silent for ``failure_seconds`` after it is closed (``_close_silent``). A
        live one wrongly closed costs a reconnection, not a handover: the one peer that can be
        live here is one that came back, and its move statement here makes the request stale."""
        peer = message.peer
        known = self._refused_for_now.get(peer)
        silent_by = known.silent_by if known is not None else None
        if silent_by is None:
            self._clock_to_peer(peer, self._peer_connection[peer], now, out)
            silent_by = now + self.config.failure_seconds
        self._refused_for_now[peer] = RefusedForNow(sender, message, silent_by)

    def _close_silent(self, now: float, out: list[Output]) -> None:
        """The connections of peers a handover said had moved, silent since they were asked
        for a ``Clock``: dead, so closed; their handovers are answered as they close."""
        for peer, refused in sorted(self._refused_for_now.items()):
            if refused.silent_by is None or refused.silent_by > now:
                continue
            reason = "silent since a handover said the peer moved to " + refused.asker
            self._close(self._peer_connection[peer], reason, now, out)

    def _handed_when_detached(self, peer: str, now: float, out: list[Output]) -> None:
        """``peer``'s connection here ended: the handover refused while it was attached is
        answered now, checked as if it had just come (the peer may have come back here since,
        or left). Called by the one place a peer detaches (``_connection_closed``), after
        ``_established`` dropped the refusal if the peer connected here again."""
        refused = self._refused_for_now.pop(peer, None)
        if refused is not None:
            self._handover_out(refused.asker, refused.request, now, out)

    def _unvouched_since(self, peer: str) -> float:
        """From when the mail kept here for ``peer`` may lack what it was owed (hybrid time; 0:
        from no time). Such mail is still to come by a catch-up covering the peer: one planned
        and not asked yet (a restart's, a broken route's, this node's for the peer's move here),
        one this node will plan once it is a member again after a restart, one asked and not
        answered whole for the peer, or the handover from the peer's access point before this
        one, not answered yet. Once the peer has moved on, this node skips it in its catch-ups
        (``_ask_catchups``), so the next access point asks the origins from then.

        An answer still to come would reach this node and follow the peer (``_mail_in``), but
        only while this node lives: one that leaves or crashes before it comes loses it, and
        the peer with it (seed 751 of the chaos harness: a peer's access point crashed for good,
        the next one caught up for it, answered the peer's next move while leaving, and stopped
        before the answers came: 24 notifications lost). Counted here, the next access point
        asks again; what both receive is dropped as a repeat at the inbox."""
        times = [c.since for c in self._catchups if c.peers is None or peer in c.peers]
        times += [
            entry[3]
            for asked in self._unanswered.values()
            if peer in asked.waiting
            for entry in asked.entries
            if entry[0] == peer
        ]
        if self._restored_since is not None:
            times.append(self._restored_since)
        times += [
            self._unvouched_before(entry)
            for entry in self.store.pending(HANDOVERS).values()
            if entry["peer"] == peer and not entry["caught_up"]
        ]
        return min(times, default=0.0)

    def _unvouched_before(self, entry: dict) -> float:
        """From when a moved peer may lack what it was owed, as its move statement says (the
        ``HANDOVERS`` entry): from when it arrived at its previous access point, less the
        margin, or from when that one said it may have missed things, if earlier
        (``Moved.missing_since``: what reached it late is lost if it is)."""
        start = earliest(entry["since"], entry.get("missing", 0.0))
        return start - self.config.catchup_margin_seconds

    def _check_handover(self, sender: str, message: m.Handover) -> str | None:
        peer = message.peer
        if message.superpeer != sender:
            return f"the handover names {message.superpeer}, but {sender} sent it"
        if message.search and not self._holds_for(sender, message):
            return UNKNOWN_HERE
        if peer in self._peer_connection:
            return ATTACHED_HERE
        arrival = self.store.pending(MOVES).get(peer)
        if arrival is not None and arrival["since"] > message.since:
            # the move it describes is older than the peer's latest arrival here (both times
            # are the peer's clock): it came back since, and what is kept now is not the asker's
            return "the peer came back here after that move"
        if peer in self._moved_away and self._moved_away[peer].node == sender:
            return None  # asked again: what reached this node since goes too
        known = peer in self.store.local_peers() or self.store.get(peer) is not None
        if not known:
            return UNKNOWN_HERE
        here_until = self.store.pending(ATTACHED).get(peer, {}).get("at", float("inf"))
        moved_on = message.since >= here_until  # it was elsewhere after it was last here
        if not moved_on and not self._holds_for(sender, message):
            return f"the peer says it moved from {message.previous}, not from here"
        if self.fingerprint is None:
            return None
        record = self.store.get(peer)
        key = record.public_key if record is not None else self.store.local_state(peer).public_key
        if not key:
            return "no key to check the peer's signature against"
        signed = crypto.verify_move(
            key,
            message.signature,
            public_id=peer,
            previous=message.previous,
            current=sender,
            since=message.since,
        )
        return None if signed else "the move statement is not signed by the peer's key"

    def _holds_for(self, sender: str, message: m.Handover) -> bool:
        """Whether this node keeps what ``message.previous`` kept for the peer: it is that
        one, it adopted the peer from it, it holds its place by succession (``_holder``), or
        it handed the peer to ``sender`` itself. A detached peer is adopted again and again as
        its access points leave (sp0 -> sp1 -> here) and still names the one it was attached
        to: the asker found this node by following the successors from there, and so does
        this check; the super-peer it adopted the peer from alone is not enough."""
        peer = message.peer
        if peer in self._moved_away and self._moved_away[peer].node == sender:
            return True
        adopted = self.store.pending(ADOPTED).get(peer, {}).get("from")
        return (
            message.previous in (self.node_id, adopted)
            or self._holder(message.previous, "")[0] == self.node_id
        )

    def _handover_done(
        self, sender: str, message: m.HandoverDone, now: float, out: list[Output]
    ) -> None:
        entry = self.store.pending(HANDOVERS).get(message.request)
        if (
            entry is not None
            and not message.accepted
            and not message.retry
            and sender != self._holder(entry["previous"], entry["address"])[0]
        ):
            return  # one of the others asked (``_ask_handover``): it holds nothing of the peer
        if not message.accepted and message.retry and entry is not None:
            # the peer is attached there still, over a connection that may be dead: the
            # previous one answers when it ends, this node asks again meanwhile (its timer)
            log.info(
                "event=handover_deferred node=%s peer=%s from=%s",
                self.node_id,
                message.peer,
                sender,
            )
            self._awaiting.discard(message.request)
            self._catch_up_meanwhile(message.request, entry, now)
            self._release_held(now, out)
            return
        if message.accepted:
            received = len(self._handed_in.get(message.request, ()))
            if received < message.count:
                # some of its mail was lost on the way (a broken link, a rejoin): the previous
                # access point still keeps it all, and sends it again when asked again
                log.warning(
                    "event=handover_incomplete node=%s peer=%s from=%s received=%d of=%d",
                    self.node_id,
                    message.peer,
                    sender,
                    received,
                    message.count,
                )
                # at once the first times; then at the timer, each wait twice the last (a
                # previous access point whose mail never counts here, e.g. sent by a process
                # not started yet, once made 7,000 round trips in 10 s)
                tries = self._handover_tries.get(message.request, 0)
                if entry is not None and tries < QUICK_HANDOVER_TRIES:
                    self._ask_handover(message.request, entry, now, out)
                return
            self._handed_in.pop(message.request, None)
            received_all = m.HandoverReceived(request=message.request, peer=message.peer)
            self._send(sender, received_all, now, out)
            if message.rendezvous:
                address = self.addresses.get(sender) or (entry or {}).get("address", "")
                produced: list = []
                self.rendezvous.offered(sender, address, message.rendezvous, now, produced)
                self._core(produced, now, out)
        if entry is None:
            return
        self._forget_handover(message.request)
        self._release_held(now, out)
        if message.expired:
            self.store.add_expired(message.peer, message.expired)
        if not message.accepted and not entry["caught_up"]:
            self._catchups.append(self._moved_catchup(entry, now))
        elif message.accepted and message.unvouched_since:
            # what the previous access point kept lacks what a catch-up of its own was to bring
            self._catchups.append(self._moved_catchup(entry, now, since=message.unvouched_since))
        log.info(
            "event=handover_done node=%s peer=%s accepted=%s reason=%r",
            self.node_id,
            message.peer,
            message.accepted,
            message.reason,
        )

    def _handover_received(self, sender: str, message: m.HandoverReceived) -> None:
        entry = self.store.pending(HANDED).get(message.request)
        if entry is None or entry["to"] != sender or entry["peer"] != message.peer:
            return
        self.store.set_pending(HANDED, message.request, None)
        if not self.mail.attached(message.peer):
            # attached: it came back, and acknowledges what it is sent (dropping rows in its
            # window would leave the window counting them)
            self.mail.drop(message.peer, entry["through"])
            self._forget_handed_versions(message.peer, entry.get("versions", {}))

    def _forget_handed_versions(self, peer: str, handed: dict[str, int]) -> None:
        """The versions the new access point now keeps are not the owner's here any more: a
        change accepted here later would give a version number the subscribers have had
        already. A version changed here since (the peer came back) stays."""
        if self.core is None:
            return
        for resource, number in handed.items():
            held = self.core.versions.current(peer, resource)
            # none held: forgotten with the peer's other state once it moved (``core.leave``),
            # but its record is still in the store, for a restart to bring back
            if held is None or held.number == number:
                self.core.versions.forget_resource(peer, resource)
                self.store.set_pending(versions.RECORDS, versions.record_key(peer, resource), None)

    def _forget_moved(self, now: float, out: list[Output]) -> None:
        """The peers that moved away: after ``settle_seconds`` their subscriptions go; their
        forwarding address stays for ``retention_seconds`` (mail still on its way here)."""
        for peer, forward in sorted(self._moved_away.items()):
            if forward.forget_at is not None and forward.forget_at <= now:
                handed = any(e["peer"] == peer for e in self.store.pending(HANDED).values())
                self._forget_local(peer, keep_mail=handed)
                if self.core is not None and peer in self.core.peers:
                    self._core(self.core.leave(peer, now, moved=True), now, out)
                forward.forget_at = None
                self.store.set_pending(MOVED, peer, forward.saved())
            if forward.expires_at <= now:
                del self._moved_away[peer]
                self.store.set_pending(MOVED, peer, None)

    def _forget_local(self, peer: str, *, keep_mail: bool = False) -> None:
        """Everything kept here for ``peer`` (it left, or moved away) but its registration (and
        its mail, with ``keep_mail``: handed over, not yet received there)."""
        for kind in (MOVED, ATTACHED, MOVES, ADOPTED):
            self.store.set_pending(kind, peer, None)
        self.store.forget_local(peer, keep_mail=keep_mail)
        self.expiries.forget(peer)

    # -- the versions of a peer's resources (``superpeer.versions``) --------------------------
    def _hand_versions(
        self,
        peer: str,
        target: str,
        now: float,
        out: list[Output],
        *,
        request: str = "",
        address: str = "",
    ) -> dict[str, int]:
        """Send ``target`` the versions of the resources ``peer`` published through this node
        (it adopts the peer, or the peer moved there): the owner's changes go where they are.
        Returns what was sent, resource -> version number. From the store when the core forgot
        them: a handover asked again after the peer's state here went (``settle_seconds``)
        still brings them."""
        core = self.core
        held = core.versions.resources_of(peer) if core is not None else {}
        if not held and (core is None or peer not in core.peers):
            held = versions.StoredVersions(self.store).of_owner(peer)
        handed = [
            m.ResourceVersion(
                id=resource,
                number=version.number,
                publication=version.publication,
                retracted=version.retracted,
                expires=version.expires,
            )
            for resource, version in sorted(held.items())
        ]
        if handed:
            chunks = fitting(
                handed,
                lambda v: m.Versions(request=request, peer=peer, versions=(v,)),
                count=self.config.mail_batch,
                frame_bytes=self.config.max_frame_bytes,
            )
            for chunk in chunks:
                message = m.Versions(request=request, peer=peer, versions=tuple(chunk))
                self._send(target, message, now, out, address=address)
        return {v.id: v.number for v in handed}

    def _versions_coming(self, peer: str) -> bool:
        """Whether the previous access point of ``peer`` has yet to answer its handover (and
        so to hand over the versions of its resources)."""
        if not self._awaiting:
            return False
        return any(request in self._awaiting for request in self._handovers_of(peer))

    def _handovers_of(self, peer: str) -> dict[str, dict]:
        """The handovers asked for ``peer`` and not answered yet, by request."""
        return {r: e for r, e in self.store.pending(HANDOVERS).items() if e["peer"] == peer}

    def _kept_elsewhere(self, peer: str, message: m.Publish | m.Withdraw) -> str:
        """Why a change of a resource unknown here is refused, when the previous access point
        may keep it and has not answered the handover ("" otherwise: the core says why)."""
        core = self.core
        if isinstance(message, m.Withdraw):
            resource = message.id
        elif message.change == "publish":
            return ""
        else:
            resource = message.publication.id
        if core is None or core.versions.current(peer, resource) is not None:
            return ""
        previous = [entry["previous"] for entry in self._handovers_of(peer).values()]
        if not previous:
            return ""
        return (
            f"the resource {resource!r} may be kept by your previous access point "
            f"{previous[-1]}, which has not handed your resources over yet (it does not "
            "answer): try again once it does"
        )

    def _release_held(self, now: float, out: list[Output]) -> None:
        """The requests held for peers whose versions were coming (``SuperPeerNode._request``),
        in order, once the handover is answered or given up. Those of a connection that ended
        since go with it (the peer sends them again)."""
        for peer in sorted(self._held):
            if self._versions_coming(peer):
                continue
            for connection, request in self._held.pop(peer):
                entry = self._connections.get(connection)
                if entry is not None and self._peer_connection.get(peer) == connection:
                    self._request(connection, entry, request, now, out)

    def _versions_in(self, message: m.Versions) -> None:
        """Keep the versions handed here, durably, unless a newer one is here already (the
        owner changed the resource here since); count them for the handover they belong to."""
        assert self.core is not None
        table = self.core.versions
        for handed in message.versions:
            if message.request:
                self._handed_in.setdefault(message.request, set()).add(
                    f"version {handed.id} {handed.number}"
                )
            held = table.current(message.peer, handed.id)
            if held is not None and held.number >= handed.number:
                continue
            version = versions.Version.of(
                handed.number, handed.publication, handed.retracted, handed.expires
            )
            table.restore(message.peer, handed.id, version)
            self.store.set_pending(
                versions.RECORDS, *versions.version_record(message.peer, version)
            )
