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

Overlapping failures. Two neighbours that fail together (or a failure during a departure) must
not wait on each other: each one's repair would send a step to the other (a walk routed through
it, a ``Reclaim`` to it as the newcomer that takes the other's place), and the step would be lost
with it. So nothing that a departure needs is sent to a member known to have failed:

* *Who knows.* A node knows its own neighbours the runtime reported failed; a lookup's answer says
  whether its answerer knows the holder failed (``LookupReply.failed``); a walk carries what the
  nodes on its way know (``LeaveWalk.failed_too``), so that a node taking a failed node's step
  with the table the walk carries knows which of that node's neighbours are dead.
* *Routing around.* Toward position 0 a walk clears any set bit of its position whose holder is
  not known failed (the lowest one first, as before); lookups are passed on only to neighbours not
  known failed (when there is one closer to the target), else through the live neighbour
  nearest the target, away from it (a detour: at most the cube's dimension of them), never to
  a member it passed (``Lookup.visited``), so that a member next to the target answers; a lookup
  with no way left, or one that reaches a leaver, is dropped and asked again.
* *Standing in.* The search's step at the column of a failed member is taken by the node that
  would have sent it there, from what it and the walk know of the columns above (``StandIn``);
  where a fact is missing, or the search would end at that column, the walk passes over it,
  is handed on, waits or goes on as below. (Not on the way to position 0: a member cut off by
  a partition is "failed" too, and standing in for it there left one side with a member in a
  view of the cube gone by.)
* *Passing over.* A search that would end at the column of a failed base holder (the last
  split column; its newcomer alive) ends at the split column below instead: that base holder
  cannot take its mirror back, and its own departure may be waiting on this one (its walk
  routes to position 0, whose holder is the node departing now: a kill and a pause together
  wedged both until the watchdog). Its own departure, after, ends at its column, whose
  newcomer takes it back: the cube is the one the two departures in the other order make.
* *Handing on.* A step at a failed member's position that the node holding the walk cannot
  take (a fact is missing) and cannot wait for (the failed member is not its neighbour) goes
  to a live neighbour of the failed member instead of to the failed member, where it would be
  lost. That neighbour knows more of the failed member's neighbourhood: it stands in for it
  with its own table, and waits there for its replacement if it still cannot take the step
  (a neighbour never hands on again).
* *Asking again.* A lookup passed to a member that failed (or was paused) before anyone knew is
  lost: a repair whose lookups are not all answered after ``DEFERRED_TICKS`` ticks sends the
  missing ones again, routed around the members known failed by then; an answer for no
  pending lookup (twice, after the repair ended, or to an earlier holder of this node's
  name) is dropped. Answers that say two
  things of one holder (its positions changed while the lookups were out: a repair or a take
  beside this one) start the repair over once (``REPAIR_RESTARTS``), from what this node knows
  by then; a second contradiction breaks the node as before. Bounded, because two members
  whose tables disagree can answer every new round differently (unbounded, that was a storm
  of lookups at network speed in the simulator).
* *Waiting.* A step that can only go to a failed neighbour (the newcomer of the last split
  column, the next column of the search, every way toward 0) waits here until that neighbour
  has been replaced (it is no longer in this node's table), at most ``DEFERRED_TICKS``; then the
  walk starts over from this node's position, with the departing node's table brought up to
  date from this node's (what it said of the replaced neighbour is stale). Two failed
  neighbours thus depart one after the other.
* *A whole column.* A failed base holder's repair carries its failed newcomer (``carried``): if
  the walk ends at that column, the two depart together, to the split column below.
* *One column at a time.* A base holder that sent a ``Reclaim`` holds other departures until its
  mirror is back (``_reclaiming``), and starts no repair meanwhile (the ``ReturnTop`` would
  wait behind the repair, overtaken by the newcomer's announcement of the place it took, and
  the mirror be taken back with a table that contradicts it); a search that ends at a column
  found doubled there (it read an older picture) starts again from there.
* *Once.* A repair may run twice (the runtime's fallback lets another neighbour repair when the
  first stays silent, or while a departure held the first back): a walk for a failed node whose
  place this node knows to be taken already (next to its own positions, or from a neighbour
  that announced holding it) is dropped, the departing node's neighbours (the
  repairer among them) are told who holds it, and its holders what the repairer holds (they may
  never have heard); a repair whose failed node was replaced while its lookups were out ends
  there; and where a walk ends, another repairer's walk for the same failure (``repairer``)
  is dropped for ``DEFERRED_TICKS`` ticks (both searches lead to one column).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Literal

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
    PeerTable,
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

DEFERRED_TICKS = 2
"""Ticks of the runtime (``failure_seconds`` each) a departure waits at most for a failed
neighbour's replacement (``Departures._expire_deferred``)."""
REPAIR_RESTARTS = 1
"""How often a repair starts over on lookup answers that contradict each other
(``Departures._contradicted``) before the node breaks and rejoins."""


def _leaver_hood(walk: LeaveWalk) -> Neighbourhood:
    """The departing node's knowledge, as the walk carries it."""
    return Neighbourhood(
        node_id=walk.leaver,
        address=walk.leaver_address,
        dimension=walk.dimension,
        positions=walk.leaver_positions,
        peers=peers_from_wire(walk.leaver_peers),
    )


class StandIn:
    """A failed node's neighbourhood as far as other nodes' tables tell it, for the walk's steps
    at its positions (``Departures._stand_in``): it answers what a ``Neighbourhood`` answers
    where one of ``sources`` knows, and raises ``KnowledgeError`` where none does."""

    def __init__(
        self,
        node_id: str,
        address: str,
        positions: frozenset[int],
        walk: LeaveWalk,
        sources: tuple[Neighbourhood, ...],
    ) -> None:
        self.node_id = node_id
        self.address = address
        self.positions = positions
        self.dimension = walk.dimension
        self._walk = walk
        self._sources = sources

    def holder(self, position: int) -> str:
        if position in self.positions:
            return self.node_id
        for source in self._sources:
            if position in source.positions or position in source.holders:
                return source.holder(position)
        raise KnowledgeError(f"nobody here knows who holds position {position}")

    def address_of(self, node: str) -> str:
        if node == self.node_id:
            return self.address
        for source in self._sources:
            if node == source.node_id or node in source.peers:
                return source.address_of(node)
        raise KnowledgeError(f"nobody here knows where {node} is")

    def positions_of(self, node: str) -> frozenset[int]:
        if node == self.node_id:
            return self.positions
        if node == self._walk.leaver:
            return frozenset(self._walk.leaver_positions)
        for source in self._sources:
            if node == source.node_id or node in source.peers:
                return source.positions_of(node)
        raise KnowledgeError(f"nobody here knows what {node} holds")

    def column_split(self, column: int) -> bool:
        mirror = column | top_bit(self.dimension)
        return mirror not in self.positions_of(self.holder(column))


class ColumnEnd(KnowledgeError):
    """The search would end at the column of the failed node a walk stands in for."""


Hood = Neighbourhood | StandIn
"""Whose knowledge a walk's step uses."""


def _split(walk: LeaveWalk, hood: Hood, column: int) -> bool:
    """``hood.column_split``, but the departing node's column as the walk has it: a failed
    newcomer it carries makes it doubled (``_carry_partner``)."""
    if hood.holder(column) == walk.leaver:
        return column | top_bit(walk.dimension) not in walk.leaver_positions
    return hood.column_split(column)


def _waited_out(ticks: int) -> bool:
    """Whether a wait here (a deferred walk, a base holder's reclaim) has seen enough ticks,
    the one now counted included: one rule for every wait of a departure on another."""
    return ticks >= DEFERRED_TICKS


def _known_better(
    table: Mapping[str, Peer], hood: Neighbourhood, positions: Iterable[int]
) -> dict[str, Peer]:
    """``table`` (a departing node's, as a walk or a ``Reclaim`` carries it) with what ``hood``
    knows of ``positions`` put over it: a node's own neighbours, and every position they hold,
    are the freshest it knows (each change of them is announced to it), while the carried
    table was gathered when the repair
    began, and a departure next to it may have finished since (two neighbours failing
    together: the second one's table still names the first)."""
    better = dict(table)
    for position in sorted(positions):
        if position in hood.positions:
            holder, peer = hood.node_id, Peer(hood.address, hood.positions)
        elif position in hood.holders:
            holder = hood.holders[position]
            peer = hood.peers[holder]
        else:
            # a position beyond our neighbour positions that a neighbour of ours holds too,
            # as it announced its positions to us
            claimants = [node for node, known in hood.peers.items() if position in known.positions]
            if len(claimants) != 1:
                continue
            (holder,) = claimants
            peer = hood.peers[holder]
        for node, known in list(better.items()):
            if node != holder and position in known.positions:
                rest = known.positions - {position}
                if rest:
                    better[node] = Peer(known.address, rest)
                else:
                    del better[node]
        better[holder] = peer
    return better


def _carried_fields(carried: Departed | None) -> dict[str, object]:
    """A carried departure as the fields of a ``LeaveWalk`` or ``Reclaim``."""
    if carried is None:
        return {}
    return {
        "carried": carried.node,
        "carried_positions": carried.positions,
        "carried_incarnation": carried.incarnation,
        "carried_heard": carried.last_heard,
    }


def _departures(message: LeaveWalk | Reclaim) -> list[Departed]:
    """What taking the place named by a walk or a ``Reclaim`` reports: the leaver's departure,
    and the one of the failed node it carries, if the walk took that one's position too
    (``Departures._with_carried``)."""
    carried = frozenset(message.carried_positions)
    departed = [
        Departed(
            node=message.leaver,
            positions=tuple(p for p in message.leaver_positions if p not in carried),
            failed=message.failed,
            incarnation=message.leaver_incarnation,
            last_heard=message.leaver_heard,
        )
    ]
    if message.carried and carried <= frozenset(message.leaver_positions):
        departed.append(
            Departed(
                node=message.carried,
                positions=message.carried_positions,
                failed=True,
                incarnation=message.carried_incarnation,
                last_heard=message.carried_heard,
            )
        )
    return departed


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
        failed_too: frozenset[str] = frozenset(),
        carried: Departed | None = None,
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
            repairer=self.node_id if failed else "",
            failed_too=tuple((failed_too | set(self._failed)) - {leaver}),
            **_carried_fields(carried),
        )

    def _on_leave_walk(self, sender: str, walk: LeaveWalk) -> None:
        if not walk.failed and walk.leaver in self._repairs_started:
            # the leaver was reported failed here (its walk was held up, by a cut) and this node
            # repairs its place already: a second departure of it would take a place twice
            return
        self._require_no_join(sender, walk)
        if walk.failed and self._place(walk) == "taken":
            self._correct_stale(walk)
            return
        if walk.position not in self._member_hood().positions:
            if self._stand_in_handed(walk):
                return
            raise RemoteProtocolError(
                sender, f"LeaveWalk for position {walk.position}, not held by {self.node_id}"
            )
        self._advance_leave(walk)

    def _place(self, walk: LeaveWalk) -> Literal["taken", "held", "unknown"]:
        """What this node knows of the failed departing node's positions: ``"taken"`` (one of
        them is held by another node already: a second repair of one failure, dropped so that
        the place is taken once), ``"held"`` (every one it knows is the departing node's still)
        or ``"unknown"`` (it knows none of them)."""
        if self._other_holders(walk):
            return "taken"
        hood = self._member_hood()
        known = [p for p in walk.leaver_positions if p in hood.positions or p in hood.holders]
        return "held" if known else "unknown"

    def _other_holders(self, walk: LeaveWalk) -> dict[str, Peer]:
        """The nodes but the departing one that this node knows to hold one of its positions:
        itself, and the neighbours that announced holding one, next to our positions or not (a
        neighbour announces every position it holds). Not only the ones next to ours: a search
        turns from a column that it reads doubled, and the node that reads it so knows its
        base holder's mirror, which may be the failed node's place, taken back by the first of
        two repairs of one failure (a fallback repairer's walk begun beside the designated
        one's). Let on, the second search ended at the split column below, whose newcomer took
        the place a second time (pair at 32, seed 11: rejoins for minutes)."""
        hood = self._member_hood()
        place = frozenset(walk.leaver_positions)
        others = {
            node: peer
            for node, peer in hood.peers.items()
            if node != walk.leaver and peer.positions & place
        }
        if hood.positions & place:
            others[self.node_id] = Peer(self.address, frozenset(hood.positions))
        return others

    def _another_repair(self, walk: LeaveWalk) -> bool:
        """Whether ``walk``, about to end here, repairs a failure whose repair by another member
        ended here lately: then it is dropped, since the two would take the place twice (a
        fallback repairer's walk begun beside the designated one's, neither knowing yet that
        the other's ended; both searches lead to the same column). Otherwise it is noted, for
        ``DEFERRED_TICKS`` ticks. A walk of the same repairer goes on: it tries again after
        its first was lost further on (a ``Reclaim`` sent to a member that failed)."""
        if not (walk.failed and walk.repairer):
            return False
        noted = self._repairers.get(walk.leaver)
        if noted is not None and noted[0] != walk.repairer:
            return True
        self._repairers[walk.leaver] = (walk.repairer, 0)
        return False

    def _expire_repairers(self) -> None:
        self._repairers = {
            leaver: (repairer, ticks + 1)
            for leaver, (repairer, ticks) in self._repairers.items()
            if not _waited_out(ticks + 1)
        }

    def _correct_stale(self, walk: LeaveWalk) -> None:
        """A repair of a place taken already was started on a stale table: the repairer (one of
        the departing node's neighbours, as the walk names them) missed the announcement of
        whoever took it (it went to a node that failed too, or crossed its own departure's).
        Each of them hears who holds the departed node's positions now, as this node knows it;
        a node that knows better, or that is no neighbour of those, changes nothing. And the
        holders hear what the repairer holds now (its own entry in the table it sent is
        fresh): it may have taken a place next to theirs that they were never told of, the
        announcement having gone to the stale neighbour, and they would repair that place as
        a failure of its old holder, a second time. (Not when the walk comes back to its own
        repairer: its entry in the walk is from when the walk began, and this node may have
        taken a place since; what it holds now is told instead, else a holder next to that
        place learnt it held less than it does: kill-pause at 8, seed 11.)"""
        hood = self._member_hood()
        holders = {
            holder: (peer.address, tuple(sorted(peer.positions)))
            for holder, peer in self._other_holders(walk).items()
        }
        update = NeighbourUpdate(epoch=self._epoch, holders=holders, relay=False, ack_id=None)
        for node, (address, _) in sorted(walk.leaver_peers.items()):
            if node not in holders and node not in (self.node_id, walk.leaver):
                self._send(node, address, update)
        repairer = (
            (self.address, tuple(sorted(hood.positions)))
            if walk.repairer == self.node_id
            else walk.leaver_peers.get(walk.repairer)
        )
        if repairer is not None:
            told = NeighbourUpdate(
                epoch=self._epoch, holders={walk.repairer: repairer}, relay=False, ack_id=None
            )
            for holder, (address, _) in sorted(holders.items()):
                if holder not in (self.node_id, walk.repairer):
                    self._send(holder, address, told)

    def _known_failed(self, walk: LeaveWalk) -> set[str]:
        return (set(self._failed) | set(walk.failed_too)) - {walk.leaver, self.node_id}

    def _toward_zero(self, walk: LeaveWalk, hood: Neighbourhood) -> int | None:
        """The walk's next position toward 0: the lowest set bit cleared, unless its holder is
        known failed, then the next one; None if every way goes through a failed node."""
        failed = self._known_failed(walk)
        position = walk.position
        first = next_hop_position(position, 0)
        ways = [first] + [
            position ^ (1 << bit)
            for bit in range(hood.dimension)
            if position >> bit & 1 and position ^ (1 << bit) != first
        ]
        for way in ways:
            if hood.holder(way) not in failed:
                return way
        return None

    def _defer(self, walk: LeaveWalk, blocker: str) -> bool:
        """The walk's next step is for ``blocker``, known failed: it waits here until the
        blocker has been replaced, if this node will see that (the blocker is its neighbour).
        False: it cannot wait here, and the step is sent as before."""
        if blocker not in self._member_hood().peers:
            return False
        if any(waiting.leaver == walk.leaver for _, waiting, _ in self._deferred):
            return True  # another repair of the same departure waits here already
        gathered = replace(walk, failed_too=tuple(self._known_failed(walk) | {blocker}))
        self._deferred.append((blocker, gathered, 0))
        return True

    def _expire_reclaiming(self) -> None:
        """The mirror this base holder waits for has not come back in a tick or two: the
        departures held behind it go on."""
        if self._reclaiming is None:
            return
        self._reclaiming_ticks += 1
        if _waited_out(self._reclaiming_ticks):
            self._reclaiming = None
            self._flush()

    def _expire_deferred(self) -> None:
        """A walk that waited ``DEFERRED_TICKS`` ticks for a failed neighbour's replacement is
        dropped: that replacement waits on something else, and by now the runtime's fallback
        lets another neighbour repair (or the repairer tries again) with what is known now; a
        walk resumed later would take a place that such a repair may have taken already."""
        self._deferred = [
            (blocker, walk, ticks + 1)
            for blocker, walk, ticks in self._deferred
            if not _waited_out(ticks + 1)
        ]

    def _resume_deferred(self) -> None:
        """Starts over, from this node's position, the walks whose failed blocker has been
        replaced since they began to wait here."""
        hood = self._member_hood()
        waiting, self._deferred = self._deferred, []
        for blocker, walk, ticks in waiting:
            if blocker in hood.peers and walk.epoch == self._epoch:
                self._deferred.append((blocker, walk, ticks))
                continue
            if walk.epoch != self._epoch or (walk.failed and self._place(walk) != "held"):
                # the cube changed dimension under it (the runtime repairs the failure again),
                # or another repair of the same failure took the place, or this node cannot
                # tell (the repairer tries again, with what is known then)
                continue
            restarted = replace(
                walk,
                leaver_peers=self._brought_up_to_date(walk),
                failed_too=tuple(self._known_failed(walk) - {blocker}),
                phase=ROUTE,
                position=min(hood.positions),
                bit=-1,
            )
            self._guarded(walk.leaver, lambda restarted=restarted: self._advance_leave(restarted))

    def _brought_up_to_date(self, walk: LeaveWalk) -> PeerTable:
        """The departing node's table, with what this node knows of the positions around the
        departing node's put over what the walk carried (a neighbour of it replaced while the
        walk waited, or a place next to it taken since its repair looked it up). A leaver ending
        its own walk knows its table as the walk does."""
        hood = self._hood
        assert hood is not None, "only a member or a leaver steps a walk"
        around = surrounding_positions(frozenset(walk.leaver_positions), walk.dimension)
        return peers_to_wire(_known_better(peers_from_wire(walk.leaver_peers), hood, around))

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
        """Takes the walk's steps here (ours, the departing node's, and those of failed nodes
        this node can stand in for) until it must go to another node or ends here."""
        self._advance_from(walk, self._walker(walk))

    def _advance_from(self, walk: LeaveWalk, hood: Hood) -> None:
        """``_advance_leave`` from a step with ``hood``'s knowledge: this node's, the departing
        node's, or a failed node's it was handed on (``_stand_in_handed``)."""
        entered: tuple[LeaveWalk, StandIn, Hood | None] | None = None
        """The walk as it reached the failed node this node stands in for, that node, and whose
        knowledge took the step before (None: another node's, which handed the walk on)."""
        if isinstance(hood, StandIn):
            entered = (walk, hood, None)
        while True:
            try:
                moved = self._step(walk, hood)
            except KnowledgeError as error:
                if entered is None:
                    raise
                walk, stand_in, before = entered
                if isinstance(error, ColumnEnd) and self._passable(walk, stand_in):
                    # the failed base holder of the last split column: the search ends at the
                    # split column below (the module docstring, "Passing over")
                    walk = replace(walk, position=walk.position & ~(1 << (walk.bit + 1)))
                    moved = (
                        (walk, before) if before is not None else self._next_hood(walk, stand_in)
                    )
                elif self._defer(walk, stand_in.node_id) or self._hand_on(walk, stand_in):
                    return
                else:
                    # a fact about the failed node's neighbourhood is not known here, or its
                    # step would end the walk: the walk goes to it as before (and the repairer
                    # tries again: ``RETRY_REPAIR``)
                    self._send_walk(stand_in.node_id, stand_in.address, walk)
                    return
            if moved is None:
                return
            previous, (walk, hood) = hood, moved
            entered = (walk, hood, previous) if isinstance(hood, StandIn) else None

    def _hand_on(self, walk: LeaveWalk, failed: StandIn) -> bool:
        """A step at ``failed``'s position that this node, not its neighbour, cannot take: it
        goes to a live neighbour of it known here, which knows more of its neighbourhood (and
        can wait there for its replacement): the module docstring, "Handing on". False if
        none is known."""
        dead = self._known_failed(walk) | {walk.leaver, self.node_id, failed.node_id}
        around = sorted(surrounding_positions(failed.positions, walk.dimension))
        for position in around:
            try:
                holder = failed.holder(position)
            except KnowledgeError:
                continue
            if holder not in dead:
                self._send_walk(holder, failed.address_of(holder), walk)
                return True
        return False

    def _stand_in_handed(self, walk: LeaveWalk) -> bool:
        """A walk handed on to this node for a failed neighbour's step (``_hand_on``): taken
        here, with what this node knows of it. False if the walk's position is not a failed
        neighbour's here."""
        hood = self._member_hood()
        holder = hood.holders.get(walk.position)
        if walk.phase != SEARCH or walk.epoch != self._epoch or holder is None:
            return False
        if holder not in self._known_failed(walk):
            return False
        stand_in = self._stand_in(walk, holder)
        if stand_in is None:
            return False
        self._advance_from(walk, stand_in)
        return True

    def _passable(self, walk: LeaveWalk, failed: StandIn) -> bool:
        """Whether the search may pass over ``failed``'s column, where it would end: the
        column's newcomer is known here and not known failed (a failed newcomer departs with
        its base: ``_carry_partner``)."""
        mirror = walk.position | top_bit(walk.dimension)
        try:
            newcomer = failed.holder(mirror)
        except KnowledgeError:
            return False
        return newcomer != walk.leaver and newcomer not in self._known_failed(walk)

    def _step(self, walk: LeaveWalk, hood: Hood) -> tuple[LeaveWalk, Hood] | None:
        """One step of the walk with ``hood``'s knowledge: the walk and whose knowledge the next
        step uses, or None once the walk went on to another node or ended here."""
        standing_in = isinstance(hood, StandIn)
        if walk.phase == ROUTE:
            if walk.position != 0:
                way = self._toward_zero(walk, hood)
                walk = replace(
                    walk, position=next_hop_position(walk.position, 0) if way is None else way
                )
                return self._next_hood(walk, hood)
            if not _split(walk, hood, 0):
                if standing_in:
                    raise KnowledgeError("a shrink from a failed node's place")
                assert isinstance(hood, Neighbourhood)
                walk = self._start_shrink(walk, hood)
                return walk, self._walker(walk)
            walk = replace(walk, phase=SEARCH, bit=hood.dimension - 2)
        column = walk.position
        bit = walk.bit
        higher: int | None = None
        while bit >= 0:
            candidate = column | (1 << bit)
            bit -= 1
            if _split(walk, hood, candidate):
                higher = candidate
                break
        walk = replace(walk, bit=bit)
        if higher is None:
            if standing_in:
                # the column of a failed base holder, which cannot take its mirror back
                raise ColumnEnd("the walk ends at a failed node's column")
            assert isinstance(hood, Neighbourhood)
            whole = self._with_carried(walk, hood)
            if whole is None:
                self._end_leave_walk(walk, hood)
                return None
            return whole, self._walker(whole)
        walk = replace(walk, position=higher)
        return self._next_hood(walk, hood)

    def _next_hood(self, walk: LeaveWalk, hood: Hood) -> tuple[LeaveWalk, Hood] | None:
        """Who takes the walk's next step: this node, with its knowledge, the departing node's,
        or what it knows of a failed node's; otherwise the walk goes on to the holder of its
        position (or waits here for a failed holder's replacement), and this returns None."""
        holder = hood.holder(walk.position)
        if holder in (self.node_id, walk.leaver):
            return walk, self._walker(walk)
        if holder in self._known_failed(walk):
            # a stand-in only while searching, not on the way to 0 (the module docstring,
            # "Standing in")
            standing_in = self._stand_in(walk, holder) if walk.phase == SEARCH else None
            if standing_in is not None:
                return walk, standing_in
            if self._defer(walk, holder):
                return None
        self._send_walk(holder, hood.address_of(holder), walk)
        return None

    def _send_walk(self, to: str, address: str, walk: LeaveWalk) -> None:
        """The walk goes on to ``to``, with what this node knows of failed members."""
        self._send(to, address, replace(walk, failed_too=tuple(self._known_failed(walk))))

    def _stand_in(self, walk: LeaveWalk, failed: str) -> StandIn | None:
        """What is known here of ``failed``'s neighbourhood (this node's table and the departing
        node's, as the walk carries it), so that this node takes the step at its position
        instead of sending the walk to it, where it would be lost. None if not even its
        positions are known here."""
        sources = (self._member_hood(), _leaver_hood(walk))
        held = next((source for source in sources if failed in source.peers), None)
        if held is None:
            return None
        peer = held.peers[failed]
        return StandIn(failed, peer.address, peer.positions, walk, sources)

    @staticmethod
    def _with_carried(walk: LeaveWalk, hood: Neighbourhood) -> LeaveWalk | None:
        """A walk that ends at the departing node's own column, whose newcomer it carries
        (failed too): the whole column departs, so the walk starts over from there with the
        departing node holding both positions; the search then ends at the split column
        below, whose newcomer takes the two. None for any other end."""
        column = walk.position
        mirror = column | top_bit(walk.dimension)
        if (
            not walk.carried
            or walk.carried_positions != (mirror,)
            or hood.holder(column) != walk.leaver
            or hood.holder(mirror) != walk.carried
        ):
            return None
        table = peers_from_wire(walk.leaver_peers)
        table.pop(walk.carried, None)
        return replace(
            walk,
            leaver_positions=tuple(sorted({*walk.leaver_positions, mirror})),
            leaver_peers=peers_to_wire(table),
            phase=ROUTE,
            position=column,
            bit=-1,
        )

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
        # (as for a grow: one of another cube may name a root outside this one)
        fits = message.dimension == hood.dimension - 1 and message.root < 1 << hood.dimension
        parent = hood.view().parent(message.root) if fits else None
        expected = parent in (sender, message.absent) or message.resent
        if not fits or not expected:
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
        if self._another_repair(walk):
            return
        column = walk.position
        mirror = column | top_bit(walk.dimension)
        base = hood.holder(column)
        newcomer = hood.holder(mirror)
        if newcomer == self.node_id and hood.node_id == self.node_id:
            # our column is doubled: the search that chose it read an older picture (another
            # departure ended here first, and our mirror came back): search again from here,
            # with the departing node's table brought up to date (else its picture, which the
            # steps at its positions read, leads back here); if it has nothing newer, the walk
            # is dropped (a repair is tried again, a leaver's wait ends in ``wedged_seconds``)
            table = self._brought_up_to_date(walk)
            if table != walk.leaver_peers:
                self._advance_leave(
                    replace(walk, leaver_peers=table, phase=ROUTE, position=column, bit=-1)
                )
            return
        if newcomer == walk.leaver:
            if base != self.node_id:
                # the walk's picture of the cube and ours differ (crossed by a rejoin)
                raise KnowledgeError(
                    f"{self.node_id} ends {walk.leaver}'s departure at column {column}, "
                    f"which {base} holds"
                )
            # its table brought up to date: a departure next to it may have ended since the
            # walk began (two failures overlapping), and its picture would claim a position
            # twice beside ours
            donor = peers_from_wire(self._brought_up_to_date(walk))
            self._take_back(mirror, donor, exclude={walk.leaver})
            self._out.extend(_departures(walk))
            if not walk.failed:
                self._send(walk.leaver, walk.leaver_address, Released())
            return
        if (
            newcomer != self.node_id
            and newcomer in self._known_failed(walk)
            and self._defer(walk, newcomer)
        ):
            return  # the newcomer failed too: its own departure goes first
        reclaim = Reclaim(
            epoch=walk.epoch,
            dimension=walk.dimension,
            column=column,
            base_holder=base,
            base_address=hood.address_of(base),
            leaver=walk.leaver,
            leaver_address=walk.leaver_address,
            leaver_positions=walk.leaver_positions,
            leaver_peers=self._brought_up_to_date(walk),
            failed=walk.failed,
            leaver_incarnation=walk.leaver_incarnation,
            leaver_heard=walk.leaver_heard,
            carried=walk.carried,
            carried_positions=walk.carried_positions,
            carried_incarnation=walk.carried_incarnation,
            carried_heard=walk.carried_heard,
        )
        if newcomer == self.node_id:
            self._on_reclaim(self.node_id, reclaim)
        else:
            if base == self.node_id:
                self._reclaiming = newcomer  # until its ReturnTop
                self._reclaiming_ticks = 0
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
        departed = _known_better(
            peers_from_wire(message.leaver_peers), hood, set(hood.holders) - {message.column}
        )
        if message.base_holder == message.leaver:
            hood.replace({message.column, mirror}, departed)
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
        self._announce(before, exclude={departed.node for departed in _departures(message)})
        self._out.extend(_departures(message))
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
        if self._reclaiming == sender:
            self._reclaiming = None
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
        overlap in it), or every neighbour was reported failed and seen restarted since (each
        is out of this cube: a member the others' watchdogs left behind, which every rejoining
        super-peer asked in vain, chaos replays at 16 super-peers): no repair can finish, since
        each one waits on a failed node (a lookup routed through it, a ``Reclaim`` sent to it),
        and one departure at a time would leave this node wedged until the runtime's watchdog
        gives up on it. (Every neighbour failed but not all restarted is not enough: standing
        alone whenever a member's neighbours fail at once made more cubes to merge, and
        more heals over 30 s, in the same replays.)"""
        hood = self._member_hood()
        if not hood.peers or not set(hood.peers) <= set(self._failed):
            return False
        if set(hood.peers) <= self._restarted:
            return True
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
        self._deferred = []
        self._repairers = {}
        self._reclaiming = None
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

    def _start_repair(
        self, failed: str, incarnation: int, last_heard: float = 0.0, restarts: int = 0
    ) -> None:
        """We repair the failure of ``failed`` (its ``incarnation``, 0 if not known): find the
        holders around it, then walk for it. ``restarts``: how often this repair started over
        on contradicting lookup answers."""
        hood = self._member_hood()
        lost = hood.peers[failed].positions
        if not lost:
            # a neighbour holding no position: what this node knows does not fit together (a
            # shrink that kept it among the holders but left it no position in the table,
            # after overlapping changes: the chaos schedules replayed at 16 super-peers, seed
            # 3). The repair has nothing to walk for, and the node cannot trust its state; it
            # used to end in a ValueError out of the walk, which a daemon does not survive
            raise KnowledgeError(
                f"{self.node_id} knows {failed} as a neighbour holding no position"
            )
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
            failed,
            hood.peers[failed].address,
            lost,
            found,
            missing,
            incarnation,
            last_heard,
            restarts=restarts,
        )
        self._repair.failed_too.update(
            (node, known) for node, known in self._failed.items() if node != failed
        )
        self._look_up(self._repair, missing)
        if not missing:
            self._finish_repair()

    def _look_up(self, repair: PendingRepair, positions: set[int]) -> None:
        repair.ticks = 0
        for position in sorted(positions):
            self._route_lookup(
                Lookup(
                    epoch=self._epoch,
                    target=position,
                    avoid=repair.failed,
                    requester=self.node_id,
                    requester_address=self.address,
                )
            )

    def _route_lookup(self, lookup: Lookup) -> None:
        """Answers if we know who holds the target, else passes the lookup one hop closer to it,
        never through the failed node, nor to a member it passed (``Lookup.visited``). With no
        live hop closer (every one failed too), it takes a detour through the live neighbour
        nearest the target, at most ``dimension`` times: a member next to the target answers,
        failed or not, where the closer hops would lose it (a repairer at 0 whose lookup of 3
        could only go to the failed holders of 1 and 2 waited for the watchdog). Between
        detours every hop is closer, so a lookup makes a bounded number of hops."""
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
                failed=holder in self._failed,
                failed_incarnation=self._failed.get(holder, (0, 0.0))[0],
                failed_heard=self._failed.get(holder, (0, 0.0))[1],
            )
            if lookup.requester == self.node_id:
                # its own lookup, back by a detour, or its old incarnation's, passed on by a
                # member that never heard of its rejoin: answered here (a daemon's answer to
                # itself ended it: chaos at 16 super-peers, stop 60)
                self._on_lookup_reply(self.node_id, reply)
                return
            self._send(lookup.requester, lookup.requester_address, reply)
            return
        visited = set(lookup.visited)
        closer = sorted(
            (hamming(q, target), q)
            for p in hood.positions
            for q in neighbour_positions(p, hood.dimension)
            if q not in hood.positions
            and hamming(q, target) < hamming(p, target)
            and hood.holder(q) != lookup.avoid
            and hood.holder(q) not in visited
        )
        live = [hop for hop in closer if hood.holder(hop[1]) not in self._failed]
        if not live and lookup.detours < hood.dimension:
            live = sorted(
                (hamming(q, target), q)
                for p in hood.positions
                for q in neighbour_positions(p, hood.dimension)
                if q not in hood.positions
                and hood.holder(q) != lookup.avoid
                and hood.holder(q) not in visited
                and hood.holder(q) not in self._failed
            )
            lookup = replace(lookup, detours=lookup.detours + 1)
        # else as before: through a member known failed, the lookup may be lost, and the
        # repair asks again
        hops = live or closer
        if not hops:
            # every way is the failed node's, or a member it passed, or it used up its
            # detours: dropped, and the repair asks again after ``DEFERRED_TICKS`` (raised, it
            # broke a relay, or came out of the repairer's tick: bench.overlapping crash-cut
            # at 32, seed 15)
            return
        holder = hood.holder(hops[0][1])
        passed = replace(lookup, visited=(*lookup.visited, self.node_id))
        self._send(holder, hood.address_of(holder), passed)

    def _ask_lookups_again(self) -> None:
        """A repair whose lookups are not all answered after ``DEFERRED_TICKS`` ticks sends the
        missing ones again, routed around the members known failed by now: a lookup passed to
        a member that failed (or was paused) before anyone knew is lost, and the repair would
        otherwise wait on it until the wedge watchdog (seen on daemons: a kill and a pause
        together). Answers to both are fine (``_on_lookup_reply``)."""
        repair = self._repair
        if repair is None or not repair.missing:
            return
        repair.ticks += 1
        if _waited_out(repair.ticks):
            self._look_up(repair, set(repair.missing))

    def _on_lookup_reply(self, sender: str, reply: LookupReply) -> None:
        repair = self._repair
        if repair is None or reply.target not in repair.missing:
            # asked again and answered twice, answered after the repair ended, or asked by
            # whoever had this node's name before (the runtime's rejoin makes a new node, and
            # a member that never heard from it passes the answer on): an answer only fills a
            # repair in, so one for none is dropped. It used to break the node, which rejoined
            # and left a place to repair in a cube already repairing others (the partition
            # counterexample ``crash_while_cut_off``: two rejoins, then a storm of them)
            return
        peer = Peer(reply.address, frozenset(reply.positions))
        if repair.found.setdefault(reply.holder, peer) != peer:
            self._contradicted(sender, repair, reply.holder)
            return
        if reply.failed:
            repair.failed_too[reply.holder] = (reply.failed_incarnation, reply.failed_heard)
        repair.missing.remove(reply.target)
        if not repair.missing:
            self._finish_repair()

    def _contradicted(self, sender: str, repair: PendingRepair, holder: str) -> None:
        """Lookup answers said two things of ``holder``: what was found mixes two moments.
        The repair starts over from what this node knows now, once; its place taken
        meanwhile, it ends (another repair did it)."""
        if repair.failed not in self._member_hood().peers:
            self._repair = None
            return
        if repair.restarts >= REPAIR_RESTARTS:
            raise RemoteProtocolError(sender, f"contradicts what is known of {holder}")
        self._repair = None
        self._start_repair(
            repair.failed, repair.incarnation, repair.last_heard, restarts=repair.restarts + 1
        )

    def _finish_repair(self) -> None:
        repair = self._repair
        assert repair is not None
        if repair.failed not in self._member_hood().peers:
            # its place was taken while the holders around it were looked up: another repair
            # of the same failure ended first (a fallback repairer's beside the designated
            # one's), and a walk now would take the place a second time
            self._repair = None
            return
        if repair.carried is None and self._carry_partner(repair):
            return  # the positions around the failed partner are looked up first
        self._repair = None
        walk = self._new_leave_walk(
            repair.failed,
            repair.failed_address,
            repair.positions,
            repair.found,
            failed=True,
            incarnation=repair.incarnation,
            last_heard=repair.last_heard,
            failed_too=frozenset(repair.failed_too),
            carried=repair.carried,
        )
        self._advance_leave(walk)

    def _carry_partner(self, repair: PendingRepair) -> bool:
        """If the failed node is the base holder of a split column whose newcomer failed too,
        its walk carries the newcomer (``_with_carried``: if the column is the last split one,
        neither departure can finish alone, each would hand the column to the other) and the
        holders around the newcomer's position. Only the base holder's repair carries its
        newcomer, so that the column is taken out once. Returns whether lookups of the
        positions around the newcomer are now on their way."""
        hood = self._member_hood()
        if len(repair.positions) != 1:
            return False
        (base,) = repair.positions
        top = top_bit(hood.dimension)
        if base >= top:
            return False
        mirror = base | top
        partner = next(
            (node for node, peer in repair.found.items() if mirror in peer.positions), None
        )
        if partner is None or partner == self.node_id or partner not in repair.failed_too:
            return False
        peer = repair.found[partner]
        incarnation, last_heard = repair.failed_too[partner]
        repair.carried = Departed(
            node=partner,
            positions=tuple(sorted(peer.positions)),
            failed=True,
            incarnation=incarnation,
            last_heard=last_heard,
        )
        column = repair.positions | peer.positions
        known = {position for peer in repair.found.values() for position in peer.positions}
        for position in surrounding_positions(column, hood.dimension):
            if position in known:
                continue
            if position in hood.positions:
                repair.found[self.node_id] = Peer(self.address, hood.positions)
            elif position in hood.holders:
                holder = hood.holders[position]
                repair.found[holder] = hood.peers[holder]
            else:
                repair.missing.add(position)
        self._look_up(repair, set(repair.missing))
        return bool(repair.missing)
