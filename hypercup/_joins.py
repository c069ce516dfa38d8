"""Joining, growing the cube, and keeping neighbour tables (see ``hypercup.node`` for the
overview).

The walk. ``route``: one dimension per hop (lowest differing bit first) to the anchor position
``TOP - 1``. ``search``: starting at the anchor's column (all low bits set), for each bit from the
highest down, clear it if the column obtained that way is doubled; the node at the current column
knows, because that column is its neighbour. The last column reached is the lowest doubled one,
``k``: every bit kept was kept because the column one below the result (``k - 1``) is split.

Why concurrent joins are safe. Joins only ever split columns, so "split" is never stale: a search
can only be misled into a column that is no longer doubled, and the node there retries from the
anchor. The take itself is atomic at the node that holds the column. The updates of a take go from
its base holder K to the base holders of the neighbouring columns (base positions never change
during joins), and each relays them to its own newcomer; the newcomer A of K's column hears of its
neighbours only from K (``Welcome``, then K's relays). So every piece of news about a column reaches
each interested node along one path of FIFO links, in order, and tables stay consistent however
takes next to each other interleave. Every update is acknowledged, end to end through the relays;
K then reports ``JoinDone`` to the anchor, and the anchor only grows the cube when no admitted join
is in flight, so no message of the old epoch is on its way when the dimension changes.

The prefix order is the joins' own: overlapping departures can break it (a doubled column below
a split one), and a cube whose anchor's column is split is full only as far as the anchor can
tell. So the anchor grows only after a census of its tree (``hypercup._census``) found no column
doubled; the joins that wait go straight to the doubled columns it found (``_census_taken``:
``SEARCH`` with ``bit`` -1, routed one dimension per hop), and one that finds its column split
meanwhile retries from the anchor, as a search does.
"""

from __future__ import annotations

from dataclasses import replace

from hypercup._census import CensusTaking
from hypercup._core import Admitted, NodeState, PendingTake
from hypercup._neighbourhood import Neighbourhood, peers_from_wire
from hypercup.errors import RemoteProtocolError
from hypercup.events import Joined
from hypercup.messages import (
    ROUTE,
    SEARCH,
    Grow,
    JoinDone,
    JoinRefused,
    JoinRequest,
    JoinWalk,
    NeighbourUpdate,
    PeerTable,
    UpdateAck,
    Welcome,
)
from hypercup.positions import adjacent, hamming, next_hop_position, top_bit


class Joins(CensusTaking):
    def _on_welcome(self, message: Welcome) -> None:
        self._hood = Neighbourhood(
            node_id=self.node_id,
            address=self.address,
            dimension=message.dimension,
            positions={message.position},
            peers=peers_from_wire(message.peers),
        )
        self._epoch = message.epoch
        self._state = NodeState.MEMBER
        self._out.append(Joined())

    def _require_no_repair(self, sender: str) -> None:
        if self._repair is not None:
            raise RemoteProtocolError(
                sender,
                f"a join reached {self.node_id}, which repairs a failure: the protocol assumes a "
                "departure runs alone",
            )

    def _on_join_request(self, sender: str, message: JoinRequest) -> None:
        hood = self._member_hood()
        if sender == self.node_id:
            raise RemoteProtocolError(sender, f"{sender} asks itself to join")
        if sender in hood.peers:
            self._refuse_old_incarnation(sender, message.address)
            return
        if self._repair is not None or self._state is not NodeState.MEMBER:
            refusal = f"{self.node_id} takes part in a departure; try again"
            self._send(sender, message.address, JoinRefused(reason=refusal, member=True))
            return
        self._advance_join(
            JoinWalk(
                epoch=self._epoch,
                newcomer=sender,
                newcomer_address=message.address,
                newcomer_incarnation=message.incarnation,
                phase=ROUTE,
                position=min(hood.positions),
                bit=-1,
                admitted=False,
                anchor=None,
                anchor_address=None,
            )
        )

    def _refuse_old_incarnation(self, newcomer: str, address: str) -> None:
        """``newcomer`` asks to join while its old incarnation is in this node's table still
        (its repair not done): refused, it asks again."""
        refusal = f"{newcomer} is still a member here (its old incarnation is being repaired)"
        self._send(newcomer, address, JoinRefused(reason=refusal, member=True))

    def _on_join_walk(self, sender: str, walk: JoinWalk) -> None:
        """A walk addressed to the mirror we just handed over (the sender had not heard yet) is
        passed on to its newcomer by ``_advance_join``."""
        if walk.newcomer == self.node_id:
            # its own join, asked again by a walk that went round (a retry from the anchor)
            # while another one already made it a member: nothing to take; taken over, it
            # would welcome itself. Its anchor hears it is over (``_dropped``)
            if walk.epoch == self._epoch:
                self._dropped(walk)
            return
        self._require_no_repair(sender)
        self._advance_join(walk if walk.epoch == self._epoch else self._restart(walk))

    @staticmethod
    def _full(hood: Neighbourhood) -> bool:
        """Whether the cube is full as far as its anchor can tell: the anchor's own column, the
        last that joins split, is split (a census tells the rest: ``hypercup._census``)."""
        return hood.dimension == 0 or top_bit(hood.dimension) * 2 - 1 not in hood.positions

    @staticmethod
    def _anchor_position(hood: Neighbourhood) -> int:
        return 0 if hood.dimension == 0 else top_bit(hood.dimension) - 1

    def _restart(self, walk: JoinWalk) -> JoinWalk:
        """The walk starts over from this node, in its epoch, not yet admitted."""
        return replace(
            walk,
            epoch=self._epoch,
            phase=ROUTE,
            position=min(self._member_hood().positions),
            bit=-1,
            admitted=False,
            anchor=None,
            anchor_address=None,
            anchor_incarnation=0,
        )

    def _advance_join(self, walk: JoinWalk) -> None:
        """Takes the walk's steps at this node until it must go to another node or ends here."""
        while True:
            hood = self._member_hood()
            if walk.position not in hood.positions:
                hop = walk.position
                if hop not in hood.holders:
                    # a column the anchor's census found doubled: one dimension per hop
                    nearest = min(hood.positions, key=lambda p: hamming(p, walk.position))
                    hop = next_hop_position(nearest, walk.position)
                holder = hood.holder(hop)
                self._send(holder, hood.address_of(holder), walk)
                return
            if walk.phase == ROUTE:
                anchor = self._anchor_position(hood)
                if walk.position != anchor:
                    walk = replace(walk, position=next_hop_position(walk.position, anchor))
                    continue
                admitted = self._admit(walk)
                if admitted is None:
                    return
                walk = admitted
                continue
            column = walk.position
            if column | top_bit(hood.dimension) not in hood.positions:
                self._retry(walk)
                return
            bit = walk.bit
            lower: int | None = None
            while bit >= 0:
                assert column >> bit & 1, "the search clears each bit at its own step"
                candidate = column ^ (1 << bit)
                bit -= 1
                if not hood.column_split(candidate):
                    lower = candidate
                    break
            walk = replace(walk, bit=bit)
            if lower is None:
                if walk.newcomer in hood.peers:
                    # its old incarnation holds a place next to this column still (a repair
                    # not done yet): two entries of one name in the tables around it. Or it
                    # is a member by now, taken by another of its walks
                    self._refuse_old_incarnation(walk.newcomer, walk.newcomer_address)
                    self._dropped(walk)
                    return
                self._take_over(walk)
                return
            walk = replace(walk, position=lower)

    def _admit(self, walk: JoinWalk) -> JoinWalk | None:
        """At the anchor: count the walk and start its search, or grow the cube, or hold the walk
        while the cube is full and joins are still in flight (None)."""
        hood = self._member_hood()
        if self._duplicate(walk):
            return None
        self._admitted.pop(walk.newcomer, None)
        full = self._full(hood)
        if full and walk.newcomer in hood.peers:
            # its old incarnation holds a place next to the anchor still (a repair not done
            # yet): a grow now would cross that repair, and count the place as taken
            self._refuse_old_incarnation(walk.newcomer, walk.newcomer_address)
            return None
        if full:
            # it waits for the census and, if the cube is full indeed, the grow
            self._queued = [w for w in self._queued if w.newcomer != walk.newcomer]
            self._queued.append(self._restart(walk))
            self._grow_when_ready()
            return None
        self._admitted[walk.newcomer] = Admitted(walk.newcomer_incarnation)
        return replace(
            walk,
            phase=SEARCH,
            bit=hood.dimension - 2,
            admitted=True,
            anchor=self.node_id,
            anchor_address=self.address,
        )

    def _duplicate(self, walk: JoinWalk) -> bool:
        """Whether ``walk`` asks again for a join this anchor admitted or queued already, for
        the same incarnation of its newcomer or a later one. A newcomer whose answer is slow
        asks another contact, and each contact sends its own walk: when sixteen super-peers
        join a full cube at once, each waits for the grow, asks again every few seconds, and
        the grow would restart every walk it queued, a newcomer's duplicates among them, whose
        second take finds it a member already. Kept: the first walk. Not a duplicate: this
        anchor's own retry of the walk it admitted (``_retry``), nor a later incarnation's."""
        if walk.admitted and walk.anchor == self.node_id:
            return False
        admitted = self._admitted.get(walk.newcomer)
        if admitted is not None and admitted.incarnation >= walk.newcomer_incarnation:
            return True
        return any(
            queued.newcomer == walk.newcomer
            and queued.newcomer_incarnation >= walk.newcomer_incarnation
            for queued in self._queued
        )

    def _dropped(self, walk: JoinWalk) -> None:
        """An admitted walk that ends without a take (its newcomer is in the table here: a
        member already, or its old incarnation not yet repaired away) is over for its anchor,
        which grows the cube only when no admitted join is in flight. Unreported, it waited
        ``STALE_TICKS`` for it, and the joins queued meanwhile with it."""
        if walk.admitted and walk.anchor is not None and walk.anchor_address is not None:
            self._report_done(
                walk.anchor, walk.anchor_address, walk.newcomer, walk.newcomer_incarnation
            )

    def _report_done(self, anchor: str, address: str, newcomer: str, incarnation: int) -> None:
        """Tells ``anchor`` that the admitted walk of ``newcomer``'s ``incarnation`` is over,
        taken or not."""
        if anchor == self.node_id:
            self._join_done(newcomer, incarnation)
            return
        done = JoinDone(epoch=self._epoch, newcomer=newcomer, newcomer_incarnation=incarnation)
        self._send(anchor, address, done)
        self._grow_when_ready()

    def _restart_join(self, walk: JoinWalk) -> None:
        self._advance_join(self._restart(walk))

    def _retry(self, walk: JoinWalk) -> None:
        """The column was taken by a concurrent join: search again from the anchor (the search
        only moves away from the anchor, so this is never the anchor itself)."""
        assert walk.anchor not in (None, self.node_id) and walk.anchor_address is not None
        again = replace(
            walk, phase=ROUTE, position=self._anchor_position(self._member_hood()), bit=-1
        )
        self._send(walk.anchor, walk.anchor_address, again)

    def _take_over(self, walk: JoinWalk) -> None:
        """Hands this node's mirror to the newcomer, atomically, and tells the columns around."""
        hood = self._member_hood()
        assert walk.anchor is not None and walk.anchor_address is not None
        assert self._take is None, "a column splits once per epoch"
        column = walk.position
        mirror = column | top_bit(hood.dimension)
        welcome = hood.to_wire(around=[mirror])
        welcome[self.node_id] = (self.address, (column,))
        hood.release(mirror, walk.newcomer, walk.newcomer_address)
        self._send(
            walk.newcomer,
            walk.newcomer_address,
            Welcome(
                epoch=self._epoch,
                dimension=hood.dimension,
                position=mirror,
                peers=welcome,
                incarnation=walk.newcomer_incarnation,
            ),
        )
        update: PeerTable = {
            self.node_id: (self.address, (column,)),
            walk.newcomer: (walk.newcomer_address, (mirror,)),
        }
        outstanding: dict[int, str] = {}
        for dimension in range(hood.dimension - 1):
            base = hood.holder(column ^ (1 << dimension))
            ack = self._new_ack_id()
            outstanding[ack] = base
            self._send(
                base,
                hood.address_of(base),
                NeighbourUpdate(epoch=self._epoch, holders=update, relay=True, ack_id=ack),
            )
        self._take = PendingTake(
            walk.anchor, walk.anchor_address, walk.newcomer, walk.newcomer_incarnation, outstanding
        )
        if not outstanding:
            self._finish_take()

    def _finish_take(self) -> None:
        take = self._take
        assert take is not None
        self._take = None
        self._report_done(
            take.anchor, take.anchor_address, take.newcomer, take.newcomer_incarnation
        )

    def _on_neighbour_update(self, sender: str, message: NeighbourUpdate) -> None:
        hood = self._member_hood()
        for node, peer in peers_from_wire(message.holders).items():
            hood.claim(node, peer)
        if message.ack_id is not None and sender not in hood.peers:
            raise RemoteProtocolError(sender, f"{sender} is not a neighbour of {self.node_id}")
        if message.relay:
            base = min(hood.positions)
            if base >= top_bit(hood.dimension):
                raise RemoteProtocolError(
                    sender, f"relay asked of {self.node_id}, which holds no base position"
                )
            partner = hood.partner()
            mirror = base | top_bit(hood.dimension)
            changed = [p for _, held in message.holders.values() for p in held]
            if partner is not None and any(adjacent(mirror, p) for p in changed):
                assert message.ack_id is not None
                ack = self._new_ack_id()
                self._relays[ack] = (sender, hood.address_of(sender), message.ack_id, partner)
                self._send(
                    partner, hood.address_of(partner), replace(message, relay=False, ack_id=ack)
                )
                return
        if message.ack_id is not None:
            self._send(
                sender, hood.address_of(sender), UpdateAck(epoch=self._epoch, ack_id=message.ack_id)
            )

    def _release_joins_waiting_on(self, failed: str) -> None:
        """A failed neighbour will acknowledge nothing: the join steps waiting for it go on
        without it (its table is rebuilt by the repair, from the holders' current knowledge).
        Without this a member failing in the middle of a join wedges the join, and the repair
        that waits for the join."""
        for ack, (origin, address, their_ack, newcomer) in list(self._relays.items()):
            if failed in (origin, newcomer):
                del self._relays[ack]
                if failed == newcomer:
                    self._send(origin, address, UpdateAck(epoch=self._epoch, ack_id=their_ack))
        take = self._take
        if take is not None and failed in take.outstanding.values():
            take.outstanding = {a: b for a, b in take.outstanding.items() if b != failed}
            if not take.outstanding:
                self._finish_take()  # grows when ready
                return
        self._grow_when_ready()

    def _on_update_ack(self, sender: str, message: UpdateAck) -> None:
        if message.ack_id in self._relays:
            origin, address, their_ack, _ = self._relays.pop(message.ack_id)
            self._send(origin, address, UpdateAck(epoch=self._epoch, ack_id=their_ack))
            self._grow_when_ready()
        elif self._take is not None and message.ack_id in self._take.outstanding:
            del self._take.outstanding[message.ack_id]
            if not self._take.outstanding:
                self._finish_take()
        else:
            raise RemoteProtocolError(
                sender, f"acknowledges update {message.ack_id}, which {self.node_id} did not send"
            )

    def _on_join_done(self, sender: str, message: JoinDone) -> None:
        hood = self._member_hood()
        if self._anchor_position(hood) not in hood.positions:
            raise RemoteProtocolError(sender, f"{self.node_id} admitted no join to report on")
        self._join_done(message.newcomer, message.newcomer_incarnation)

    def _join_done(self, newcomer: str, incarnation: int) -> None:
        """The walk of ``newcomer``'s ``incarnation`` is over. Not one a later incarnation of
        it has since (``_duplicate`` lets a later one's walk through): the earlier walk's report,
        overtaken, would let the anchor grow while the later one's take is under way, and the
        grow meet a doubled column. (An unknown newcomer was admitted by an anchor that has
        failed since.)"""
        admitted = self._admitted.get(newcomer)
        if admitted is None or 0 < incarnation < admitted.incarnation:
            return
        del self._admitted[newcomer]
        self._grow_when_ready()

    def _grow_when_ready(self) -> None:
        """Takes a census of a full cube for the joins waiting here (``hypercup._census``) once
        no join is in flight, no take or relay of this node is unfinished, and no census is
        under way or found the cube busy since the last tick."""
        if (
            self._queued
            and not self._admitted
            and not self._changing_tables()
            and not self._census.paused
            and not self._census.asked_by(self.node_id)
        ):
            self._start_census(len(self._queued))

    def _census_taken(self, doubled: list[int], ready: bool, epoch: int) -> None:
        """The anchor's census of ``epoch`` is in: the waiting joins go to the doubled columns
        it found, one each; with none, the cube grows if nothing stood in the way; else the
        census is taken again at the next tick. The cube may have changed meanwhile: the joins
        that waited for a grow start over where it is no longer full."""
        if self._state is not NodeState.MEMBER or epoch != self._epoch or not self._queued:
            return
        hood = self._member_hood()
        anchor = self._anchor_position(hood)
        full = self._full(hood)
        if anchor not in hood.positions or not full:
            queued, self._queued = self._queued, []
            for walk in queued:
                self._restart_join(walk)
            return
        if self._admitted or self._changing_tables():
            return  # asked again when they are done
        columns = [column for column in doubled if column not in hood.positions]
        if columns:
            placed, self._queued = self._queued[: len(columns)], self._queued[len(columns) :]
            for column, walk in zip(columns, placed, strict=False):
                self._admitted[walk.newcomer] = Admitted(walk.newcomer_incarnation)
                self._advance_join(
                    replace(
                        walk,
                        phase=SEARCH,
                        position=column,
                        bit=-1,
                        admitted=True,
                        anchor=self.node_id,
                        anchor_address=self.address,
                    )
                )
            return
        if ready and self._census_of_self(hood)[2]:
            # (this node's own part again: a departure may have reached it while the census
            # was out)
            self._grow()
            return
        self._census.paused = True

    def _grow(self) -> None:
        """At the anchor of a full cube with no join in flight: broadcast ``Grow``, then restart
        the joins that waited."""
        hood = self._member_hood()
        grow = Grow(epoch=self._epoch + 1, dimension=hood.dimension + 1, root=min(hood.positions))
        self._forward_down(grow)
        self._apply(hood.grow, grow)

    def _on_grow(self, sender: str, message: Grow) -> None:
        hood = self._member_hood()
        # a grow of a cube of another dimension (a cube this node's epochs happen to match:
        # two sides of a cut, one that stood alone) may name a root outside this one
        fits = message.dimension == hood.dimension + 1 and message.root < 1 << hood.dimension
        parent = hood.view().parent(message.root) if fits else None
        if not fits or (parent != sender and not message.resent):
            raise RemoteProtocolError(
                sender,
                f"Grow to dimension {message.dimension} from {sender}, but {self.node_id} is in "
                f"dimension {hood.dimension} with parent {parent}",
            )
        # a resent one goes down the tree from here too: this node's subtree missed it as well
        self._forward_down(message)
        self._apply(hood.grow, message)
