"""Adoption (``superpeer.node``, "Leaving"): a neighbour that leaves cleanly hands its peers,
their state and mail, and its publication log to this node."""

from __future__ import annotations

import dataclasses

import wire
from superpeer._backlog import Backlog, Waiting
from superpeer._batches import fitting
from superpeer._node_base import (
    ADOPTED,
    MOVED,
    Output,
    PlannedCatchUp,
    decoded_as,
    log,
)
from wire import messages as m


class Adoptions(Backlog):
    """Taking over the peers of a neighbour that leaves."""

    def _adopt_out(self, peer: str, successor: str, now: float, out: list[Output]) -> None:
        state = self.store.local_state(peer)
        advertise = decoded_as(state.advertisement, m.Advertise) if state.advertisement else None
        # expiries on this node's clock: the adopter keeps the time they have left on its own
        # (``clocks``, rule 8)
        # each with the hybrid time it was made here (``Subscribe.active_since``): without it,
        # the adopter owes a catch-up or a replay everything matching, however old
        kept = sorted(
            (
                dataclasses.replace(
                    s,
                    sent_at=now if s.expires is not None else s.sent_at,
                    active_since=state.subscribed_at.get(s.id, 0.0),
                )
                for data in state.subscriptions.values()
                if (s := decoded_as(data, m.Subscribe))
            ),
            key=lambda s: s.id,
        )
        record = self.store.get(peer)
        key = record.public_key if record is not None else state.public_key
        schema = decoded_as(state.schema, m.PublishSchema)
        adopt = m.Adopt(
            peer=peer,
            public_key=key or b"",
            advertisement=advertise.advertisement if advertise is not None else None,
            subscriptions=tuple((s.id, s.subscription) for s in kept),
            axioms=schema.axioms if schema is not None else (),
            kept=tuple(kept),
            unvouched_since=self._unvouched_since(peer),
        )
        self._send(successor, adopt, now, out)
        self._send_mail(
            successor,
            peer,
            self.mail.take(peer, now),
            now,
            out,
            request=f"adopt:{peer}",
            purpose="adopt",
        )
        expired = self.store.take_expired(peer)
        if expired:
            self.store.add_expired(peer, expired)
        self._hand_versions(peer, successor, now, out)

    def _adopt_log_out(self, holders: list[str], now: float, out: list[Output]) -> None:
        """This leaver's log (its own entries, its neighbours' copies, what leavers before it
        handed over) to each of ``holders``: two of them, so that one more loss, the
        successor's, does not lose what this node accepted (``superpeer._replication``).
        Each part says what the log lacks (``AdoptLog.floor``, rule 7), an empty log too: what
        it held was pruned, and its holders' copies vouch for nothing before."""
        since = self.clock.earlier(now) - self.config.log_seconds
        logged = [
            n
            for data in self.store.logged_since(since)
            if (n := decoded_as(data, m.Notification)) is not None
        ]
        floor = max(self._log_floor_handed(), since)
        chunks = fitting(
            logged,
            lambda n: m.AdoptLog(notifications=(n,), floor=floor),
            count=self.config.mail_batch,
            frame_bytes=self.config.max_frame_bytes,
        )
        for holder in holders:
            for chunk in chunks:
                self._send(holder, m.AdoptLog(notifications=tuple(chunk), floor=floor), now, out)

    def _adopt_log_in(self, message: m.AdoptLog) -> None:
        self._keep_handed_floor(message)
        for notification in message.notifications:
            self._keep_logged(notification)

    def _adopted(self, peer: str, subscribe: m.Subscribe, now: float) -> list[Output]:
        """Keep one adopted subscription (its expiry on this node's clock already), and place
        it if its peer is still here (a node rejoining places what its store holds)."""
        out: list[Output] = []
        made = None
        if subscribe.active_since > 0:  # as the leaver kept it (an older leaver: unknown)
            made = self._made_here(peer, subscribe.id, subscribe.active_since)
        self.store.set_subscription(peer, subscribe.id, wire.encode(subscribe), made)
        self.expiries.set(peer, subscribe.id, subscribe.expires)
        core = self.core
        if core is not None and peer in core.peers:
            self._core_call(
                lambda o: core.subscribe(
                    peer,
                    subscribe.id,
                    subscribe.subscription,
                    now,
                    o,
                    on_change=subscribe.on_change,
                ),
                now,
                out,
            )
        return out

    def _catch_up_adopted(self, peer: str, since: float, now: float) -> list[Output]:
        """Once all of an adopted peer's subscriptions are placed: ask the origins, after the
        routes settle, for what the peer's were owed since the adoption."""
        self._catchups.append(
            PlannedCatchUp(now + self.config.routing.settle_seconds, since, frozenset({peer}), None)
        )
        return []

    def _adopt_in(self, sender: str, message: m.Adopt, now: float, out: list[Output]) -> None:
        core = self.core
        if core is None:
            return
        peer = message.peer
        self.store.set_pending(ADOPTED, peer, {"from": sender})
        if self._moved_away.pop(peer, None) is not None:
            # it had moved from here to the leaver (or on, through it): its state, and the mail
            # that follows this message, are here again, not to be sent after it (to a
            # super-peer that is leaving)
            self.store.set_pending(MOVED, peer, None)
        if message.public_key:
            self.store.set_public_key(peer, message.public_key)
        known = peer in core.peers
        if not known:
            core.attach(peer, now)
            core.detach(peer, now)
        if message.advertisement is not None:
            self.store.set_advertisement(
                peer, wire.encode(m.Advertise(advertisement=message.advertisement))
            )
            self._core_call(lambda o: core.advertise(peer, message.advertisement, now, o), now, out)
        if message.axioms:
            self._core_call(
                lambda o: core.publish_schema(peer, frozenset(message.axioms), now, o), now, out
            )
            self._store_schema(peer)
        kept = message.kept or tuple(
            m.Subscribe(id=sid, subscription=q) for sid, q in message.subscriptions
        )
        placing: list[tuple[int, Waiting]] = []
        for held in kept:
            subscribe = self._expiry_here(held, now)  # as it arrived
            placing.append((1, lambda at, s=subscribe: self._adopted(peer, s, at)))
        # what reached the leaver for this peer after it handed it over went nowhere: asked
        # of the origins once every subscription is placed (what is published until then
        # reaches no route of them), from now; from earlier if the leaver's mail lacks what a
        # catch-up of its own was to bring (its answer would come to a super-peer that is gone)
        since = self.clock.now(now) - self.config.catchup_margin_seconds
        if message.unvouched_since:
            since = min(since, message.unvouched_since)
        placing.append((0, lambda at: self._catch_up_adopted(peer, since, at)))
        # kept and placed in slices (``_backlog``): a crash in between loses the rest, as it
        # lost the whole of an input not yet committed; the peer sends its subscriptions again
        # when it connects
        self._place_in_slices(placing, now, out)
        log.info(
            "event=adopted node=%s peer=%s subscriptions=%d",
            self.node_id,
            peer,
            len(message.subscriptions),
        )
