"""``HypercupNode``: one super-peer's part in keeping the cube, as a sans-IO state machine.

Inputs are calls (``create``, ``join_via``, ``leave``, ``neighbour_failed``) and messages
(``receive(sender, message)``); each returns a list of outputs: ``Send`` for the runtime to deliver,
and ``Joined`` / ``TopologyChanged`` / ``Left`` for the super-peer core. No sockets, clocks or
randomness: failure detection is the runtime's job (it calls ``neighbour_failed``).

The shape kept is described in ``hypercup.topology``: columns ``x < TOP`` whose mirror ``TOP | x``
is held by a newcomer for exactly ``x < k`` (prefix order), by the base holder otherwise. The
prefix order lets a node find ``k`` with local knowledge, by a binary search in which every step is
one hop: a node knows, for each neighbour, every position that neighbour holds, so it can tell
whether the neighbour's column is split.

Join (newcomer A contacts any member C): ``JoinRequest`` A -> C. C starts a ``JoinWalk`` that is
routed to the *anchor* position ``TOP - 1`` (at most d hops), then searches down from it for the
lowest doubled column ``k`` (at most d - 1 hops; ``TOP - 1`` is doubled unless the cube is full).
Its holder K hands the mirror ``TOP | k`` to A (``Welcome``, with the holders around it) and tells
the base holders of the d - 1 neighbouring columns (``NeighbourUpdate``), each of which relays the
update to the newcomer of its own column, if there is one. Every update is acknowledged, and K
reports ``JoinDone`` to the anchor.
Grow: when the anchor finds its own column split, the cube is full (``N = 2**d``) as far as the
anchor can tell. Once no admitted join is in flight it takes a census down its tree (``Census``,
answered back up it: ``hypercup._census``), because overlapping departures can leave a column
below the anchor's doubled (a search that passed over a failed column); the joins waiting go to
the doubled columns it finds, one each. With none, and nothing else in a grow's way, it
broadcasts ``Grow`` along its tree (N - 1 messages): every position ``x`` is mirrored into
``2**d | x``, physically nothing moves, every node now holds a doubled column, and waiting joins
restart in the new cube. This is the worst case of a join, 3(N - 1) messages (the census down
and up, the grow), once every N/2 joins: amortised O(1).

Leave (announced) or failure: a ``LeaveWalk`` carrying the departing node L's positions and peer
table is routed to position 0 and searches up for the last split column ``x = k - 1``; any node can
take L's steps from the table it carries, so L may be dead. Then, as in deleting from a heap, the
newcomer Z of column x takes L's positions and its mirror returns to the base holder X, whose column
becomes doubled (``Reclaim`` -> Z, ``ReturnTop`` Z -> X); if L is Z, X takes its mirror back; if L
is X, Z takes X's base position and keeps its mirror. X and Z each announce their new holdings to
every neighbour, old and new (``NeighbourUpdate``), and L is ``Released``.
Shrink: when column 0 is doubled every column is (``k = 0``): the walk first broadcasts ``Shrink``
from position 0 (N - 1 messages; the departing node is skipped and its children hear from the
walk), every node drops its mirror, and the walk goes on in the smaller cube, where every column is
split.

Failure: the runtime calls ``neighbour_failed(L)`` on L's neighbours. Exactly one of them repairs:
the holder of the neighbour of L's lowest position across the lowest dimension whose neighbour is
not L's own. It rebuilds L's peer table: it knows some holders itself and asks for the others with a
``Lookup`` routed around L (2 or 3 hops each), then it starts the ``LeaveWalk`` on L's behalf. The
others only apply the announcements that follow.

Costs, with d the dimension (``ceil(log2 N)``, or ``log2 N + 1`` right after leaves made ``k = 0``):

* join: at most 2d walk hops (more only when a concurrent join forces a retry), a ``Welcome``,
  d - 1 updates, at most d - 1 relays, as many acknowledgements and a ``JoinDone``: under 6d + 2
  messages. It changes the neighbour tables of at most 2d super-peers (K, the newcomer, and the
  holders of the d - 1 neighbouring mirrors); the base holders around learn that K's column split.
* leave: at most 2d - 1 walk hops, ``Reclaim``, ``ReturnTop``, ``Released``, and two
  announcements to at most 2d neighbours each: under 7d + 3 messages, changing at most 4d tables.
  A failure adds at most 2d lookups (a few hops and a reply each).
* worst case: an operation that grows the cube adds 3(N - 1) messages (its census and the
  ``Grow``), one that shrinks it N - 1; either changes every super-peer's table. Joins alone
  grow the cube once every N/2 joins (amortised O(1) per join); joins and leaves alternating
  one for one never grow and shrink repeatedly. But the bound of two positions per node forces
  a full cube to grow on the next join and a cube of doubled columns to shrink on the next
  leave, so the adversarial sequence join, leave, leave, join, repeated around
  N = 2**m, pays a grow and a shrink every four operations.

Bound on positions: every node always holds one position or two (a doubled column), after any
sequence of joins, leaves and failures, because each operation restores the shape exactly.

Concurrency model. Links are reliable and FIFO (a message never overtakes an earlier one on the same
link); nothing else is assumed about timing.

* Joins may run concurrently with each other, through any contacts. The take is atomic at K: a walk
  that reaches a column that is no longer doubled (a concurrent join took it) retries from the
  anchor. A node's knowledge of a neighbour's column can only be stale in one direction (doubled
  when it was just split), so the search never skips the lowest doubled column. Every update about a
  column travels one path, its base holder -> the neighbouring base holders -> their newcomers,
  and each hop is FIFO, so concurrent takes next to each other leave consistent tables. The anchor
  grows only when no admitted join is in flight and every one of their updates is acknowledged, so
  no message of the old cube is left in flight when the dimension changes. A newcomer that asks
  again through another contact sends a second walk: the anchor admits, or queues for its grow,
  one walk per newcomer (a later incarnation's replaces an earlier one's), and an admitted walk
  that ends without a take (its newcomer is in the table where it would take: a member by now,
  or an old incarnation not yet repaired away) is reported to the anchor as done, so that the
  anchor's grow does not wait ``STALE_TICKS`` for it.
* Messages carry the sender's ``epoch`` (number of grows and shrinks so far); a node holds back a
  message from a later epoch until its own ``Grow`` / ``Shrink`` arrives, and restarts a join walk
  from an earlier epoch that was not yet admitted.
* Departures and joins. A departure's messages (``LeaveWalk``, ``Reclaim``, ``ReturnTop``,
  ``Shrink``) reaching a node whose take or relayed update is unfinished, or that runs a repair
  itself, are held back until that is done; a node asked to leave or repair in that state raises
  ``LocalProtocolError`` (the runtime asks again later). A join never waits on a failed member:
  ``neighbour_failed`` completes the takes and relays that waited for its acknowledgement; the
  anchor forgets an admitted join still in flight after ``STALE_TICKS`` of the runtime's
  ``tick`` (its walk went to a failed member; the newcomer asks again); a walk of an earlier
  epoch starts over. A newcomer whose old incarnation still holds a place in the table of the
  member that would give it a column (a restart before its repair ended) is refused there
  (``JoinRefused``; it asks again): one name twice in the tables around a column left repairs
  of the old place looping on the new one. So is it at the anchor of a full cube whose table
  holds it: a grow for it would cross the repair of its old place (whose walk, of the cube
  before, is dropped where it meets the new one) and count that place as taken.
* Failures during a change of dimension. A ``Grow`` or ``Shrink`` sent down a tree through a
  failed member never reaches that member's subtree; a node that holds messages of an epoch it
  has not reached is ``lagging``, and the runtime asks their senders (``ask_for_missed_changes``:
  ``ChangeRequest``), who send the changes again (``resent``: accepted from anyone, passed down
  the tree from there, ignored where already applied). A repair whose cube changed dimension
  starts over; its lookups of the old cube are dropped where they arrive, and so is its walk:
  a repair walked before the change starts over at the runtime's next report of the failed
  node (but the one whose own walk shrank the cube, which goes on in the new one).
* The designated repairer may have failed too: ``neighbour_failed(node, fallback=k)`` lets the
  holders of the next k positions around the failed node repair (the runtime raises ``k`` with
  the time the failure stays unrepaired).
* A departing node may also be reported failed (a cut held its walk back): the repairer drops a
  ``LeaveWalk`` of the node whose place it repairs already, so that place is taken once.
* The last one standing. A member whose every neighbour was reported failed, and whose
  neighbours held every other position of the cube as far as it knows (a small cube cut apart,
  or two failures overlapping in it), or whose every neighbour the runtime has seen alive as a
  later incarnation since (``restarted``: each rejoins, out of this cube; after a heal whose
  repairs wedged, the watchdog rejoins every member but one, which the others then wait on),
  cannot finish any repair: each waits on a failed node (a lookup routed through one, a
  ``Reclaim`` sent to one), and every message it sends goes to one. It takes the cube alone
  at once:
  position 0 of dimension 0, in a new epoch (what the old cube still has in flight is dropped
  or refused), what it was in the middle of dropped, and a ``Departed`` for each of them.
* Overlapping failures (two neighbours crashing at once, a failure during a departure): nothing
  a departure needs is sent to a member known to have failed (``hypercup._departures``,
  "Overlapping failures"). Walks route around it, take its step from what the nodes around
  know (a stand-in, in the search), or wait at a neighbour of it until it is replaced; a failed column's
  newcomer departs with its failed base holder; a base holder holds other departures until its
  mirror is back (``_reclaiming``) and starts no repair meanwhile; a walk for a place taken
  already (as far as a node knows, from its neighbours' announcements too) is dropped, and the
  repairer that started it on a stale table is told who holds it.
* Limitation: concurrent departures are serialised only where they meet (a node holds one back
  while it runs another); two repairs that never meet can still cross a grow or a shrink, and a
  newcomer that asked a second contact after a silent first one can be taken twice. These end in
  ``RemoteProtocolError`` at some node, which the runtime answers by rejoining; the runtime also
  rejoins a node whose protocol stays busy too long (``superpeer.node``: the wedge watchdog).
  Under arbitrary interleavings of the links two neighbours failing at once still end that way
  in some cases; with the runtime's timing (the simulator, ``bench.overlapping``) they are
  repaired within seconds but where a shrink or a grow crosses a repair.
* A newcomer holds back every message until its ``Welcome`` arrives, but a ``JoinRequest``: a
  node out of the cube (idle, joining or leaving) answers it ``JoinRefused``, and the asker tries
  another contact (two super-peers rejoining at once may pick each other).

States: IDLE --create--> MEMBER; IDLE --join_via--> JOINING --Welcome--> MEMBER;
MEMBER --leave--> LEAVING --Released--> LEFT (or MEMBER --leave, alone--> LEFT). After a
``RemoteProtocolError`` the node is BROKEN and refuses further use. An IDLE node drops what
reaches it (meant for a membership it gave up).
"""

from __future__ import annotations

from hypercup._core import NodeState
from hypercup._departures import Departures
from hypercup._joins import Joins
from hypercup._neighbourhood import Neighbourhood
from hypercup.errors import LocalProtocolError
from hypercup.events import Joined, Left, Output
from hypercup.messages import (
    Census,
    CensusReply,
    ChangeRequest,
    Grow,
    JoinDone,
    JoinRequest,
    JoinWalk,
    LeaveWalk,
    Lookup,
    LookupReply,
    Message,
    NeighbourUpdate,
    Reclaim,
    ReturnTop,
    Shrink,
    UpdateAck,
    Welcome,
)
from hypercup.positions import neighbour_positions
from hypercup.view import LocalView

__all__ = ["HypercupNode", "NodeState"]

STALE_TICKS = 5
"""Ticks (``failure_seconds`` each) after which an admitted join is taken for lost."""
RETRY_REPAIR = 3
"""A repair this node started whose failed node is still in its table when the runtime's
``fallback`` has grown by this much (a walk lost with another failure) is started again."""


class HypercupNode(Joins, Departures):
    """The topology protocol of super-peer ``node_id``, reachable at ``address``."""

    # -- what the runtime and the core can see ----------------------------------------------

    def view(self) -> LocalView:
        """This node's positions and neighbour table (only while it is a member)."""
        return self._member_hood("view").view()

    def is_neighbour(self, node: str) -> bool:
        """Whether ``node`` is in ``view().neighbours()``, without building the view (asked for
        every message a super-peer receives)."""
        hood = self._hood
        return (
            self._state is NodeState.MEMBER and hood is not None and node in hood.holders.values()
        )

    def known_peers(self) -> dict[str, tuple[str, frozenset[int]]]:
        """Every neighbour's address and the positions it announced (a member's knowledge)."""
        hood = self._member_hood("known_peers")
        return {node: (peer.address, peer.positions) for node, peer in hood.peers.items()}

    # -- inputs -------------------------------------------------------------------------------

    def create(self) -> list[Output]:
        """Become the only member of a new cube (dimension 0, position 0)."""

        def action() -> None:
            self._require_state(NodeState.IDLE, "create")
            self._hood = Neighbourhood(
                node_id=self.node_id, address=self.address, dimension=0, positions={0}, peers={}
            )
            self._state = NodeState.MEMBER
            self._out.append(Joined())

        return self._run(action)

    def join_via(self, contact_id: str, contact_address: str) -> list[Output]:
        """Ask member ``contact_id`` to integrate this node; ``Joined`` comes with the
        ``Welcome``."""

        def action() -> None:
            self._require_state(NodeState.IDLE, "join_via")
            if contact_id == self.node_id:
                raise LocalProtocolError(f"{self.node_id} cannot join through itself")
            self._state = NodeState.JOINING
            self._send(contact_id, contact_address, JoinRequest(address=self.address))

        return self._run(action)

    def leave(self, *, incarnation: int = 0, last_heard: float = 0.0) -> list[Output]:
        """Announce this node's departure; ``Left`` comes once its positions have a successor
        (at once if it is the last member). ``incarnation`` and ``last_heard`` (the runtime's
        time now): for the successor's ``Departed``."""

        def action() -> None:
            hood = self._member_hood("leave")
            if self.busy():
                raise LocalProtocolError(
                    f"{self.node_id} cannot leave while it takes part in another operation "
                    f"({self.activity()}): the protocol assumes a departure runs alone"
                )
            if not hood.peers:
                self._state = NodeState.LEFT
                self._hood = None
                self._out.append(Left())
                return
            self._start_leave(incarnation, last_heard)

        return self._run(action)

    def neighbour_failed(
        self,
        node_id: str,
        *,
        fallback: int = 0,
        incarnation: int = 0,
        last_heard: float = 0.0,
        restarted: bool = False,
    ) -> list[Output]:
        """The runtime saw neighbour ``node_id`` (one of ``view().neighbours()``) stop answering.
        Only the neighbour designated in the module docstring repairs; for the others this changes
        nothing, and they take the repair's announcements when they come. The designated
        neighbour may have failed too: a runtime that still sees ``node_id`` in its view a while
        later asks again with ``fallback`` k, and the holders of the next k positions around the
        failed node's (in the same order) repair too. ``incarnation``: the failed node's, as the
        runtime knows it (0: not known), and ``last_heard``, when the runtime last heard from
        it (in its own terms, opaque here), for the ``Departed`` of whoever takes its place.
        ``restarted``: the runtime has heard from a later incarnation of ``node_id`` (it is
        alive, and out of this cube: "The last one standing")."""

        def action() -> None:
            hood = self._member_hood("neighbour_failed")
            if node_id not in hood.peers:
                raise LocalProtocolError(f"{node_id} is not a neighbour of {self.node_id}")
            self._release_joins_waiting_on(node_id)
            self._census_child_failed(node_id)
            if self._reclaiming == node_id:
                # it died taking a departed node's place: its own repair hands on what it
                # took, our mirror included
                self._reclaiming = None
            self._failed[node_id] = (incarnation, last_heard)
            if restarted:
                self._restarted.add(node_id)
            if self._last_one_standing():
                # whatever it was waiting for (a repair's lookups, another departure's steps)
                # can only come from a failed node
                self._stand_alone()
                return
            lost = hood.peers[node_id].positions
            candidates = [
                q
                for p in sorted(lost)
                for q in neighbour_positions(p, hood.dimension)
                if q not in lost
            ]
            if hood.positions.isdisjoint(candidates[: fallback + 1]):
                return
            started = self._repairs_started.get(node_id)
            if started is not None and fallback < started + RETRY_REPAIR:
                return
            if (
                self._changing_tables()
                or self._repair is not None
                or self._held_back
                or self._reclaiming is not None
            ):
                # not while our mirror is on its way back either: the ``ReturnTop`` would wait
                # behind the repair, and its sender's later announcements overtake it
                raise LocalProtocolError(
                    f"{self.node_id} cannot repair the failure of {node_id} while it takes part in "
                    f"another operation ({self.activity()}): the protocol assumes a departure "
                    "runs alone"
                )
            self._repairs_started[node_id] = fallback
            # the failed node's positions, as others announced them, may not fit (a restart
            # announced over the old incarnation's place): their fault, not the caller's
            self._guarded(node_id, lambda: self._start_repair(node_id, incarnation, last_heard))

        return self._run(action)

    def last_heard_if_failed(self, node_id: str) -> float | None:
        """When the runtime said it last heard from neighbour ``node_id``
        (``neighbour_failed``'s ``last_heard``), if it reported it failed here and its place
        has not changed hands yet (its repair not started, or not walked); None otherwise."""
        if node_id in self._failed:
            return self._failed[node_id][1]
        repair = self._repair
        if repair is not None and repair.failed == node_id:
            return repair.last_heard
        return None

    def neighbour_alive(self, node_id: str) -> list[Output]:
        """Neighbour ``node_id``, reported failed, is alive in the very place this node's table
        gives it: a new process of it that rejoined into the same positions, where this node
        never saw its old one's place change hands, or the same process, reported failed while
        one of the two was cut off (the runtime knows it by its heartbeats).
        It is no longer taken for failed, and a repair of it that this node started and has
        not walked yet is dropped (its lookups' answers are dropped where they arrive)."""

        def action() -> None:
            hood = self._member_hood("neighbour_alive")
            if node_id not in hood.peers:
                raise LocalProtocolError(f"{node_id} is not a neighbour of {self.node_id}")
            self._failed.pop(node_id, None)
            self._repairs_started.pop(node_id, None)
            if self._repair is not None and self._repair.failed == node_id:
                self._repair = None

        return self._run(action)

    def tick(self) -> list[Output]:
        """The runtime's clock went on by ``failure_seconds`` (a join takes far less). An
        admitted join still in flight after ``STALE_TICKS`` ticks went to a member that failed
        (its newcomer asks again, through another contact): it is forgotten, so that the cube
        can grow again. A departure waiting for a failed neighbour's replacement is dropped
        after ``DEFERRED_TICKS`` (``Departures._expire_deferred``), and a repair's lookups not
        all answered by then are sent again (``Departures._ask_lookups_again``). A census whose
        answers are ``CENSUS_TICKS`` late is answered as not ready, and the anchor of a full
        cube whose joins wait takes one again (``hypercup._census``)."""

        def action() -> None:
            if self._state is not NodeState.MEMBER:
                return
            for newcomer, admitted in list(self._admitted.items()):
                admitted.ticks += 1
                if admitted.ticks >= STALE_TICKS:
                    self._join_done(newcomer, admitted.incarnation)
            self._expire_deferred()
            self._ask_lookups_again()
            self._expire_reclaiming()
            self._expire_repairers()
            self._expire_censuses()
            self._grow_when_ready()

        return self._run(action)

    def receive(self, sender_id: str, message: Message) -> list[Output]:
        """Process ``message`` from node ``sender_id``."""
        return self._run(lambda: self._deliver(sender_id, message))

    def _handle(self, sender: str, message: Message) -> None:
        match message:
            case Welcome():
                self._on_welcome(message)
            case JoinRequest():
                self._on_join_request(sender, message)
            case JoinWalk():
                self._on_join_walk(sender, message)
            case NeighbourUpdate():
                self._on_neighbour_update(sender, message)
            case UpdateAck():
                self._on_update_ack(sender, message)
            case JoinDone():
                self._on_join_done(sender, message)
            case Grow():
                self._on_grow(sender, message)
            case Shrink():
                self._on_shrink(sender, message)
            case LeaveWalk():
                self._on_leave_walk(sender, message)
            case Reclaim():
                self._on_reclaim(sender, message)
            case ReturnTop():
                self._on_return_top(sender, message)
            case Census():
                self._on_census(sender, message)
            case CensusReply():
                self._on_census_reply(sender, message)
            case ChangeRequest():
                self._on_change_request(sender, message)
            case Lookup():
                self._route_lookup(message)
            case LookupReply():
                self._on_lookup_reply(sender, message)
            case _:
                raise AssertionError(f"{message.KIND} is handled before it is dispatched")
