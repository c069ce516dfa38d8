"""What both halves of the protocol (``_joins``, ``_departures``) share: a node's state, how one
input becomes a list of outputs, and when a message may be processed.

* ``_run`` handles one input: it collects the outputs, adds a ``TopologyChanged`` (before any
  ``Departed``) when the node's epoch, positions, neighbour table or neighbours' addresses
  changed, and marks the node BROKEN when the input raised ``RemoteProtocolError`` (its state
  can no longer be trusted).
* Epochs: every message but ``JoinRequest`` and ``Released`` carries its sender's epoch. A message
  from a later epoch is held back until this node's own ``Grow`` / ``Shrink`` arrives (they carry
  the epoch they start, so they need the one before). A message from an earlier epoch is an error,
  except a join walk not yet admitted by an anchor, which starts over (``_joins``).
* A newcomer holds back everything until its ``Welcome``.
* A join walk that reaches a node repairing a failure is held back until the repair is done (a
  restarted super-peer may ask to join through a member that has not heard of the repair yet);
  held-back messages are tried again after every input.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace

from hypercup._neighbourhood import KnowledgeError, Neighbourhood, Peer
from hypercup.errors import LocalProtocolError, RemoteProtocolError
from hypercup.events import Departed, JoinFailed, Left, Output, Send, TopologyChanged
from hypercup.messages import (
    Census,
    CensusReply,
    ChangeRequest,
    Grow,
    JoinDone,
    JoinRefused,
    JoinRequest,
    JoinWalk,
    LeaveWalk,
    Lookup,
    LookupReply,
    Message,
    Reclaim,
    Released,
    ReturnTop,
    Shrink,
    Welcome,
)

KEPT_CHANGES = 8
"""Changes of dimension a node can send again to one that missed them."""


class NodeState(enum.Enum):
    IDLE = "idle"
    JOINING = "joining"
    MEMBER = "member"
    LEAVING = "leaving"
    LEFT = "left"
    BROKEN = "broken"


@dataclass
class PendingTake:
    """A node handed its mirror over and waits for the neighbouring columns to acknowledge."""

    anchor: str
    anchor_address: str
    newcomer: str
    newcomer_incarnation: int
    outstanding: dict[int, str]
    """Update acknowledgements still to come, and from whom."""


@dataclass
class Admitted:
    """A join the anchor admitted and waits to hear done (``JoinDone``)."""

    incarnation: int
    """The newcomer's, as its walk gave it (0: not told)."""
    ticks: int = 0
    """The runtime's ticks it has been in flight (``HypercupNode.tick``)."""


@dataclass
class PendingRepair:
    """The repairer rebuilds the failed node's peer table before walking on its behalf."""

    failed: str
    failed_address: str
    positions: frozenset[int]
    found: dict[str, Peer]
    missing: set[int]
    incarnation: int = 0
    last_heard: float = 0.0
    ticks: int = 0
    """The runtime's ticks since its lookups were last sent (``Departures._ask_lookups_again``)."""
    failed_too: dict[str, tuple[int, float]] = field(default_factory=dict)
    """Holders around the failed node known to have failed too (by the lookups' answerers, or
    this node), with the incarnation and last-heard time given for them."""
    carried: Departed | None = None
    """The failed newcomer of the failed node's column, departing with it."""
    restarts: int = 0
    """How often it started over on contradicting lookup answers (``REPAIR_RESTARTS``)."""


class NodeCore:
    """State and plumbing; ``HypercupNode`` adds the handlers (``_handle``)."""

    _handle: Callable[[str, Message], None]
    """Processes a message this node may process now (defined by ``HypercupNode``)."""
    _restart_join: Callable[[JoinWalk], None]
    """Starts a join walk over from this node, in its epoch (defined by ``Joins``)."""
    _start_repair: Callable[[str, int, float, int], None]
    """Repairs the failure of a neighbour (defined by ``Departures``)."""
    _resume_deferred: Callable[[], None]
    """Sends on the departures waiting here for a failed node to be replaced (``Departures``)."""

    def __init__(self, node_id: str, address: str) -> None:
        if not node_id or not address:
            raise LocalProtocolError("a node needs a non-empty id and address")
        self.node_id = node_id
        self.address = address
        self._state = NodeState.IDLE
        self._epoch = 0
        self._hood: Neighbourhood | None = None
        self._held_back: list[tuple[str, Message]] = []
        self._out: list[Output] = []
        # the anchor's admitted joins (by newcomer: one that tries again after its walk was lost
        # with a failed member is admitted once), and the joins waiting for a grow
        self._admitted: dict[str, Admitted] = {}
        self._queued: list[JoinWalk] = []
        # acknowledged updates: the take this node waits on, and the relays it made
        self._next_ack = 0
        self._take: PendingTake | None = None
        self._relays: dict[int, tuple[str, str, int, str]] = {}
        """Updates relayed to our newcomer: our ack id -> (origin, its address, its ack id,
        the newcomer)."""
        self._repair: PendingRepair | None = None
        self._changes: dict[int, Grow | Shrink] = {}
        """The last changes of dimension this node applied, by the epoch they began (for a node
        that missed one: ``ChangeRequest``)."""
        self._repairs_started: dict[str, int] = {}
        """Failed neighbours whose repair this node started and that are still in its table
        (the announcements of the node that takes their place are on their way): reported failed
        again meanwhile, they are not repaired twice (forgotten when the cube changes dimension
        under their walks: ``_apply``)."""
        self._failed: dict[str, tuple[int, float]] = {}
        """Neighbours the runtime reported failed and still in this node's table, with the
        incarnation and last-heard time it gave (for their ``Departed`` if this node ends up
        the last one standing: ``Departures._stand_alone``)."""
        self._restarted: set[str] = set()
        """Failed neighbours the runtime saw alive as a later incarnation (out of the cube)."""
        self._reclaiming: str | None = None
        """The newcomer this base holder sent a ``Reclaim`` (it takes a departing node's place
        and gives our mirror back with ``ReturnTop``): other departures wait until it has,
        since they read our column (two failures whose walks end at one column). Given up at
        the second ``tick`` (the newcomer rejoined instead: its ``ReturnTop`` never comes)."""
        self._reclaiming_ticks = 0
        self._repairers: dict[str, tuple[str, int]] = {}
        """Failed departing nodes whose repair walk ended here lately, with the member that
        started it and the ticks since: another repairer's walk for the same failure is
        dropped here (``Departures._another_repair``)."""
        self._deferred: list[tuple[str, LeaveWalk, int]] = []
        """Departure walks waiting here until a failed neighbour they would have gone to is
        replaced (``Departures``, "Overlapping failures"), with that neighbour and the ticks
        they have waited."""

    @property
    def state(self) -> NodeState:
        return self._state

    @property
    def epoch(self) -> int:
        """How many times the cube changed dimension, as far as this node knows."""
        return self._epoch

    def busy(self) -> bool:
        """Whether this node takes part in an operation that is not complete (a join it
        admitted, handed over or relays, a repair it runs, or messages it holds back)."""
        return (
            self._joining_activity()
            or self._repair is not None
            or bool(self._held_back)
            or bool(self._deferred)
        )

    def activity(self) -> str:
        """What keeps this node ``busy``, in words (for the errors that refuse a departure while
        it is, and the runtime's log: a chaos run's wedged nodes say what they waited on)."""
        parts = []
        if self._take is not None:
            waiting = ", ".join(sorted(set(self._take.outstanding.values())))
            parts.append(f"its mirror handed to {self._take.newcomer}, acks due from {waiting}")
        if self._relays:
            newcomers = ", ".join(sorted({relay[3] for relay in self._relays.values()}))
            parts.append(f"{len(self._relays)} updates relayed to {newcomers}")
        if self._admitted:
            parts.append(f"joins admitted of {', '.join(sorted(self._admitted))}")
        if self._queued:
            parts.append(f"{len(self._queued)} joins queued for a grow")
        if self._reclaiming is not None:
            parts.append(f"its mirror on its way back from {self._reclaiming}")
        if self._repair is not None:
            missing = sorted(self._repair.missing)
            parts.append(f"the repair of {self._repair.failed} (positions {missing} looked up)")
        if self._held_back:
            kinds = ", ".join(sorted({type(message).__name__ for _, message in self._held_back}))
            parts.append(f"{len(self._held_back)} messages held back ({kinds})")
        if self._deferred:
            leavers = ", ".join(sorted({walk.leaver for _, walk, _ in self._deferred}))
            parts.append(f"the departures of {leavers} deferred")
        return "; ".join(parts) or "nothing"

    # -- one input ----------------------------------------------------------------------------

    def _run(self, action: Callable[[], None]) -> list[Output]:
        if self._state is NodeState.BROKEN:
            raise LocalProtocolError(f"{self.node_id} hit a protocol error and refuses further use")
        before = self._snapshot()
        self._out = []
        try:
            action()
            if self._held_back and self._repair is None and self._state is NodeState.MEMBER:
                self._flush()
            if self._deferred and self._state is NodeState.MEMBER:
                self._resume_deferred()
        except RemoteProtocolError:
            self._state = NodeState.BROKEN
            raise
        except KnowledgeError as error:
            # outside a message's handling (a message's is its sender's fault: ``_guarded``):
            # what earlier messages told this node does not fit together, found at a tick (a
            # grow of a cube whose table is not full, with an admitted join given up). It
            # cannot trust its state, as after a message that breaks the protocol: it used to
            # come out of ``tick`` as a ValueError, which a daemon's timer does not survive
            self._state = NodeState.BROKEN
            raise RemoteProtocolError("", str(error)) from None
        if self._hood is not None:
            peers = self._hood.peers
            self._repairs_started = {n: k for n, k in self._repairs_started.items() if n in peers}
            self._failed = {n: f for n, f in self._failed.items() if n in peers}
            self._restarted &= set(self._failed)
        after = self._snapshot()
        if after is not None and after != before:
            assert self._hood is not None
            # before any ``Departed``: whoever announces a departure does it in the view that
            # has the departed node's place filled (in the old one, the news would go down a
            # tree through the departed node)
            departed = [i for i, o in enumerate(self._out) if isinstance(o, Departed)]
            self._out.insert(
                departed[0] if departed else len(self._out),
                TopologyChanged(
                    epoch=self._epoch, view=self._hood.view(), addresses=self._hood.addresses()
                ),
            )
        out, self._out = self._out, []
        return out

    def _snapshot(self) -> tuple[object, ...] | None:
        if self._state is not NodeState.MEMBER or self._hood is None:
            return None
        hood = self._hood
        return (
            self._epoch,
            hood.dimension,
            hood.positions,
            tuple(sorted(hood.holders.items())),
            tuple(sorted(hood.addresses().items())),
        )

    def _require_state(self, state: NodeState, operation: str) -> None:
        if self._state is not state:
            raise LocalProtocolError(
                f"{operation}: {self.node_id} is {self._state.value}, not {state.value}"
            )

    def _member_hood(self, operation: str = "this") -> Neighbourhood:
        self._require_state(NodeState.MEMBER, operation)
        assert self._hood is not None
        return self._hood

    def _send(self, to: str, address: str, message: Message) -> None:
        assert to != self.node_id, f"{self.node_id} sends {message.KIND} to itself"
        self._out.append(Send(to=to, address=address, message=message))

    def _forward_down(self, message: Grow | Shrink, skip: str | None = None) -> None:
        """Sends a broadcast to our children in the tree of ``message.root`` (but ``skip``)."""
        hood = self._member_hood()
        for child in hood.view().children(message.root):
            if child != skip:
                self._send(child, hood.address_of(child), message)

    def _new_ack_id(self) -> int:
        self._next_ack += 1
        return self._next_ack

    def _changing_tables(self) -> bool:
        """Whether a join's take or update this node is part of is unfinished."""
        return bool(self._take or self._relays)

    def _joining_activity(self) -> bool:
        return bool(self._take or self._relays or self._admitted or self._queued)

    # -- which messages, when -----------------------------------------------------------------

    def _deliver(self, sender: str, message: Message) -> None:
        state = self._state
        if isinstance(message, Census | CensusReply):
            # answered in any state and epoch: a parent waits for the answer
            # (``hypercup._census``)
            self._handle(sender, message)
            return
        if isinstance(message, JoinRefused):
            if state is NodeState.JOINING:
                self._state = NodeState.IDLE
                self._held_back = []
                self._out.append(JoinFailed(reason=message.reason, member=message.member))
            return  # a refusal of an attempt given up already
        if isinstance(message, JoinRequest) and state is not NodeState.MEMBER:
            # a newcomer (or a super-peer rejoining) picked this node as its contact while it is
            # out of the cube itself (between two attempts to join again, or leaving): not the
            # asker's protocol error, and no reason to break; it tries another contact
            self._send(
                sender,
                message.address,
                JoinRefused(
                    reason=f"{self.node_id} is not a member ({state.value}); try another",
                    member=False,
                ),
            )
            return
        if isinstance(message, Released) and state is not NodeState.LEAVING:
            # the answer to a departure this node no longer runs (it was evicted meanwhile, or
            # gave a wedged leave up and joins, or joined, again): its old positions have their
            # holder already; held back behind a Welcome it would reach a member
            return
        if state is NodeState.JOINING:
            if isinstance(message, Welcome):
                self._guarded(sender, lambda: self._handle(sender, message))
                self._flush()
            else:
                self._held_back.append((sender, message))
            return
        if state is NodeState.IDLE:
            # meant for this node's previous membership (it rejoins as a new incarnation): the
            # cube repairs that one's place without it
            return
        if state is NodeState.LEAVING and isinstance(message, Released):
            self._state = NodeState.LEFT
            self._hood = None
            self._out.append(Left())
            return
        if state is NodeState.LEAVING and isinstance(message, Lookup | LookupReply):
            # a repair beside this departure looked a holder up through this node: dropped,
            # and asked again after ``DEFERRED_TICKS``, by when the departure has ended (on
            # daemons, two leavers that such a lookup reached broke and rejoined instead of
            # leaving: chaos, stop 52)
            return
        if state is not NodeState.MEMBER or isinstance(message, Welcome):
            raise RemoteProtocolError(
                sender,
                f"{message.KIND} reached {self.node_id}, which is {state.value}"
                + (
                    ": the protocol assumes a departure runs alone"
                    if state is NodeState.LEAVING
                    else ""
                ),
            )
        self._dispatch(sender, message)

    def _guarded(self, sender: str, handle: Callable[[], None]) -> None:
        """Runs a handler; what it finds inconsistent is the sender's protocol error."""
        try:
            handle()
        except KnowledgeError as error:
            raise RemoteProtocolError(sender, str(error)) from None

    @staticmethod
    def _required_epoch(message: Message) -> int | None:
        if isinstance(message, Grow | Shrink):
            return message.epoch - 1
        return getattr(message, "epoch", None)

    def _dispatch(self, sender: str, message: Message) -> bool:
        """Processes ``message``, or holds it back until its epoch comes (False)."""
        required = self._required_epoch(message)
        if required is not None and required > self._epoch:
            self._held_back.append((sender, message))
            return False
        departure = isinstance(message, LeaveWalk | Reclaim | ReturnTop | Shrink)
        if (departure or isinstance(message, Grow)) and self._changing_tables():
            # a take or relay of this epoch finishes first (a grow can only overtake one when
            # the anchor took its join for lost: ``tick``)
            self._held_back.append((sender, message))
            return False
        if (
            departure
            and self._reclaiming is not None
            and not (isinstance(message, ReturnTop) and sender == self._reclaiming)
        ):
            # our mirror is on its way back (``_reclaiming``): this column changes first
            self._held_back.append((sender, message))
            return False
        if departure and self._repair is not None and not isinstance(message, Shrink):
            # a departure waits for the takes this node takes part in (they change the columns
            # the departure reads; a take that waits on a failed member goes on without it:
            # ``_release_joins_waiting_on``) and for the repair it runs itself. Not a shrink,
            # as not a grow: the repair starts over in the new cube (``_apply``), while its
            # lookups of the old one would be dropped where they arrive and it would wait on
            # them for ever, lagging an epoch behind
            self._held_back.append((sender, message))
            return False
        if isinstance(message, JoinWalk) and self._repair is not None:
            # a join that reaches a node repairing a failure waits for the repair to end (a
            # restarted super-peer may join through a member that has not heard of the repair)
            self._held_back.append((sender, message))
            return False
        # a walk of an earlier epoch starts over; one already admitted can only have been
        # overtaken by a departure's shrink (the anchor grows only with no join in flight)
        if isinstance(message, Grow | Shrink) and message.resent and required < self._epoch:
            return True  # it reached this node by the tree after all
        restartable = isinstance(message, JoinWalk)
        if (
            required is not None
            and required < self._epoch
            and (
                isinstance(message, Lookup | LookupReply | JoinDone)
                or (isinstance(message, LeaveWalk) and message.failed)
            )
        ):
            # a repair's step or a join's report overtaken by a shrink or a grow (another
            # departure's beside it, or the anchor's once it took the join for lost at a tick):
            # what it was about is gone with the old cube, and it is dropped. A lookup's
            # requester started its repair over in the new cube if the change reached it
            # (``_apply``), else it lags and asks for the change; an answer to the old one is
            # for a repair that is no more; a failure's walk is started over by its repairer
            # when the runtime reports the failure again (``_apply``: breaking here made the
            # holder of position 0, the shrink's root, rejoin, and its own repair wedged the
            # rest); the change cleared the admitted joins a report is about (breaking here
            # made an anchor rejoin in the middle of sixteen joins: ``python -m
            # bench.chaos_replay --superpeers 32 --cut-only 60``, seed 2)
            return True
        if required is not None and required < self._epoch and not restartable:
            raise RemoteProtocolError(
                sender,
                f"{message.KIND} of epoch {required} reached {self.node_id} in epoch "
                f"{self._epoch}: the cube changed dimension while it was in flight",
            )
        self._guarded(sender, lambda: self._handle(sender, message))
        return True

    def lagging(self) -> bool:
        """Whether this node holds messages of an epoch it has not reached: the change that
        began it may have been lost with a failed member (the runtime asks, after a while,
        with ``ask_for_missed_changes``)."""
        return any(
            (required := self._required_epoch(message)) is not None and required > self._epoch
            for _, message in self._held_back
        )

    def ask_for_missed_changes(
        self, addresses: Mapping[str, str], also: Iterable[str] = ()
    ) -> list[Output]:
        """Asks the senders of messages of a later epoch for the changes this node missed
        (``addresses``: the runtime's, for senders that are no neighbours in this epoch), and
        the members ``also`` names (the runtime's: neighbours that say the cube has another
        dimension, where no message of theirs was held here)."""

        def action() -> None:
            hood = self._member_hood("ask_for_missed_changes")
            senders = {
                sender
                for sender, message in self._held_back
                if (required := self._required_epoch(message)) is not None
                and required > self._epoch
            } | set(also)
            request = ChangeRequest(since=self._epoch, address=self.address)
            for sender in sorted(senders):
                address = hood.address_of(sender) if sender in hood.peers else addresses.get(sender)
                if address is not None:
                    self._send(sender, address, request)

        return self._run(action)

    def _on_change_request(self, sender: str, message: ChangeRequest) -> None:
        for epoch in range(message.since + 1, self._epoch + 1):
            change = self._changes.get(epoch)
            if change is not None:
                self._send(sender, message.address, replace(change, resent=True))

    def _flush(self) -> None:
        """Processes held-back messages that the node's epoch now allows, in arrival order."""
        progress = True
        while progress and self._held_back and self._state is NodeState.MEMBER:
            pending, self._held_back = self._held_back, []
            processed = [self._dispatch(sender, message) for sender, message in pending]
            progress = any(processed)

    def _require_no_join(self, sender: str, message: Message) -> None:
        if self._changing_tables():
            raise RemoteProtocolError(
                sender,
                f"{message.KIND} reached {self.node_id} while it takes part in a join: the "
                "protocol assumes a departure runs alone",
            )

    def _apply(self, change: Callable[[], None], message: Grow | Shrink) -> None:
        """Changes the dimension (``Neighbourhood.grow`` / ``shrink``): a new epoch begins."""
        assert not self._changing_tables(), "dimension change mid-take"
        # a repair's lookups of the old cube are dropped where they arrive: it starts over in
        # the new one
        repairing = self._repair
        self._repair = None
        # a repair walked in the old cube is dropped where its walk meets the new one, but
        # the one whose walk shrinks the cube (it goes on in the new one): the runtime's
        # next report of the failed node starts it over
        going_on = message.absent if isinstance(message, Shrink) else None
        self._repairs_started = {
            node: k
            for node, k in self._repairs_started.items()
            if node == going_on or (repairing is not None and node == repairing.failed)
        }
        # kept for nodes that miss it (a tree through a failed member): ``ChangeRequest``
        self._changes[self._epoch + 1] = replace(message, resent=False)
        for old in [epoch for epoch in self._changes if epoch <= self._epoch - KEPT_CHANGES]:
            del self._changes[old]
        # admitted walks of the old cube start over when they reach a node of the new one (a
        # shrink can overtake them); the ones waiting here for a grow start over at once
        self._admitted.clear()
        queued, self._queued = self._queued, []
        change()
        self._epoch += 1
        for walk in queued:
            self._restart_join(walk)
        if repairing is not None and repairing.failed in self._member_hood().peers:
            self._start_repair(
                repairing.failed, repairing.incarnation, repairing.last_heard, repairing.restarts
            )
        self._flush()
