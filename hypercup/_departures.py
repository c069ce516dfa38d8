"""Leaving, failure repair and shrinking the cube (see ``hypercup.node`` for the overview).

One walk serves both kinds of departure. It carries the departing node L's positions and peer
table, so the node holding the walk takes L's steps itself whenever the walk reaches one of L's
positions: L may be dead, and even when it is alive it only waits for ``Released``. The walk is
routed to position 0 (lowest differing bit first), then searches upward for the last split column:
for each bit from the highest down, set it if the column obtained that way is split.

Shrink. If column 0 is doubled, every column is (``k = 0``). The node holding the walk at position 0
broadcasts ``Shrink`` along the tree of position 0, for position 0's holder (itself, or L) and for L
wherever L sits in the tree: ``absent`` tells every other node to skip L, whose children are sent
to directly. The walk's copy of L's table is shrunk the same way and the walk goes on in the new
epoch; nodes that have not shrunk yet hold its messages back.

Failure. The repairer (defined in ``hypercup.node``) knows L's positions and the holders of some of
their neighbours (its own neighbours). For each other neighbour position it sends a ``Lookup``,
routed one dimension per hop toward that position but never through L: from any position at
distance >= 2 from the target two different neighbours are one step closer, and L holds at most
one of them (L's two positions differ in one bit, two such neighbours in two). The first node that
knows the holder answers. Then the repairer starts the walk for L.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from hypercup._core import NodeCore, NodeState, PendingRepair
from hypercup._neighbourhood import (
    KnowledgeError,
    Neighbourhood,
    Peer,
    merge_tables,
    peers_from_wire,
    peers_to_wire,
)
from hypercup.errors import RemoteProtocolError
from hypercup.events import Departed
from hypercup.messages import (
    ROUTE,
    SEARCH,
    LeaveWalk,
    Lookup,
    LookupReply,
    NeighbourUpdate,
    Reclaim,
    Released,
    ReturnTop,
    Shrink,
)
from hypercup.positions import (
    hamming,
    neighbour_positions,
    next_hop_position,
    surrounding_positions,
    top_bit,
)


def _leaver_hood(walk: LeaveWalk) -> Neighbourhood:
    """The departing node's knowledge, as the walk carries it."""
    return Neighbourhood(
        node_id=walk.leaver,
        address=walk.leaver_address,
        dimension=walk.dimension,
        positions=walk.leaver_positions,
        peers=peers_from_wire(walk.leaver_peers),
    )


class Departures(NodeCore):
    def _start_leave(self, incarnation: int, last_heard: float) -> None:
        """This member leaves: from now on it only waits for ``Released``."""
        hood = self._member_hood()
        walk = self._new_leave_walk(
            self.node_id, self.address, hood.positions, hood.peers, failed=False,
            incarnation=incarnation, last_heard=last_heard,
        )  # fmt: skip
        self._state = NodeState.LEAVING
        self._advance_leave(walk)

    def _new_leave_walk(
        self,
        leaver: str,
        address: str,
        positions: frozenset[int],
        peers: Mapping[str, Peer],
        *,
        failed: bool,
        incarnation: int,
        last_heard: float = 0.0,
    ) -> LeaveWalk:
        """The walk of a departure, starting at the leaver's lowest position."""
        return LeaveWalk(
            epoch=self._epoch,
            dimension=self._member_hood().dimension,
            leaver=leaver,
            leaver_address=address,
            leaver_positions=tuple(sorted(positions)),
            leaver_peers=peers_to_wire(peers),
            failed=failed,
            phase=ROUTE,
            position=min(positions),
            bit=-1,
            leaver_incarnation=incarnation,
            leaver_heard=last_heard,
        )

    def _on_leave_walk(self, sender: str, walk: LeaveWalk) -> None:
        if not walk.failed and walk.leaver in self._repairs_started:
            # the leaver was reported failed here (its walk was held up, by a cut) and this node
            # repairs its place already: a second departure of it would take a place twice
            return
        self._require_no_join(sender, walk)
        if walk.position not in self._member_hood().positions:
            raise RemoteProtocolError(
                sender, f"LeaveWalk for position {walk.position}, not held by {self.node_id}"
            )
        self._advance_leave(walk)

    def _walker(self, walk: LeaveWalk) -> Neighbourhood:
        """Whose knowledge the step at the walk's position uses: the departing node's or ours."""
        if walk.position in walk.leaver_positions:
            return _leaver_hood(walk)
        hood = self._member_hood()
        if walk.position not in hood.positions or walk.epoch != self._epoch:
            # the cube moved on under a walk this node took over (a cut-off member's view)
            raise KnowledgeError(
                f"{self.node_id} would step a walk at position {walk.position} of epoch "
                f"{walk.epoch}, holding {sorted(hood.positions)} at epoch {self._epoch}"
            )
        return hood

    def _advance_leave(self, walk: LeaveWalk) -> None:
        """Takes the walk's steps here (ours, and the departing node's) until it must go to
        another node or ends here."""
        while True:
            hood = self._walker(walk)
            if walk.phase == ROUTE:
                if walk.position != 0:
                    walk = replace(walk, position=next_hop_position(walk.position, 0))
                    if self._forward_leave(walk, hood):
                        return
                    continue
                if not hood.column_split(0):
                    walk = self._start_shrink(walk, hood)
                    continue
                walk = replace(walk, phase=SEARCH, bit=hood.dimension - 2)
            column = walk.position
            bit = walk.bit
            higher: int | None = None
            while bit >= 0:
                candidate = column | (1 << bit)
                bit -= 1
                if hood.column_split(candidate):
                    higher = candidate
                    break
            walk = replace(walk, bit=bit)
            if higher is None:
                self._end_leave_walk(walk, hood)
                return
            walk = replace(walk, position=higher)
            if self._forward_leave(walk, hood):
                return

    def _forward_leave(self, walk: LeaveWalk, hood: Neighbourhood) -> bool:
        """Sends the walk to the holder of its position, unless we take that step ourselves."""
        holder = hood.holder(walk.position)
        if holder in (self.node_id, walk.leaver):
            return False
        self._send(holder, hood.address_of(holder), walk)
        return True

    def _start_shrink(self, walk: LeaveWalk, hood: Neighbourhood) -> LeaveWalk:
        """Every column is doubled: broadcast ``Shrink`` from position 0, for its holder (us or the
        departing node) and for the departing node; the walk goes on in the smaller cube."""
        message = Shrink(
            epoch=walk.epoch + 1, dimension=walk.dimension - 1, root=0, absent=walk.leaver
        )
        leaver = _leaver_hood(walk)
        if hood.node_id != walk.leaver:
            self._shrink(message)
        for child in leaver.view().children(0):
            if child == self.node_id:
                self._shrink(message)
            else:
                self._send(child, leaver.address_of(child), message)
        leaver.shrink()
        return replace(
            walk,
            epoch=walk.epoch + 1,
            dimension=leaver.dimension,
            leaver_positions=tuple(sorted(leaver.positions)),
            leaver_peers=peers_to_wire(leaver.peers),
        )

    def _on_shrink(self, sender: str, message: Shrink) -> None:
        hood = self._member_hood()
        parent = hood.view().parent(message.root)
        expected = parent in (sender, message.absent) or message.resent
        if message.dimension != hood.dimension - 1 or not expected:
            raise RemoteProtocolError(
                sender,
                f"Shrink to dimension {message.dimension} from {sender}, but {self.node_id} is in "
                f"dimension {hood.dimension} with parent {parent}",
            )
        self._require_no_join(sender, message)
        self._shrink(message)

    def _shrink(self, message: Shrink) -> None:
        self._forward_down(message, skip=message.absent)
        self._apply(self._member_hood().shrink, message)

    def _end_leave_walk(self, walk: LeaveWalk, hood: Neighbourhood) -> None:
        """At the last split column: its newcomer takes the departing node's place."""
        column = walk.position
        mirror = column | top_bit(walk.dimension)
        base = hood.holder(column)
        newcomer = hood.holder(mirror)
        if newcomer == walk.leaver:
            if base != self.node_id:
                # the walk's picture of the cube and ours differ (crossed by a rejoin)
                raise KnowledgeError(
                    f"{self.node_id} ends {walk.leaver}'s departure at column {column}, "
                    f"which {base} holds"
                )
            self._take_back(mirror, peers_from_wire(walk.leaver_peers), exclude={walk.leaver})
            self._out.append(
                Departed(
                    node=walk.leaver,
                    positions=walk.leaver_positions,
                    failed=walk.failed,
                    incarnation=walk.leaver_incarnation,
                    last_heard=walk.leaver_heard,
                )
            )
            if not walk.failed:
                self._send(walk.leaver, walk.leaver_address, Released())
            return
        reclaim = Reclaim(
            epoch=walk.epoch,
            dimension=walk.dimension,
            column=column,
            base_holder=base,
            base_address=hood.address_of(base),
            leaver=walk.leaver,
            leaver_address=walk.leaver_address,
            leaver_positions=walk.leaver_positions,
            leaver_peers=walk.leaver_peers,
            failed=walk.failed,
            leaver_incarnation=walk.leaver_incarnation,
            leaver_heard=walk.leaver_heard,
        )
        if newcomer == self.node_id:
            self._on_reclaim(self.node_id, reclaim)
        else:
            self._send(newcomer, hood.address_of(newcomer), reclaim)

    def _take_back(self, mirror: int, donor: dict[str, Peer], exclude: set[str]) -> None:
        """Our column's mirror is ours again; ``donor`` is its last holder's peer table. We
        announce it to every neighbour but ``exclude``."""
        hood = self._member_hood()
        before = hood.addresses()
        hood.replace(hood.positions | {mirror}, merge_tables(hood.peers, donor))
        self._announce(before, exclude=exclude)

    def _on_reclaim(self, sender: str, message: Reclaim) -> None:
        self._require_no_join(sender, message)
        hood = self._member_hood()
        mirror = message.column | top_bit(message.dimension)
        if message.dimension != hood.dimension or hood.positions != {mirror}:
            raise RemoteProtocolError(
                sender,
                f"Reclaim of the mirror {mirror} in dimension {message.dimension}, but "
                f"{self.node_id} holds {sorted(hood.positions)} in dimension {hood.dimension}",
            )
        before = hood.addresses()
        departed = peers_from_wire(message.leaver_peers)
        if message.base_holder == message.leaver:
            hood.replace({message.column, mirror}, merge_tables(hood.peers, departed))
        else:
            self._send(
                message.base_holder,
                message.base_address,
                ReturnTop(
                    epoch=self._epoch,
                    column=message.column,
                    leaver=message.leaver,
                    peers=hood.to_wire(),
                ),
            )
            departed[message.base_holder] = Peer(
                message.base_address, frozenset({message.column, mirror})
            )
            hood.replace(message.leaver_positions, departed)
        self._announce(before, exclude={message.leaver})
        self._out.append(
            Departed(
                node=message.leaver,
                positions=message.leaver_positions,
                failed=message.failed,
                incarnation=message.leaver_incarnation,
                last_heard=message.leaver_heard,
            )
        )
        if not message.failed:
            self._send(message.leaver, message.leaver_address, Released())

    def _on_return_top(self, sender: str, message: ReturnTop) -> None:
        self._require_no_join(sender, message)
        hood = self._member_hood()
        mirror = message.column | top_bit(hood.dimension)
        if hood.positions != {message.column} or hood.holder(mirror) != sender:
            raise RemoteProtocolError(
                sender, f"returns the mirror {mirror}, which {sender} does not hold next to us"
            )
        self._take_back(mirror, peers_from_wire(message.peers), exclude={message.leaver, sender})

    def _announce(self, before: dict[str, str], exclude: set[str]) -> None:
        """Tells every neighbour, old and new, what this node now holds."""
        hood = self._member_hood()
        addresses = before | hood.addresses()
        update = NeighbourUpdate(
            epoch=self._epoch,
            holders={self.node_id: (self.address, tuple(sorted(hood.positions)))},
            relay=False,
            ack_id=None,
        )
        for node in sorted(set(addresses) - exclude - {self.node_id}):
            self._send(node, addresses[node], update)

    # -- failures -----------------------------------------------------------------------------

    def _last_one_standing(self) -> bool:
        """Whether every other position of the cube is held, as far as this node knows, by a
        neighbour the runtime reported failed (a small cube cut apart, or two failures that
        overlap in it): no repair can finish, since each one waits on a failed node (a lookup
        routed through it, a ``Reclaim`` sent to it), and one departure at a time would leave
        this node wedged until the runtime's watchdog gives up on it."""
        hood = self._member_hood()
        if not hood.peers or not set(hood.peers) <= set(self._failed):
            return False
        known = set(hood.positions).union(*(peer.positions for peer in hood.peers.values()))
        return known >= set(range(1 << hood.dimension))

    def _stand_alone(self) -> None:
        """This node is the last one standing: it keeps position 0 of a cube of dimension 0 (a
        new epoch, so that what the old cube still has in flight is dropped or refused) and
        reports every failed neighbour ``Departed``, as their repairs would have. What it was
        in the middle of is dropped: each step of it waited on a failed node. If the failed
        ones were only cut off, the two cubes meet when the cut heals (``superpeer._merging``)."""
        hood = self._member_hood()
        departed = sorted(hood.peers.items())
        self._repair = None
        self._take = None
        self._relays = {}
        self._admitted.clear()
        self._held_back = []
        queued, self._queued = self._queued, []
        self._hood = Neighbourhood(
            node_id=self.node_id, address=self.address, dimension=0, positions={0}, peers={}
        )
        self._epoch += 1
        for walk in queued:
            self._restart_join(walk)
        for node, peer in departed:
            incarnation, last_heard = self._failed.get(node, (0, 0.0))
            self._out.append(
                Departed(
                    node=node,
                    positions=tuple(sorted(peer.positions)),
                    failed=True,
                    incarnation=incarnation,
                    last_heard=last_heard,
                )
            )

    def _start_repair(self, failed: str, incarnation: int, last_heard: float = 0.0) -> None:
        """We repair the failure of ``failed`` (its ``incarnation``, 0 if not known): find the
        holders around it, then walk for it."""
        hood = self._member_hood()
        lost = hood.peers[failed].positions
        found: dict[str, Peer] = {}
        missing: set[int] = set()
        for position in surrounding_positions(lost, hood.dimension):
            if position in hood.positions:
                found[self.node_id] = Peer(self.address, hood.positions)
            elif position in hood.holders:
                holder = hood.holders[position]
                found[holder] = hood.peers[holder]
            else:
                missing.add(position)
        self._repair = PendingRepair(
            failed, hood.peers[failed].address, lost, found, missing, incarnation, last_heard
        )
        for position in sorted(missing):
            self._route_lookup(
                Lookup(
                    epoch=self._epoch,
                    target=position,
                    avoid=failed,
                    requester=self.node_id,
                    requester_address=self.address,
                )
            )
        if not missing:
            self._finish_repair()

    def _route_lookup(self, lookup: Lookup) -> None:
        """Answers if we know who holds the target, else passes the lookup one hop closer to it,
        never through the failed node."""
        hood = self._member_hood()
        target = lookup.target
        if target in hood.positions or target in hood.holders:
            holder = hood.holder(target)
            reply = LookupReply(
                epoch=self._epoch,
                target=target,
                holder=holder,
                address=hood.address_of(holder),
                positions=tuple(sorted(hood.positions_of(holder))),
            )
            self._send(lookup.requester, lookup.requester_address, reply)
            return
        hops = sorted(
            (hamming(q, target), q)
            for p in hood.positions
            for q in neighbour_positions(p, hood.dimension)
            if q not in hood.positions
            and hamming(q, target) < hamming(p, target)
            and hood.holder(q) != lookup.avoid
        )
        if not hops:
            raise KnowledgeError(f"{self.node_id} has no way to {target} around {lookup.avoid}")
        holder = hood.holder(hops[0][1])
        self._send(holder, hood.address_of(holder), lookup)

    def _on_lookup_reply(self, sender: str, reply: LookupReply) -> None:
        repair = self._repair
        if repair is None or reply.target not in repair.missing:
            raise RemoteProtocolError(
                sender, f"answers a lookup of {reply.target} nobody asked for"
            )
        peer = Peer(reply.address, frozenset(reply.positions))
        if repair.found.setdefault(reply.holder, peer) != peer:
            raise RemoteProtocolError(sender, f"contradicts what is known of {reply.holder}")
        repair.missing.remove(reply.target)
        if not repair.missing:
            self._finish_repair()

    def _finish_repair(self) -> None:
        repair = self._repair
        assert repair is not None
        self._repair = None
        self._advance_leave(
            self._new_leave_walk(
                repair.failed,
                repair.failed_address,
                repair.positions,
                repair.found,
                failed=True,
                incarnation=repair.incarnation,
                last_heard=repair.last_heard,
            )
        )
